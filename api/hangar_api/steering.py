"""REST routes for steering a session's running turn: steer, withdraw, interrupt, classify.

Every route writes a request into the Turn's ``spec`` the way ``kubectl patch`` would (an atomic JSON patch:
appends never overwrite each other, and an edit of steer ``i`` is guarded by a ``test`` of its id); the
operator delivers it and records what happened in ``status`` (operator/hangar_operator/steering.py). Bad
input is refused before anything is written.

The turn-level functions (:func:`steer_turn`, :func:`withdraw_steer`, :func:`interrupt_turn`,
:func:`classify`) don't care whether the turn belongs to a session or a job; the session routes below only
find the turn and check who may ask. The job routes reuse them.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from hangar.bodies import Body as Message
from hangar.bodies import stow, turn_room
from hangar.kube import ApiException, Kube, Obj
from hangar.models import LIVE_HARNESSES, Session, Turn

from . import names
from . import schemas as S
from .deps import Admin, DbDep, KubeDep, get_session, session_turns
from .errors import api_error
from .fields import MessageText, RequestBody
from .names import SessionRef, SteerId
from .routing import Route
from .turn_watch import TurnWatch, turn_watch
from .views import interrupt_view, item_state, steer_view

router = APIRouter(prefix="/api/sessions", tags=["steering"], route_class=Route)


class SteerBody(RequestBody):
    message: MessageText = Field(description="Added to the running turn")


class InterruptBody(RequestBody):
    message: MessageText | None = Field(
        default=None,
        description="Stop, then go on with this: in the same turn when it is live, else as the next turn",
    )


class ClassBody(RequestBody):
    klass: Literal["correction", "redirect", "new_info"] = Field(alias="class")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


# --- writing the Turn's spec ---------------------------------------------------------------------------
def _api_error(e: ApiException) -> HTTPException:
    return api_error(e)


class _TurnWriter:
    """Write-combining for one Turn's spec. Concurrent JSON patches of one object make the apiserver retry
    each against the others' results (a burst of 100 withdraws on one turn stalled it for seconds). Here a
    write waits while another is in flight, and everything that queued meanwhile goes out as one patch."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.queue: list[tuple[list[dict[str, Any]], asyncio.Future[Obj]]] = []


_writers: dict[str, _TurnWriter] = {}


async def _patch_spec(k: Kube, turn_name: str, ops: list[dict[str, Any]]) -> Obj:
    """Apply JSON-patch ``ops`` to the Turn, combined with the ops of concurrent callers. A combined patch
    that fails (one caller's ``test`` no longer holds) is retried op list by op list, so each caller gets
    its own answer. Raises ApiException."""
    if len(_writers) > 10000:
        for key in [key for key, w in _writers.items() if not w.lock.locked() and not w.queue]:
            del _writers[key]
    w = _writers.setdefault(turn_name, _TurnWriter())
    fut: asyncio.Future[Obj] = asyncio.get_running_loop().create_future()
    w.queue.append((ops, fut))
    async with w.lock:
        if not fut.done():
            batch, w.queue = w.queue, []
            try:
                obj = await k.patch("turns", turn_name, [op for mine, _ in batch for op in mine])
                for _, f in batch:
                    f.set_result(obj)
            except ApiException as e:
                if len(batch) == 1:
                    fut.set_exception(e)
                else:
                    for mine, f in batch:
                        try:
                            f.set_result(await k.patch("turns", turn_name, mine))
                        except ApiException as e1:
                            f.set_exception(e1)
    return await fut


