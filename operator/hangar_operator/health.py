"""The operator's /healthz (liveness), /readyz (readiness) and /metrics, on HANGAR_OPERATOR_PORT.

Ready: kopf has run its startup and listed the namespaces and resources it serves (its watches start from
there), the apiserver lets this ServiceAccount list every kind it watches in every served namespace, and
the driver gateway accepts connections. Live: the event loop answers (a wedged loop answers nothing and the
probe times out), and kopf and the gateway are still running; nothing outside the process, so an apiserver
outage restarts no operator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from kopf._cogs.structs.references import Insights  # not re-exported; kopf.operator takes it
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hangar.health import Check, Checks, flag, listable, report
from hangar.kube import Kube

from .gateway import Gateway


def _running(alive: Callable[[], bool], what: str) -> Check:
    async def check() -> None:
        if not alive():
            raise RuntimeError(f"{what} has stopped")

    return check


def checks(
    kube: Kube,
    namespaces: tuple[str, ...],
    gateway: Gateway,
    started: asyncio.Event,
    insights: Insights,
    kopf_alive: Callable[[], bool],
) -> tuple[Checks, Checks]:
    """(readiness, liveness). ``insights``: kopf's, whose flags say its first listing of namespaces and
    resources is done (its watches start from there)."""
    ready = Checks(
        {
            "kopf": flag(started, "kopf's startup"),
            "namespaces": flag(insights.ready_namespaces, "kopf's listing of the served namespaces"),
            "resources": flag(insights.ready_resources, "kopf's discovery of the watched resources"),
            "watches": listable(kube, namespaces),
            "gateway": _running(lambda: gateway.serving, "the driver gateway"),
        }
    )
    live = Checks(
        {
            "kopf": _running(kopf_alive, "kopf"),
            "gateway": _running(lambda: gateway.serving, "the driver gateway"),
        },
        ttl=0,
    )
    return ready, live


async def serve(ready: Checks, live: Checks, host: str, port: int) -> web.AppRunner:
    async def answer(probe: Checks, request: web.Request) -> web.Response:
        # "ok" when it passes (as the apiserver's /readyz); each check's line when not, or with ?verbose.
        ok, results = await probe.run()
        text = report(results) if not ok or "verbose" in request.query else "ok"
        return web.Response(status=200 if ok else 503, text=text)

    async def healthz(request: web.Request) -> web.Response:
        return await answer(live, request)

    async def readyz(request: web.Request) -> web.Response:
        return await answer(ready, request)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
