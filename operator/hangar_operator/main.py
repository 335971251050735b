"""`hangar operator`: the kopf operator, the driver gateway, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import socket

import kopf
from kopf._cogs.structs.references import Insights  # not re-exported; kopf.operator takes it

from hangar.config import Settings
from hangar.kube import Kube
from hangar.store import open_database

from . import (
    handlers,  # registers the handlers
    health,
)
from .controllers import build
from .diffbase import DiffBase, Progress
from .driver_mount import check_driver_mount, served_namespace

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


# Sessions' in memory (diffbase.py), the other kinds' in kopf's annotation.
DIFFBASE = DiffBase(
    prefix="kopf.hangar.dev", key="last-handled-configuration", ignored_fields=DIFFBASE_IGNORED
)


def configure(settings: kopf.OperatorSettings) -> None:
    # Progress in annotations keeps status for what happened; no kopf bookkeeping in it.
    settings.persistence.progress_storage = Progress(prefix="kopf.hangar.dev")
    settings.persistence.diffbase_storage = DIFFBASE
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.watching.label_selectors["", "v1", "pods"] = handlers.POD_SELECTOR
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8


async def run(settings: Settings, kubeconfig: str | None = None) -> None:
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    kube = await Kube.connect(kubeconfig, settings.namespace)
    # A namespace whose pods it makes (the home one may serve nothing but the api).
    await check_driver_mount(kube.scoped(served_namespace(settings)), settings)
    db = await open_database(settings.database_url)
    controllers = build(kube, db, settings)
    controllers.ctx.cache.observers.append(DIFFBASE.observe)  # a session the cache drops, kopf forgets
    await controllers.start()
    log.info("driver gateway listening on %s:%s", settings.gateway_host, controllers.ctx.gateway_port)
    started = asyncio.Event()  # kopf raises it once its startup ran and its watchers may start
    # SIGTERM and SIGINT are kopf's own (it installs its handlers, replacing any set here): a stop flag of
    # ours would never be raised, and kopf waits 5 s for its waiter as a hung task at every stop.

    stopping: list[asyncio.Task[None]] = []

    def stop_controllers() -> asyncio.Task[None]:
        if not stopping:  # once, whichever asks first
            stopping.append(asyncio.create_task(controllers.stop()))
        return stopping[0]

    @kopf.on.startup()
    async def startup(settings: kopf.OperatorSettings, **_: object) -> None:
        configure(settings)

    @kopf.on.cleanup()
    async def cleanup(**_: object) -> None:
        # Our tasks (the gateway's and the live channel's connections, the sweepers) end here, before kopf
        # waits 5 s for every task still running after its own have stopped.
        with contextlib.suppress(Exception):
            await stop_controllers()

    namespaces = [] if settings.watch_all else list(settings.watch_namespaces)
    log.info(
        "hangar operator serving namespaces %s (home %s)",
        "every namespace" if settings.watch_all else ",".join(namespaces),
        settings.namespace,
    )
    _identity()
    insights = Insights()
    operator = asyncio.create_task(
        kopf.operator(
            standalone=True,
            namespaces=namespaces,
            clusterwide=settings.watch_all,
            ready_flag=started,
            insights=insights,
            memo=kopf.Memo(controllers=controllers),
        )
    )
    ready, live = health.checks(
        kube,
        ("*",) if settings.watch_all else settings.watch_namespaces,
        controllers.ctx.gateway,
        started,
        insights,
        lambda: not operator.done(),
    )
    server = await health.serve(ready, live, settings.operator_host, settings.operator_port)
    try:
        await operator
    finally:
        with contextlib.suppress(Exception):
            await stop_controllers()
        await server.cleanup()
        await db.close()
        await kube.close()


def _identity() -> None:
    """kopf names this operator after the OS user unless POD_ID is set (the chart sets the pod's name); a uid
    without a passwd entry (any runAsUser an image doesn't list) would make it fail at start."""
    if os.environ.get("POD_ID"):
        return
    try:
        pwd.getpwuid(os.getuid())
    except KeyError:
        os.environ["POD_ID"] = socket.gethostname()
