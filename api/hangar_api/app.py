"""The api sidecar: REST and MCP (and, later, the governance webhook) over hangar's resources."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from hangar import health
from hangar.bodies import Body
from hangar.config import Settings
from hangar.kube import Kube
from hangar.store import open_database
from hangar.turns import create_turn

from . import (
    approvals,
    connect,
    errors,
    governance,
    job_approvals,
    job_release,
    job_steering,
    jobs,
    mcp,
    minted_tokens,
    patches,
    sessions,
    steering,
    turn_watch,
    watch_cache,
)
from .auth import Tokens
from .guard import Guard
from .ratelimit import RateLimiter
from .request_metrics import RequestMetrics

log = logging.getLogger("hangar.api")


class TurnFactory:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def create(self, session: str, message: Body, *, by: str) -> str:
        return await create_turn(self.kube, session, message, by=by)


def create_app(settings: Settings, kubeconfig: str | None = None, *, kube: Kube | None = None) -> FastAPI:
    """The app. Raises :class:`hangar.config.SettingsError` at once (not when it starts serving) when the
    tokens are not right. ``kube``: use this one instead of connecting (the unit tier's fake)."""
    tokens = Tokens.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.kube = kube if kube is not None else await Kube.connect(kubeconfig, settings.namespace)
        app.state.db = await open_database(settings.database_url)
        app.state.minted_miss_lock = asyncio.Lock()  # minted_tokens.refresh_on_miss: misses share one read
        app.state.turns = TurnFactory(app.state.kube)
        app.state.governance = _governance(settings, app.state.kube, app.state.db)
        app.state.readiness = _readiness(settings, app.state.kube, app.state.db)
        # The approval routes' caches list and watch from the start, so the first poll is already served.
        watch_cache.api_cache_of(app.state)
        app.state.ready = True
        minted = asyncio.create_task(minted_tokens.keep_fresh(app.state), name="minted-tokens")
        try:
            async with mcp_server.session_manager.run():
                yield
        finally:
            minted.cancel()
            mcp.stop(app.state)
            if app.state.governance is not None:
                await app.state.governance.close()
            turn_watch.stop_watch(app.state)
            watch_cache.stop_cache(app.state)
            await app.state.db.close()
            await app.state.kube.close()

    app = FastAPI(
        title="hangar",
        version="0.1.0",
        description="Run coding agents in sandbox pods as named sessions and jobs; steer, interrupt and "
        "approve them.",
        lifespan=lifespan,
    )
    app.state.ready = False
    app.state.tokens = tokens
    app.state.body_max = settings.api_body_max
    app.state.rate_limiter = RateLimiter(settings.api_write_rate, settings.api_write_burst)
    app.include_router(sessions.router)
    app.include_router(approvals.router)
    app.include_router(steering.router)
    app.include_router(jobs.router)
    app.include_router(job_steering.router)
    app.include_router(job_approvals.router)
    app.include_router(governance.router)
    app.include_router(patches.router)
    app.include_router(job_release.router)
    app.include_router(connect.router)
    app.state.settings = settings
    mcp_server = mcp.mount(app)
    errors.install(app)
    app.add_middleware(Guard)
    app.add_middleware(RequestMetrics)  # outside the guard, so its refusals are counted

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> PlainTextResponse:
        # Live: this answers at all (uvicorn's loop is not wedged); the apiserver and the database are
        # readiness matters, so their outage takes the api out of the Service instead of restarting it.
        return PlainTextResponse("ok")

    @app.get("/readyz", include_in_schema=False)
    async def readyz(verbose: str | None = None) -> PlainTextResponse:
        if not app.state.ready:
            return PlainTextResponse("starting", status_code=503)
        ok, results = await app.state.readiness.run()
        text = health.report(results) if not ok or verbose is not None else "ok"
        return PlainTextResponse(text, status_code=200 if ok else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app


def _readiness(settings: Settings, kube: Kube, db: Any) -> health.Checks:
    """Ready: the apiserver lets this ServiceAccount list sessions here, and the database answers."""

    async def database() -> None:
        await db.last_seq("hangar-readyz")

    return health.Checks(
        {"apiserver": health.listable(kube, (settings.namespace,), ("sessions",)), "database": database}
    )


def _governance(settings: Settings, kube: Kube, db: Any) -> governance.Governance | None:
    """The webhook's state while governance is on (any kind in shadow or enforce), else None: 404."""
    if not settings.governance_on or settings.governance_webhook_secret is None:
        return None
    secrets = governance.WebhookSecrets(kube, settings.governance_webhook_secret)
    tower = None
    if settings.governance_url:
        credential = (
            settings.governance_credential.get_secret_value() if settings.governance_credential else ""
        )
        tower = governance.TowerClient(settings.governance_url, credential)
    return governance.Governance(kube, db, secrets, tower, settings.governance_mode("approval"))


def serve(app: FastAPI, settings: Settings, host: str = "0.0.0.0") -> None:
    import uvicorn

    # log_config=None: uvicorn keeps hangar's logging (JSON, HANGAR_LOG_LEVEL) instead of its own.
    uvicorn.run(app, host=host, port=settings.api_port, log_level=settings.log_level, log_config=None)
