"""Read-only resources: a session or a job as JSON (the tools' views), and their activity events.

``hangar://sessions/<name>``, ``hangar://sessions/<name>/events{?since}``, ``hangar://jobs/<id>``,
``hangar://jobs/<id>/events{?since}`` (its attempts' activity events with the job's own; ``since`` is a
per-source cursor). Subscriptions to them: ``subscriptions.py``. The same access rule as the tools (``auth.py``); a refusal is a
resource error with the reason (not found: JSON-RPC -32602).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

from hangar.kube import Obj
from hangar.store import Database

from .. import deps, job_attempts
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
    tail = await d.last_events(scope, LAST_EVENTS)
    return {"events": [e.dump() for e in tail], "last_seq": tail[-1].seq if tail else 0}


def parse_cursor(since: str | None) -> dict[str, int] | int | None:
    """A job's ``since``: none, a number (every source), or ``source:seq`` pairs (``job:3,a1:12``)."""
    if since is None or since == "":
        return None
    if since.isdigit():
        return int(since)
    out: dict[str, int] = {}
    for part in since.split(","):
        key, _, seq = part.partition(":")
        if not re.fullmatch(r"job|a[0-9]+", key) or not seq.isdigit():
            raise ToolError(
                f"invalid: since={since!r}: give the cursor of an earlier read (like job:3,a1:12) or a number"
            )
        out[key] = int(seq)
    return out


async def job_events(hub: Hub, job: Obj, since: str | None) -> dict[str, Any]:
    """The job's events and its attempts' activity events, merged by time; ``cursor`` is where to read on."""
    name = job["metadata"]["name"]
    cursor = parse_cursor(since)
    sources: list[tuple[str, str, str | None]] = [("job", f"job/{name}", None)]
    for s in await job_attempts.attempt_sessions(hub.kube, job):
        session = s["metadata"]["name"]
        sources.append((session.removeprefix(f"{name}-"), f"session/{session}", session))
    merged: list[tuple[str, int, int, dict[str, Any]]] = []
    last: dict[str, int] = {}
    for order, (key, scope, session) in enumerate(sources):
        after = cursor if isinstance(cursor, int) else (cursor or {}).get(key, 0)
        page = await events(hub.db, scope, None if cursor is None else after)
        last[key] = int(page["last_seq"])
        for e in page["events"]:
            tagged = {**e, "source": key, **({"session": session} if session else {})}
            merged.append((str(e["at"]), order, int(e["seq"]), tagged))
    merged.sort(key=lambda m: m[:3])
    picked = [m[3] for m in merged]
    if cursor is None:
        picked = picked[-LAST_EVENTS:]
    return {"events": picked, "cursor": ",".join(f"{k}:{q}" for k, q in last.items())}


def register_resources(server: MCPServer[Any], hub: Hub, verifier: TokensVerifier) -> None:
    json_type = "application/json"

    @server.resource("hangar://sessions/{name}", mime_type=json_type)
    async def session_resource(name: str, ctx: Context[Any, Any]) -> str:
        """The session (JSON): phase, turns with their outcome and summary, question, pending approvals."""

        async def read() -> dict[str, Any]:
            s = await common.get_session(hub, mcp_caller(verifier, ctx), name)
            return session_view(s, await deps.session_turns(hub.kube, name))

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
            return job_view(
                j, await job_attempts.job_turns(hub.kube, j, await job_attempts.attempt_sessions(hub.kube, j))
            )

        return await _guard(read)

    @server.resource("hangar://jobs/{job_id}/events{?since}", mime_type=json_type)
    async def job_events_resource(job_id: str, ctx: Context[Any, Any], since: str | None = None) -> str:
        """Its agents' activity events (every attempt session's, each tagged with its session and source
        a<i>) merged with the job's own (job_state, attempt_started, …; source "job"), oldest first: the
        last 200, or with ?since=CURSOR the ones after it. CURSOR is the "cursor" of an earlier read
        ("job:3,a1:12": the last seq read of each source) or a number (the same seq for every source)."""

        async def read() -> dict[str, Any]:
            j = await common.get_job(hub, mcp_caller(verifier, ctx), job_id)
            return await job_events(hub, j, since)

        return await _guard(read)
