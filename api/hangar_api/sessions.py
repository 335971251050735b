"""REST routes for sessions, their turns and activity events. Every route acts by creating or patching
resources; the operator does the rest."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from pydantic import Field

from hangar.bodies import Body, stow
from hangar.kube import ApiException, Kube
from hangar.models import Session
from hangar.models.base import LIVE_HARNESSES, NAME_MAX, NAME_PATTERN, ApprovalPolicy, Harness
from hangar.store import Database

from . import schemas as S
from . import steering
from .approvals import waiting_on
from .auth import Caller
from .deps import SEQ_MAX, TURN_MAX, Admin, DbDep, KubeDep, events_page, get_session, session_turns
from .errors import api_error
from .fields import EnvironmentName, MessageText, ModelId, RequestBody
from .names import SessionRef
from .routing import Route
from .views import session_view, turn_view
from .watch_cache import CacheDep

router = APIRouter(prefix="/api/sessions", tags=["sessions"], route_class=Route)


class NewSession(RequestBody):
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    environment: EnvironmentName
    message: MessageText | None = None
    harness: Harness = "claude"
    approvals: ApprovalPolicy | None = None
    model: ModelId | None = None
    tainted: bool = False


class Message(RequestBody):
    message: MessageText


class Fork(RequestBody):
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)
    message: MessageText | None = None
    approvals: ApprovalPolicy | None = Field(default=None, description="Overrides the parent's policy")


@router.post("", status_code=201, response_model=S.SessionView)
async def create_session(
    body: NewSession, who: Admin, k: KubeDep, d: DbDep, c: CacheDep = None
) -> dict[str, Any]:
    # The cache can say an Environment exists, never that it doesn't: a miss reads the apiserver.
    known = c is not None and c.environment_known(body.environment)
    if not known and await k.get("environments", body.environment) is None:
        raise HTTPException(
            422, f"unknown environment {body.environment!r}: create it first (kind Environment)"
        )
    spec: dict[str, Any] = {"harness": body.harness, "environment": body.environment, "tainted": body.tainted}
    if body.approvals:
        spec["approvals"] = body.approvals
    if body.model:
        spec["model"] = body.model
    if body.message:
        spec.update((await stow(d, body.message)).fields("prompt"))
    created = await _create(k, body.name, spec, who)
    await d.audit(
        who.subject, "session.create", body.name, harness=body.harness, environment=body.environment
    )
    return session_view(created, [])


async def _create(k: Kube, name: str, spec: dict[str, Any], who: Caller) -> dict[str, Any]:
    obj = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": name, "annotations": {"hangar.dev/created-by": who.subject}},
        "spec": spec,
    }
    try:
        return await k.create("sessions", obj)
    except ApiException as e:
        if e.status == 409:
            raise HTTPException(409, f"session {name!r} already exists") from None
        raise api_error(e, f"session {name!r} can't be created") from None


@router.post("/{ref}/fork", status_code=201, response_model=S.SessionView)
async def fork_session(ref: SessionRef, body: Fork, who: Admin, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """A new session that starts from this one: its conversation, a clone of its workspace, its policy
    and its taint. The operator takes them from the parent (``spec.forkOf``), as for a kubectl fork."""
    parent = await get_session(k, ref)
    pspec = parent["spec"]
    spec: dict[str, Any] = {
        "harness": pspec.get("harness", "claude"),
        "environment": pspec["environment"],
        "forkOf": ref,
    }
    if pspec.get("model"):
        spec["model"] = pspec["model"]
    if body.approvals:
        spec["approvals"] = body.approvals
    if body.message:
        spec.update((await stow(d, body.message)).fields("prompt"))
    created = await _create(k, body.name, spec, who)
    await d.audit(who.subject, "session.fork", body.name, parent=ref, approvals=body.approvals)
    return session_view(created, [])


@router.get("", response_model=S.SessionList)
async def list_sessions(_: Admin, k: KubeDep) -> dict[str, Any]:
    items = await k.list("sessions")
    return {"sessions": [session_view(s) for s in sorted(items, key=lambda s: s["metadata"]["name"])]}


@router.get("/{ref}", response_model=S.SessionView)
async def read_session(ref: SessionRef, _: Admin, k: KubeDep, c: CacheDep) -> dict[str, Any]:
    # Side by side: a client polling for a status change waits one apiserver round trip, not two.
    s, turns, pending = await asyncio.gather(
        get_session(k, ref), session_turns(k, ref), waiting_on(k, [ref], c)
    )
    return session_view(s, turns, pending)


@router.delete("/{ref}", status_code=202, response_model=S.Deleted)
async def delete_session(
    ref: Annotated[str, Path(description="A session's name", examples=["old-demo"])],
    who: Admin,
    k: KubeDep,
    d: DbDep,
) -> dict[str, Any]:
    await get_session(k, ref)
    await k.delete("sessions", ref)
    await d.audit(who.subject, "session.delete", ref)
    return {"deleted": ref}


@router.post("/{ref}/messages", status_code=202, response_model=S.SendAnswer)
async def send_message(
    ref: SessionRef, body: Message, who: Admin, request: Request, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Starts a turn when the session is idle. While a Claude Code or Codex turn runs, the message steers
    it (``kind: steer``; it starts the next turn if that turn ends first). On a busy one-shot session the
    message waits as the next turn."""
    return await send(k, d, request.app.state.turns, who, ref, body.message)