async def _append(k: Kube, turn: Obj, field: str, item: dict[str, Any]) -> Obj:
    """Append ``item`` to ``spec.<field>``: a JSON-patch append, which concurrent appends can't overwrite;
    the first item creates the list under a resourceVersion precondition (retried on a conflict). The turn's
    budget (409/413 naming the limit) is checked on each read; ``maxItems`` holds it against racing appends."""
    turn_name = turn["metadata"]["name"]
    for attempt in range(8):
        if attempt:
            fresh = await k.get("turns", turn_name)
            if fresh is None:
                raise HTTPException(404, f"turn {turn_name!r} is gone")
            turn = fresh
        if (full := turn_room(turn, field, item)) is not None:
            raise HTTPException(*full)
        try:
            if isinstance(turn["spec"].get(field), list):
                return await _patch_spec(
                    k, turn_name, [{"op": "add", "path": f"/spec/{field}/-", "value": item}]
                )
            rv = turn["metadata"]["resourceVersion"]
            return await k.patch(
                "turns", turn_name, {"metadata": {"resourceVersion": rv}, "spec": {field: [item]}}
            )
        except ApiException as e:
            if e.status == 409 or (e.status == 422 and attempt < 2):
                continue  # the list was created meanwhile / is not there after all: read again
            raise _api_error(e) from None
    raise HTTPException(409, f"turn {turn_name!r} kept changing: try again")


async def _edit(k: Kube, turn_name: str, field: str, index: int, item_id: str, values: dict[str, Any]) -> Obj:
    """Set keys of ``spec.<field>[index]``, guarded by a test of its id (items are only ever appended)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": f"/spec/{field}/{index}/id", "value": item_id}]
    ops += [{"op": "add", "path": f"/spec/{field}/{index}/{key}", "value": v} for key, v in values.items()]
    try:
        return await _patch_spec(k, turn_name, ops)
    except ApiException as e:
        raise _api_error(e) from None


# --- the turn-level operations (sessions and jobs) -----------------------------------------------------
async def steer_turn(
    k: Kube,
    turn: Obj,
    message: Message,
    by: str,
    klass: str = "unclassified",
    classified_by: str | None = None,
) -> dict[str, Any]:
    """``message`` as the Turn is to hold it (``hangar.bodies.stow``)."""
    name = turn["metadata"]["name"]
    req = {"id": new_id("st"), **message.fields(), "by": by, "class": klass}
    if classified_by and klass != "unclassified":
        req.update({"classifiedBy": classified_by, "classifiedAt": now_iso()})
    updated = await _append(k, turn, "steers", req)
    accepted = time.time()
    return {
        "kind": "steer",
        "steer": steer_view(updated, req),
        "turn": {"name": name, "index": updated["spec"].get("index")},
        "accepted_at": accepted,
    }


async def interrupt_turn(k: Kube, turn: Obj, message: Message | None, by: str) -> dict[str, Any]:
    name = turn["metadata"]["name"]
    req: dict[str, Any] = {"id": new_id("in"), "by": by, "class": "unclassified"}
    if message:
        req.update(message.fields())
    updated = await _append(k, turn, "interrupts", req)
    return {
        "interrupt": interrupt_view(updated, req),
        "turn": {"name": name, "index": updated["spec"].get("index")},
        "accepted_at": time.time(),
    }


async def find_item(k: Kube, s: Obj, kind: str, item_id: str) -> tuple[Obj, int, dict[str, Any]] | None:
    """The turn of session ``s`` whose ``spec.<kind>`` holds ``item_id``: its current or last turn first
    (where nearly every steer is), then all of them."""
    st = Session.model_validate(s).status
    for name in dict.fromkeys(n for n in (st.current_turn, st.last_turn) if n):
        turn = await k.get("turns", name)
        if turn is not None:
            found = _find([turn], kind, item_id)
            if found is not None:
                return found
    return _find(await session_turns(k, s["metadata"]["name"]), kind, item_id)


def _find(turns: list[Obj], kind: str, item_id: str) -> tuple[Obj, int, dict[str, Any]] | None:
    for t in sorted(turns, key=lambda t: int(t["spec"].get("index", 0)), reverse=True):
        for i, req in enumerate(t["spec"].get(kind) or []):
            if req.get("id") == item_id:
                return t, i, dict(req)
    return None


def _too_late(sid: str, status: str) -> str:
    what = {
        "delivered": "it was delivered to the agent",
        "queued": "it already started the next turn",
        "refused": "it was refused",
        "sending": "the agent already has it",
    }.get(status, status)
    return f"too late to withdraw steer {sid}: {what}. There is nothing to take back; interrupt instead"


async def withdraw_steer(k: Kube, watcher: TurnWatch, turn: Obj, index: int, sid: str) -> JSONResponse:
    """Take back a steer still ``sending``. The driver arbitrates: exactly one of withdrawn or delivered."""
    name = turn["metadata"]["name"]
    state = item_state(turn, "steers", sid)
    status = state.get("status", "sending")
    if status == "cancelled":
        req = turn["spec"]["steers"][index]
        return JSONResponse(
            {"withdrawn": True, "steer": steer_view(turn, req), "detail": "already withdrawn"}
        )
    if status != "sending" or state.get("withdraw") == "too_late":
        req = turn["spec"]["steers"][index]
        return JSONResponse(
            {"detail": _too_late(sid, status), "withdrawn": False, "steer": steer_view(turn, req)},
            status_code=409,
        )
    if not turn["spec"]["steers"][index].get("withdrawn"):
        turn = await _edit(k, name, "steers", index, sid, {"withdrawn": True})

    def decided(t: Obj) -> bool:
        st = item_state(t, "steers", sid)
        return st.get("status", "sending") != "sending" or st.get("withdraw") in ("withdrawn", "too_late")

    turn = await watcher.wait(turn, decided, watcher.withdraw_wait)
    req = turn["spec"]["steers"][index]
    view = steer_view(turn, req)
    if view["status"] == "cancelled":
        return JSONResponse({"withdrawn": True, "steer": view, "detail": f"steer {sid} withdrawn"})
    if view["status"] == "sending" and view["withdraw"] != "too_late":
        return JSONResponse(
            {
                "withdrawn": None,
                "steer": view,
                "detail": "withdraw requested; the sandbox has not answered yet: read the steer's status",
            },
            status_code=202,
        )
    return JSONResponse(
        {"detail": _too_late(sid, view["status"]), "withdrawn": False, "steer": view}, status_code=409
    )


async def classify(k: Kube, turn: Obj, kind: str, index: int, item_id: str, klass: str, by: str) -> Obj:
    return await _edit(
        k,
        turn["metadata"]["name"],
        kind,
        index,
        item_id,
        {"class": klass, "classifiedBy": by, "classifiedAt": now_iso()},
    )


# --- finding a session's turn --------------------------------------------------------------------------
async def running_turn(k: Kube, s: Obj) -> Obj | None:
    """The session's running turn, if any."""
    current = Session.model_validate(s).status.current_turn
    if not current:
        return None
    turn = await k.get("turns", current)
    if turn is None or Turn.model_validate(turn).status.phase != "Running":
        return None
    return turn


