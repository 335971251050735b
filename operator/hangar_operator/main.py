"""`hangar operator`: the kopf operator, the driver gateway, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

import kopf
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hangar.config import Settings
from hangar.kube import Kube
from hangar.store import open_database

from . import handlers  # noqa: F401  (registers the handlers)
from .controllers import build

log = logging.getLogger("hangar.operator")


# Kept out of kopf's diff-base (its last-handled-configuration annotation): message bodies and the
# object's own annotations. kopf copies the essence of every object it handles into that annotation, and
# Kubernetes caps an object's annotations at 256 KiB: a large prompt (or large annotations) copied there
# made every kopf write fail, so a Session could no longer be deleted (its finalizer stayed). No handler
# reacts to these fields changing: a prompt is read once, and a Turn's requests come by raw events.
DIFFBASE_IGNORED = (
    "metadata.annotations",
    "spec.prompt",
    "spec.promptRef",
    "spec.message",
    "spec.messageRef",
    "spec.steers",
    "spec.interrupts",
)


def configure(settings: kopf.OperatorSettings) -> None:
    # Progress in annotations keeps status for what happened; no kopf bookkeeping in it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.hangar.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.hangar.dev", key="last-handled-configuration", ignored_fields=DIFFBASE_IGNORED
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8


async def _health_app(ready: asyncio.Event, host: str, port: int) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if ready.is_set() else web.Response(status=503, text="starting")

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


async def run(settings: Settings, kubeconfig: str | None = None) -> None:
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    kube = await Kube.connect(kubeconfig, settings.namespace)
    db = await open_database(settings.database_url)
    controllers = build(kube, db, settings)
    await controllers.start()
    log.info("driver gateway listening on %s:%s", settings.gateway_host, controllers.ctx.gateway_port)
    ready = asyncio.Event()
    health = await _health_app(ready, settings.operator_host, settings.operator_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    @kopf.on.startup()
    async def startup(settings: kopf.OperatorSettings, **_: object) -> None:
        configure(settings)
        ready.set()

    namespaces = [] if settings.watch_all else list(settings.watch_namespaces)
    log.info(
        "hangar operator serving namespaces %s (home %s)",
        "every namespace" if settings.watch_all else ",".join(namespaces),
        settings.namespace,
    )
    try:
        await kopf.operator(
            standalone=True,
            namespaces=namespaces,
            clusterwide=settings.watch_all,
            stop_flag=stop,
            memo=kopf.Memo(controllers=controllers),
        )
    finally:
        with contextlib.suppress(Exception):
            await controllers.stop()
        await health.cleanup()
        await db.close()
        await kube.close()
