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
from .runtime import Runtime
from .state import set_runtime

log = logging.getLogger("hangar.operator")


def _configure(settings: kopf.OperatorSettings) -> None:
    # Progress in annotations keeps status for what happened; no kopf bookkeeping in it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.hangar.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.hangar.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8


async def _health_app(rt: Runtime, ready: asyncio.Event, host: str, port: int) -> web.AppRunner:
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
    rt = Runtime(kube, db, settings)
    await rt.start()
    set_runtime(rt)
    ready = asyncio.Event()
    health = await _health_app(rt, ready, settings.operator_host, settings.operator_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    @kopf.on.startup()
    async def startup(settings: kopf.OperatorSettings, **_: object) -> None:
        _configure(settings)
        ready.set()

    log.info("hangar operator watching namespace %s", settings.namespace)
    try:
        await kopf.operator(
            standalone=True, namespaces=[settings.namespace], clusterwide=False, stop_flag=stop
        )
    finally:
        with contextlib.suppress(Exception):
            await rt.stop()
        set_runtime(None)
        await health.cleanup()
        await db.close()
        await kube.close()
