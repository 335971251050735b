"""Read-only resources: a session or a job as JSON (the tools' views), their activity events, a session's
work as a patch and the files its agent handed back.

``hangar://sessions/<name>``, ``hangar://sessions/<name>/events{?since}``, ``hangar://sessions/<name>/patch``
(``text/x-diff``), ``hangar://sessions/<name>/artifacts/<turn>/<path>`` (``artifacts.py``; its MIME type is the
file's, so :func:`read_special` serves it and the patch, with their metadata), ``hangar://jobs/<id>`` (with its
pull request), ``hangar://jobs/<id>/events{?since}`` (its attempts' activity events with the job's own;
``since`` is a per-source cursor). Subscriptions to them: ``subscriptions.py``. The same access rule as the
tools (``auth.py``); a refusal is a resource error with the reason (not found: JSON-RPC -32602).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST

from hangar.kube import Obj
from hangar.models import Job
from hangar.models.base import NAME_MAX, NAME_PATTERN
from hangar.store import Database

from .. import deps, job_attempts, patches
from ..approvals import waiting_on
from ..auth import Caller
from ..views import job_pr, job_view, session_view
from ..watch_cache import api_cache_of
from . import artifacts, common, inbox
from .auth import TokensVerifier, mcp_caller
from .common import Hub, refusals

LAST_EVENTS = 200
PAGE = 1000
DIFF = "text/x-diff"
T = TypeVar("T")
_PATCH_URI = re.compile(r"^hangar://sessions/([^/?#]+)/patch$")


async def _guard(read: Callable[[], Awaitable[dict[str, Any]]]) -> str:
    """A refusal is a JSON-RPC error with the reason: not found (-32602, the SDK's), a bad argument such as
    ``since`` (-32602), forbidden (-32600, as for subscribing)."""

    async def text() -> str:
        return json.dumps(await read())

    return await _guarded(text)


async def _guarded(read: Callable[[], Awaitable[T]]) -> T:
    try:
        with refusals():
            return await read()
    except ToolError as e:
        text = str(e)
        if text.startswith("not found"):
            raise ResourceNotFoundError(text) from None
        if text.startswith(("invalid", "refused")):  # the URI's argument can't be served: not -32603
            raise MCPError(INVALID_PARAMS, text) from None
        if text.startswith(("forbidden", "unauthorized")):
            raise MCPError(INVALID_REQUEST, text) from None
        raise ResourceError(text) from None


def parse_since(since: str | None) -> int | None:
    """A session's ``since``: none, or the ``last_seq`` of an earlier read (a whole number)."""
    if since is None or since == "":
        return None
    if not since.isdigit() or len(since) > 18:
        raise ToolError(f"invalid: since={since!r}: give the last_seq of an earlier read (a whole number)")
    return int(since)


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
    if since.isdigit() and len(since) <= 18:
        return int(since)
    out: dict[str, int] = {}
    for part in since.split(","):
        key, _, seq = part.partition(":")
        if not re.fullmatch(r"job|a[0-9]+", key) or not seq.isdigit() or len(seq) > 18:
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


# --- the work: the session's patch, the files its agent handed back ------------------------------------------
async def session_patch(hub: Hub, who: Caller, name: str) -> ReadResourceContents:
    """The session's work as one patch against its base (what ``git apply`` takes), as REST's
    ``GET /api/sessions/{name}/patch`` serves it; ``_meta`` names the base and head commits."""
    if not re.fullmatch(NAME_PATTERN, name) or len(name) > NAME_MAX:
        raise ToolError(f"invalid: session {name!r} is not a session name (a DNS label)")
    await common.get_session(hub, who, name)
    # The same function as REST's: 404 with no patch yet, 409 when the Environment names no repository.
    p = await patches.session_work_patch(hub.kube, hub.db, name)
    meta = {"hangar.dev/patch": p.summary()}  # base, head, source, truncated (then not git apply-able)
    return ReadResourceContents(content=p.patch, mime_type=DIFF, meta=meta)


async def artifact(hub: Hub, who: Caller, uri: str) -> ReadResourceContents:
    data, mime = await artifacts.read(hub, who, uri)
    return ReadResourceContents(content=data, mime_type=mime)


async def read_special(
    hub: Hub, verifier: TokensVerifier, uri: str, ctx: Context[Any, Any]
) -> list[ReadResourceContents] | None:
    """The resources whose MIME type or metadata is per read (the SDK's templates have one fixed type): a
    session's patch and its artifacts. None for any other URI."""
    if artifacts.is_artifact_uri(uri):
        return [await _guarded(lambda: artifact(hub, mcp_caller(verifier, ctx), uri))]
    if m := _PATCH_URI.match(uri):
        return [await _guarded(lambda: session_patch(hub, mcp_caller(verifier, ctx), m.group(1)))]
    return None


# --- what the spec lists on a session and a job, beside REST's view ----------------------------------------
def session_resource_view(s: Obj, turns: list[Obj], pending: list[dict[str, Any]]) -> dict[str, Any]:
    """The session as ``get_session`` returns it, plus ``state`` (its phase), ``summaries`` (each ended
    turn's) and ``question`` (the open one, when its latest turn ended on a question); ``turns`` and
    ``checkpoints`` are REST's."""
    out = session_view(s, turns, pending)
    ended = [t for t in out["turns"] if t["phase"] in ("Completed", "Failed", "Interrupted", "NeedsInput")]
    latest = out["turns"][-1] if out["turns"] else None
    out["state"] = out["phase"]
    out["summaries"] = [{"turn": t["name"], "outcome": t["outcome"], "summary": t["summary"]} for t in ended]
    out["question"] = latest["question"] if latest and latest["phase"] == "NeedsInput" else None
    return out


def job_resource_view(j: Obj, turns: list[Obj], pending: list[dict[str, Any]]) -> dict[str, Any]:
    """The job as ``get_job`` returns it (``state``, ``attempts``, ``turns``, ``delivery``), plus
    ``timeline`` (the job's own when it records one, else its created / started / finished times) and
    ``result`` (the latest completed turn's outcome, summary, result and artifacts) and ``pr``."""
    out = job_view(j, turns, pending)
    # The job's own timeline (job_view has it as recorded), else one made of its created / started / finished.
    if "timeline" not in Job.model_validate(j).status.model_fields_set:
        out["timeline"] = [
            {"at": at, "event": event}
            for at, event in (
                (out["created_at"], "created"),
                (out["started_at"], "started"),
                (out["finished_at"], out["state"]),
            )
            if at
        ]
    out["pr"] = job_pr(
        j
    )  # the pull request (or pushed branch): url, number, branch, head_commit; null before
    done = [t for t in out["turns"] if t["outcome"] == "completed"]
    last = max(done, key=lambda t: t["finished_at"] or "", default=None)
    out["result"] = (
        {k: last[k] for k in ("name", "session", "outcome", "summary", "result", "artifacts")}
        if last
        else None
    )
    return out


def register_resources(server: MCPServer[Any], hub: Hub, verifier: TokensVerifier) -> None:
    json_type = "application/json"

    @server.resource("hangar://sessions/{name}", mime_type=json_type)
    async def session_resource(name: str, ctx: Context[Any, Any]) -> str:
        """The session (JSON): state, turns with their outcome and summary, summaries, question, checkpoints,
        pending approvals."""

        async def read() -> dict[str, Any]:
            s = await common.get_session(hub, mcp_caller(verifier, ctx), name)
            pending = await waiting_on(hub.kube, [name], api_cache_of(hub.state))
            return session_resource_view(s, await deps.session_turns(hub.kube, name), pending)

        return await _guard(read)

    @server.resource("hangar://sessions/{name}/events{?since}", mime_type=json_type)
    async def session_events(name: str, ctx: Context[Any, Any], since: str | None = None) -> str:
        """The session's activity events: the last 200, or with ?since=SEQ the ones after SEQ."""

        async def read() -> dict[str, Any]:
            after = parse_since(since)
            await common.get_session(hub, mcp_caller(verifier, ctx), name)
            return await events(hub.db, f"session/{name}", after)

        return await _guard(read)

    # Listed here for resources/templates/list; HangarServer.read_resource serves them (read_special).
    @server.resource("hangar://sessions/{name}/patch", mime_type=DIFF)
    async def patch_resource(name: str, ctx: Context[Any, Any]) -> str:
        """The session's work as one patch against the base branch (text/x-diff, what git apply takes)."""
        [p] = await read_special(hub, verifier, f"hangar://sessions/{name}/patch", ctx) or []
        return str(p.content)

    @server.resource(artifacts.TEMPLATE, mime_type=artifacts.OCTETS)
    async def artifact_resource(name: str, turn: str, path: str, ctx: Context[Any, Any]) -> str | bytes:
        """A file the agent handed back in that turn (its number or name), by the name it was handed back
        under: text as text, anything else as a base64 blob, with its MIME type."""
        uri = f"hangar://sessions/{name}/artifacts/{turn}/{path}"
        [a] = await read_special(hub, verifier, uri, ctx) or []
        return a.content

    @server.resource(inbox.URI, mime_type=json_type)
    async def inbox_resource() -> str:
        """What needs you: approvals waiting for a person, agents' questions, jobs done with a pull request
        to review, failed jobs; only what your token may see. Subscribe to follow it."""

        async def read() -> dict[str, Any]:
            return await inbox.read(hub, mcp_caller(verifier, None))

        return await _guard(read)

    @server.resource("hangar://jobs/{job_id}", mime_type=json_type)
    async def job_resource(job_id: str, ctx: Context[Any, Any]) -> str:
        """The job (JSON): state, timeline, result, attempts, turns, question, pending approvals, delivery."""

        async def read() -> dict[str, Any]:
            j = await common.get_job(hub, mcp_caller(verifier, ctx), job_id)
            sessions = await job_attempts.attempt_sessions(hub.kube, j)
            names = [s["metadata"]["name"] for s in sessions]
            pending = await waiting_on(hub.kube, names, api_cache_of(hub.state), attempts=True)
            return job_resource_view(j, await job_attempts.job_turns(hub.kube, j, sessions), pending)

        return await _guard(read)

    @server.resource("hangar://jobs/{job_id}/events{?since}", mime_type=json_type)
    async def job_events_resource(job_id: str, ctx: Context[Any, Any], since: str | None = None) -> str:
        """Its agents' activity events (every attempt session's, each tagged with its session and source
        a<i>) merged with the job's own (job_state, attempt_started, …; source "job"), oldest first: the
        last 200, or with ?since=CURSOR the ones after it. CURSOR is the "cursor" of an earlier read
        ("job:3,a1:12": the last seq read of each source) or a number (the same seq for every source)."""

        async def read() -> dict[str, Any]:
            parse_cursor(since)  # a bad cursor is refused before anything is read
            j = await common.get_job(hub, mcp_caller(verifier, ctx), job_id)
            return await job_events(hub, j, since)

        return await _guard(read)
