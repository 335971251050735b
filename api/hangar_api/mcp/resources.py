"""Read-only resources: a session or a job as JSON (the tools' views), and their activity events.

``hangar://sessions/<name>``, ``hangar://sessions/<name>/events{?since}``, ``hangar://jobs/<id>``,
``hangar://jobs/<id>/events{?since}``. The same access rule as the tools (``auth.py``); a refusal is a
resource error with the reason (not found: JSON-RPC -32602).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

from hangar.store import Database

from .. import jobs, sessions
from ..views import job_view, session_view
from . import common
from .auth import TokensVerifier, mcp_caller
from .common import Hub, refusals

LAST_EVENTS = 200
PAGE = 1000


async def _guard(read: Callable[[], Awaitable[dict[str, Any]]]) -> str:
    try:
        with refusals():
            return json.dumps(await read())
    except ToolError as e:
        if str(e).startswith("not found"):
            raise ResourceNotFoundError(str(e)) from None
        raise ResourceError(str(e)) from None


async def events(d: Database, scope: str, since: int | None) -> dict[str, Any]:
    """The events after ``since`` (up to 1000), or without it the last 200."""
    if since is not None:
        page = await d.events(scope, since, PAGE)
        return {"events": [e.dump() for e in page], "last_seq": page[-1].seq if page else since}
    tail: list[Any] = []
    after = 0
    while True:
        page = await d.events(scope, after, PAGE)
        tail = (tail + page)[-LAST_EVENTS:]
        if len(page) < PAGE:
            break
        after = page[-1].seq
    return {"events": [e.dump() for e in tail], "last_seq": tail[-1].seq if tail else 0}


def register_resources(server: MCPServer[Any], hub: Hub, verifier: TokensVerifier) -> None:
    json_type = "application/json"

    @server.resource("hangar://sessions/{name}", mime_type=json_type)
    async def session_resource(name: str, ctx: Context[Any, Any]) -> str:
        """The session (JSON): phase, turns with their outcome and summary, question, pending approvals."""

        async def read() -> dict[str, Any]:
            s = await common.get_session(hub, mcp_caller(verifier, ctx), name)
            return session_view(s, await sessions.session_turns(hub.kube, name))

        return await _guard(read)

    @server.resource("hangar://sessions/{name}/events{?since}", mime_type=json_type)
    async def session_events(name: str, ctx: Context[Any, Any], since: int | None = None) -> str:
        """The session's activity events: the last 200, or with ?since=SEQ the ones after SEQ."""

        async def read() -> dict[str, Any]:
            await common.get_session(hub, mcp_caller(verifier, ctx), name)
            return await events(hub.db, f"session/{name}", since)

        return await _guard(read)

    @server.resource("hangar://jobs/{job_id}", mime_type=json_type)
    async def job_resource(job_id: str, ctx: Context[Any, Any]) -> str:
        """The job (JSON): state, attempts, turns, question, pending approvals."""

        async def read() -> dict[str, Any]:
            j = await common.get_job(hub, mcp_caller(verifier, ctx), job_id)
            return job_view(j, await jobs.job_turns(hub.kube, j, await jobs.attempt_sessions(hub.kube, j)))

        return await _guard(read)

    @server.resource("hangar://jobs/{job_id}/events{?since}", mime_type=json_type)
    async def job_events(job_id: str, ctx: Context[Any, Any], since: int | None = None) -> str:
        """The job's own events (job_state, attempt_started, tainted, approval_request), as REST's
        /api/jobs/{id}/events: the last 200, or with ?since=SEQ the ones after SEQ."""

        async def read() -> dict[str, Any]:
            await common.get_job(hub, mcp_caller(verifier, ctx), job_id)
            return await events(hub.db, f"job/{job_id}", since)

        return await _guard(read)