def _nothing_running(ref: str, s: Obj, what: str) -> HTTPException:
    phase = Session.model_validate(s).status.phase
    return HTTPException(
        409, f"session {ref!r} has no running turn to {what} (it is {phase}): send a message to start one"
    )


def _check_id(item_id: str, what: str) -> None:
    names.check_path("steer", item_id, f"no {what} {names.shown(item_id)}")


# --- a resolved session's requests (the session routes, and the job routes once per attempt) ----------
def check_steerable(harness: str) -> None:
    if harness not in LIVE_HARNESSES:
        raise HTTPException(
            409,
            f"{harness} cannot be steered: it runs one-shot, so a message can't reach a running turn. "
            "Send it as a message (it starts the next turn), or interrupt the run",
        )


async def steer_session(k: Kube, s: Obj, message: Message, by: str) -> dict[str, Any]:
    """Steer session ``s``'s running turn; 409 when it can't be steered or nothing runs."""
    check_steerable(s["spec"].get("harness", "claude"))
    turn = await running_turn(k, s)
    if turn is None:
        raise _nothing_running(s["metadata"]["name"], s, "steer")
    return await steer_turn(k, turn, message, by)


async def interrupt_session(k: Kube, s: Obj, message: Message | None, by: str) -> dict[str, Any]:
    """Interrupt session ``s``'s running turn; 409 when nothing runs."""
    turn = await running_turn(k, s)
    if turn is None:
        raise _nothing_running(s["metadata"]["name"], s, "interrupt")
    return await interrupt_turn(k, turn, message, by)