async def send(k: Kube, d: Database, turns: Any, who: Caller, ref: str, text: str) -> dict[str, Any]:
    """What ``POST /api/sessions/{ref}/messages`` does (also the MCP tool ``send_to_session``)."""
    s = await get_session(k, ref)
    message: Body = await stow(d, text)
    st = Session.model_validate(s).status
    if st.phase == "Failed":
        raise HTTPException(409, f"session {ref!r} failed: {st.message}")
    stopped = bool(s["spec"].get("stopped"))
    if s["spec"].get("harness", "claude") in LIVE_HARNESSES and not stopped:
        running = await steering.running_turn(k, s)
        if running is not None:
            out = await steering.steer_turn(k, running, message, who.subject)
            await d.audit(
                who.subject, "session.steer", ref, turn=out["turn"]["name"], steer=out["steer"]["id"]
            )
            return out
    turn = await turns.create(ref, message, by=who.subject)
    await d.audit(who.subject, "session.send", ref, turn=turn)
    if stopped:
        # A new message after a stop (a person's, or Tower's run.stop) starts a new run: the turn exists
        # first, so the operator finds it queued when the session starts again.
        await k.patch("sessions", ref, {"spec": {"stopped": False, "stoppedBy": None, "stopReason": None}})
        await d.audit(who.subject, "session.restart", ref, turn=turn)
    t = await k.get("turns", turn)
    return {"turn": turn_view(t) if t else {"name": turn}, "kind": "turn"}


@router.get("/{ref}/turns", response_model=S.TurnList)
async def list_turns(ref: SessionRef, _: Admin, k: KubeDep) -> dict[str, Any]:
    await get_session(k, ref)
    turns = sorted(await session_turns(k, ref), key=lambda t: int(t["spec"].get("index", 0)))
    return {"turns": [turn_view(t) for t in turns]}


@router.get("/{ref}/turns/{n}", response_model=S.TurnView)
async def read_turn(ref: SessionRef, n: int, _: Admin, k: KubeDep) -> dict[str, Any]:
    await get_session(k, ref)
    t = await k.get("turns", f"{ref}-{n}") if 1 <= n <= TURN_MAX else None
    if t is None or t["spec"].get("session") != ref:
        raise HTTPException(404, f"session {ref!r} has no turn {n}")
    return turn_view(t)


@router.get("/{ref}/events", response_model=S.EventPage)
async def read_events(
    ref: SessionRef,
    _: Admin,
    k: KubeDep,
    d: DbDep,
    response: Response,
    since: Annotated[int, Query(ge=0, le=SEQ_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    await get_session(k, ref)
    return await events_page(d, f"session/{ref}", since, limit, response)