async def withdraw_in(
    k: Kube, watcher: TurnWatch, sessions: list[Obj], steer_id: str, where: str
) -> tuple[JSONResponse, str]:
    """Withdraw steer ``steer_id`` of one of ``sessions`` (404 naming ``where`` when none has it); the
    answer and the session it was found in."""
    _check_id(steer_id, "steer")
    for s in sessions:
        found = await find_item(k, s, "steers", steer_id)
        if found is not None:
            turn, index, _req = found
            return await withdraw_steer(k, watcher, turn, index, steer_id), s["metadata"]["name"]
    raise HTTPException(404, f"{where} has no steer {steer_id!r}")


async def classify_in(
    k: Kube, sessions: list[Obj], item_id: str, klass: str, by: str, where: str
) -> tuple[dict[str, Any], str]:
    """Classify steer or interrupt ``item_id`` of one of ``sessions``; the answer and its session."""
    _check_id(item_id, "steer")
    for s in sessions:
        for kind, view in (("steers", steer_view), ("interrupts", interrupt_view)):
            found = await find_item(k, s, kind, item_id)
            if found is None:
                continue
            turn, index, _req = found
            updated = await classify(k, turn, kind, index, item_id, klass, by)
            key = "steer" if kind == "steers" else "interrupt"
            return {key: view(updated, updated["spec"][kind][index])}, s["metadata"]["name"]
    raise HTTPException(404, f"{where} has no steer or interrupt {item_id!r}")


# --- routes ----------------------------------------------------------------------------------------------
@router.post("/{ref}/steer", status_code=202, response_model=S.SteerAnswer)
async def steer(ref: SessionRef, body: SteerBody, who: Admin, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """Add a message to the running turn (Claude Code: with the next tool result; Codex: turn/steer)."""
    s = await get_session(k, ref)
    out = await steer_session(k, s, await stow(d, body.message), who.subject)
    await d.audit(who.subject, "session.steer", ref, turn=out["turn"]["name"], steer=out["steer"]["id"])
    return out


@router.post("/{ref}/steers/{steer_id}/withdraw", responses=S.WITHDRAW_ANSWERS)
async def withdraw(
    ref: SessionRef, steer_id: SteerId, who: Admin, k: KubeDep, d: DbDep, request: Request
) -> JSONResponse:
    """Take back a steer that is still sending (200, status cancelled); once the agent has it, 409."""
    s = await get_session(k, ref)
    resp, _ = await withdraw_in(k, turn_watch(request), [s], steer_id, f"session {ref!r}")
    await d.audit(who.subject, "session.withdraw", ref, steer=steer_id, answer=resp.status_code)
    return resp


@router.post("/{ref}/interrupt", status_code=202, response_model=S.InterruptAnswer)
async def interrupt(
    ref: SessionRef,
    who: Admin,
    k: KubeDep,
    d: DbDep,
    body: Annotated[InterruptBody | None, Body()] = None,
) -> dict[str, Any]:
    """Stop the running turn; with a message, go on with it (same turn when live, else the next turn)."""
    s = await get_session(k, ref)
    message = await stow(d, body.message) if body and body.message else None
    out = await interrupt_session(k, s, message, who.subject)
    await d.audit(
        who.subject, "session.interrupt", ref, turn=out["turn"]["name"], interrupt=out["interrupt"]["id"]
    )
    return out


@router.post("/{ref}/steers/{steer_id}/class", response_model=S.ClassAnswer)
async def classify_steer(
    ref: SessionRef, steer_id: SteerId, body: ClassBody, who: Admin, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Say what a steer (or an interrupt) was: correction, redirect or new_info."""
    s = await get_session(k, ref)
    out, _ = await classify_in(k, [s], steer_id, body.klass, who.subject, f"session {ref!r}")
    await d.audit(who.subject, "session.classify", ref, steer=steer_id, klass=body.klass)
    return out
