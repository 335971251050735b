"""``wait_for_turn``: wait for a session's or job's current (or last) turn, and put to the caller what the
agent waits on.

The loop reads the resources (the target's latest turns and its Approvals) every half second, sending
progress notifications while the turn runs. When the agent waits on a **tool approval** or has ended its turn
on a **question** (phase ``NeedsInput``, or a job in ``needs_input``):

- a 2026-07-28 client that can elicit gets an ``input_required`` result with one form per approval (keys
  ``approve-<id>``) or the question (``answer-<n>``); on its retry the answers are applied and the wait goes on;
- a handshake-era client that can elicit gets ``elicitation/create`` on its session (each waits up to 15 min);
- a client that can't elicit gets the turn as it is, with ``pending_approvals`` and ``question``.

An approval is decided with the REST layer's :func:`hangar_api.approvals.decide` (decided once: a form answered
after someone else decided is ``stale``). An answer to a question is the next Turn of each waiting session,
created under the exact next index, so it is sent at most once: when someone else answered first the name is
taken, nothing is sent and the outcome is ``stale``. A declined approval stays pending and is not asked of
that client again, in this call or a later one (``declines.py``); a declined or cancelled question, or a
cancelled approval form, ends the call.

``timeout_seconds`` counts from the call's first round: a 2026-07-28 retry carries the start and the
deadline in its sealed ``requestState``, so the rounds a person spends on forms count, and the progress
(seconds since that start) never goes back.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from hangar.kube import Obj
from hangar.models import Approval, Job, Session, Turn
from hangar.models.approval import asked_times
from hangar.models.approval import waiting as asks
from hangar.models.job import JOB_FINAL

from .. import approvals as ap
from .. import job_attempts
from ..auth import Caller
from ..views import job_pr, stamp, turn_view
from ..watch_cache import api_cache_of
from . import declines, tasks
from .answers import (
    ANSWER_SCHEMA,
    APPROVAL_SCHEMA,
    AnswerForm,
    ApprovalForm,
    CallState,
    apply_approval_response,
    apply_question_response,
)
from .common import Hub, Target
from .subscriptions import Subscriptions

POLL_SECONDS = 0.5
SHARED_SECONDS = 0.25  # how old a snapshot other waiters on the same target may reuse
PROGRESS_EVERY = 2.0
ELICIT_WAIT_SECONDS = 15 * 60
JOB_SETTLE_SECONDS = 10.0  # how long a job's state (a session's phase) may lag behind its turns' end
ENDED = ("Completed", "Failed", "Interrupted", "NeedsInput")


# --- reading the target ---------------------------------------------------------------------------------
def _index(turn: Obj) -> int:
    return int(turn["spec"].get("index", 0))


@dataclass
class Snapshot:
    target: Target
    obj: Obj  # the session or the job, as read now
    sessions: list[Obj]
    latest: list[Obj]  # each session's latest turn
    pending: list[Obj]  # Approvals waiting for a decision, oldest first

    @property
    def names(self) -> list[str]:
        return [s["metadata"]["name"] for s in self.sessions]

    @cached_property
    def turns(self) -> list[Turn]:
        """``latest``, typed (once: every waiter on the target shares the snapshot)."""
        return [Turn.model_validate(t) for t in self.latest]

    @cached_property
    def job(self) -> Job | None:
        return Job.model_validate(self.obj) if self.target.kind == "job" else None

    def phase_of(self, turn: Obj) -> str:
        """The phase of ``turn``, one of ``latest``."""
        return self.turns[self.latest.index(turn)].status.phase

    @property
    def running(self) -> bool:
        return any(t.status.phase not in ENDED for t in self.turns)

    @cached_property
    def state(self) -> str:
        if self.job is not None:
            return self.job.status.state
        return Session.model_validate(self.obj).status.phase

    def settling(self) -> bool:
        """A job whose turns have ended but whose state (which the operator derives from them a moment
        later) doesn't say so yet; a session still ``Running`` once its turns have ended (its phase is
        written just after the turn's end: the answer would say a turn runs while it says none does)."""
        if self.target.kind != "job":
            return self.state == "Running"
        if self.state in ("queued", "running", "awaiting_approval"):
            return True
        return self.state == "needs_input" and not any(
            t.status.phase in ("NeedsInput", "Interrupted") for t in self.turns
        )

    def first_turn_due(self) -> bool:
        """No turn yet, but one is coming (a session with a first message; a job still starting)."""
        if self.latest:
            return False
        if self.target.kind == "job":
            return self.state not in JOB_FINAL
        return bool(self.obj["spec"].get("prompt")) and self.state not in ("Failed", "Stopped")

    def primary(self) -> Obj | None:
        """The turn the answer is about: one waiting on a question, else the latest one that ran."""
        asking = [
            raw for raw, t in zip(self.latest, self.turns, strict=True) if t.status.phase == "NeedsInput"
        ]
        if asking:
            return asking[0]
        if not self.latest:
            return None
        started = {
            id(raw): stamp(t.status.started_at) or "" for raw, t in zip(self.latest, self.turns, strict=True)
        }
        return max(self.latest, key=lambda raw: (started[id(raw)], _index(raw)))

    def question(self) -> tuple[str, dict[str, int]] | None:
        """The open question and the turns it waits in ({session: index}), if the agent waits on one."""
        if self.job is not None:
            if self.state != "needs_input" or self.running:
                return None
            if not any(t.status.phase in ("NeedsInput", "Interrupted") for t in self.turns):
                return None  # the state still shows a question someone already answered
            asking = [t for t in self.turns if t.status.phase == "NeedsInput"]
            text = self.job.status.question or next((t.status.question for t in asking), None)
            if not text:
                return None
            live = {s["metadata"]["name"] for s in job_attempts.live_attempts(self.obj, self.sessions)}
            turns = {t["spec"]["session"]: _index(t) for t in self.latest if t["spec"]["session"] in live}
            return str(text), turns
        t = self.primary()
        if t is None or self.phase_of(t) != "NeedsInput":
            return None
        text = self.turns[self.latest.index(t)].status.question or "(the agent asked without a question)"
        return str(text), {t["spec"]["session"]: _index(t)}


async def snapshot(hub: Hub, target: Target) -> Snapshot:
    k = hub.kube
    if target.kind == "session":
        obj = await k.get("sessions", target.name)
        if obj is None:
            raise ToolError(f"not found: session {target.name!r} is gone")
        sessions = [obj]
    else:
        obj = await k.get("jobs", target.name)
        if obj is None:
            raise ToolError(f"not found: job {target.name!r} is gone")
        sessions = await job_attempts.attempt_sessions(k, obj)
    names = [s["metadata"]["name"] for s in sessions]
    latest: list[Obj] = []
    pending: list[Obj] = []
    if names:
        selector = (
            f"hangar.dev/session={names[0]}"
            if len(names) == 1
            else f"hangar.dev/session in ({','.join(names)})"
        )
        by_session: dict[str, Obj] = {}
        for t in await k.list("turns", label_selector=selector):
            sess = t["spec"].get("session")
            if sess in names and (sess not in by_session or _index(t) > _index(by_session[sess])):
                by_session[sess] = t
        latest = [by_session[n] for n in names if n in by_session]
        waiting = [
            (approval, a)
            # Through this replica's watch-fed cache when it can say: its decisions (answers.decide) are
            # applied to it at once, so a look after one never asks it again.
            for a in await ap.approvals_of(k, names, api_cache_of(hub.state))
            if asks(approval := Approval.model_validate(a)) and not approval.spec.decision
        ]
        waiting.sort(key=lambda x: stamp(asked_times(x[0].status, x[0].metadata)[0]) or "")
        pending = [a for _, a in waiting]
    return Snapshot(target, obj, sessions, latest, pending)


_shared: dict[tuple[int, str, str], tuple[float, tuple[int, int], asyncio.Future[Snapshot]]] = {}


def watched_uri(target: Target) -> str:
    return f"hangar://{target.kind}s/{target.name}"


def changes(hub: Hub) -> Subscriptions | None:
    subs: Subscriptions | None = getattr(hub.state, "mcp_subscriptions", None)
    return subs


async def shared_snapshot(hub: Hub, target: Target, fresh: bool = False) -> Snapshot:
    """The target as read at most :data:`SHARED_SECONDS` ago and since its last change the watches saw, one
    read for every waiter on it: a thousand ``wait_for_turn`` calls on one session cost the apiserver what
    one does. A waiter that has just written (applied an answer) reads ``fresh``, and its read replaces the
    shared one, so no waiter reuses a read from before the write."""
    key = (id(hub.state), target.kind, target.name)
    subs = changes(hub)
    gen = subs.generation(watched_uri(target)) if subs is not None else (0, 0)
    now = time.monotonic()
    hit = _shared.get(key)
    if (
        fresh
        or hit is None
        or now - hit[0] > SHARED_SECONDS
        or hit[1] != gen
        or (hit[2].done() and hit[2].exception() is not None)
    ):
        hit = (now, gen, asyncio.ensure_future(snapshot(hub, target)))
        _shared[key] = hit
        if len(_shared) > 1024:  # forget targets nobody waits on
            for k, (at, _, fut) in list(_shared.items()):
                if now - at > SHARED_SECONDS and fut.done():
                    del _shared[k]
    # Shielded: one waiter going away doesn't cancel the read the others wait for.
    return await asyncio.shield(hit[2])


# --- the answer -------------------------------------------------------------------------------------------
def result(snap: Snapshot, st: CallState, *, done: bool, timed_out: bool = False) -> dict[str, Any]:
    primary = snap.primary()
    view = turn_view(primary) if primary is not None else None
    q = snap.question()
    out: dict[str, Any] = {
        "ref": snap.target.name,
        "kind": snap.target.kind,
        "state": snap.state,
        "done": done,
        "timed_out": timed_out,
        "turn": view,
        "phase": view["phase"] if view else None,
        "outcome": view["outcome"] if view else None,
        "summary": view["summary"] if view else "",
        "result": view["result"] if view else None,
        "artifacts": view["artifacts"] if view else [],
        "pending_approvals": [ap.approval_view(a) for a in snap.pending],
        "question": q[0] if q else None,
        "approval": st.history[-1] if st.history else None,
        "approvals": st.history,
        "elicitation": st.elicitation,
    }
    if snap.target.kind == "job":
        out["turns"] = [turn_view(t) for t in snap.latest]
        delivery = snap.job.status.delivery if snap.job is not None else None
        out["delivery"] = delivery.dump() if delivery is not None else None
        out["pr"] = job_pr(snap.obj)  # the PR for a job: null until it is delivered
    return out


def can_elicit(ctx: Context[Any, Any]) -> bool:
    caps = ctx.client_capabilities
    el = caps.elicitation if caps is not None else None
    return el is not None and (el.form is not None or getattr(el, "url", None) is None)


def modern(ctx: Context[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def approval_prompt(target: Target, a: Obj) -> str:
    spec = a.get("spec") or {}
    where = target.where if target.kind == "session" else f"{target.where} (attempt {spec.get('session')})"
    lines = [
        f"{where} waits on approval {a['metadata']['name']}: {spec.get('tool')} wants to run",
        str(spec.get("command") or ""),
    ]
    if spec.get("why"):
        lines.append(f"why: {spec['why']}")
    lines.append("allow, deny or allow_always; a message (optional) reaches the agent.")
    return "\n".join(lines)


def question_prompt(target: Target, question: str) -> str:
    who = "Session" if target.kind == "session" else "Job"
    return f"{who} {target.name} asks: {question}"


async def apply_input_responses(
    hub: Hub, who: Caller, client: str, target: Target, st: CallState, responses: dict[str, Any]
) -> bool:
    """A 2026-07-28 retry: apply each answered form once. True when the call should stop."""
    stop = False
    snap = await snapshot(hub, target)
    for key, asked in list(st.asked.items()):
        resp = responses.get(key)
        if not isinstance(resp, ElicitResult):
            continue
        del st.asked[key]
        if asked["kind"] == "approval":
            stop |= await apply_approval_response(hub, who, client, target, snap.names, st, asked["id"], resp)
        else:
            stop |= await apply_question_response(hub, who, target, st, asked, resp)
    return stop


async def elicit(ctx: Context[Any, Any], message: str, schema: type[BaseModel]) -> ElicitResult:
    """A handshake-era ``elicitation/create`` on the caller's session; no answer in 15 minutes is a cancel."""
    try:
        with anyio.fail_after(ELICIT_WAIT_SECONDS):
            got = await ctx.elicit(message, schema)
    except TimeoutError:
        return ElicitResult(action="cancel")
    if got.action == "accept":
        return ElicitResult(action="accept", content=got.data.model_dump(mode="json"))
    return ElicitResult(action=got.action)


def approval_requests(target: Target, askable: list[Obj], st: CallState) -> dict[str, ElicitRequest]:
    """One form per approval (``approve-<id>``), remembered in ``st.asked``."""
    st.asked = {}
    requests: dict[str, ElicitRequest] = {}
    for a in askable:
        key = f"approve-{a['metadata']['name']}"
        st.asked[key] = {"kind": "approval", "id": a["metadata"]["name"]}
        requests[key] = ElicitRequest(
            params=ElicitRequestFormParams(
                message=approval_prompt(target, a), requested_schema=APPROVAL_SCHEMA
            )
        )
    return requests


def question_request(
    target: Target, text: str, turns: dict[str, int], st: CallState
) -> tuple[str, dict[str, Any], ElicitRequest]:
    """The question's form, ``answer-<n>``: a new ``n`` for each question; the same while it is still the
    one outstanding (a task asks again every round until it is answered)."""
    asked = {"kind": "question", "question": text, "turns": turns}
    key = next((k for k, v in st.asked.items() if v == asked), None)
    if key is None:
        st.questions += 1
        key = f"answer-{st.questions}"
    st.asked = {key: asked}
    form = ElicitRequestFormParams(message=question_prompt(target, text), requested_schema=ANSWER_SCHEMA)
    return key, asked, ElicitRequest(params=form)


# --- the tool ---------------------------------------------------------------------------------------------
async def wait_for_turn(
    hub: Hub, who: Caller, ctx: Context[Any, Any], target: Target, timeout: float
) -> dict[str, Any] | InputRequiredResult:
    """The loop. Run as a task (``tasks.py``), it asks through the task (``input_required``, answered with
    ``tasks/update``) and reports its progress as the task's status message."""
    task = tasks.running()
    is_modern, elicits = modern(ctx), can_elicit(ctx)
    client = declines.client_key(who, ctx)
    st = CallState.load(ctx.request_state) if is_modern and task is None else CallState()
    if not st.started:
        st.started = time.time()
        st.deadline = st.started + timeout
    if is_modern and task is None and ctx.input_responses:
        if await apply_input_responses(hub, who, client, target, st, dict(ctx.input_responses)):
            snap = await snapshot(hub, target)
            return result(snap, st, done=not snap.running and not snap.first_turn_due())
    st.asked = {}
    ended_since: float | None = None
    last_note, last_report = "", 0.0
    # An answer was just applied (this round's, or in the loop): read afresh, not a snapshot from before it.
    wrote = bool(is_modern and ctx.input_responses)

    async def through_task(requests: dict[str, ElicitRequest]) -> bool:
        """One round of a task's forms: True when the call should stop."""
        assert task is not None
        got = await task.ask(requests, POLL_SECONDS)
        return bool(got) and await apply_input_responses(hub, who, client, target, st, got)

    while True:
        snap = await shared_snapshot(hub, target, fresh=wrote)
        wrote = False
        pending = [a["metadata"]["name"] for a in snap.pending]
        gone = set(st.declined) | await declines.declined(hub.db, client, pending)
        askable = [a for a in snap.pending if a["metadata"]["name"] not in gone]
        if askable and time.time() >= st.deadline:
            return result(snap, st, done=False, timed_out=True)
        if askable:
            ended_since = None
            if not elicits:
                return result(snap, st, done=False)
            if task is not None:
                if await through_task(approval_requests(target, askable, st)):
                    return result(await snapshot(hub, target), st, done=False)
                wrote = True
                continue
            if is_modern:
                requests = approval_requests(target, askable, st)
                return InputRequiredResult(input_requests=dict(requests), request_state=st.dump())
            a = askable[0]
            resp = await elicit(ctx, approval_prompt(target, a), ApprovalForm)
            if await apply_approval_response(
                hub, who, client, target, snap.names, st, a["metadata"]["name"], resp
            ):
                return result(await snapshot(hub, target), st, done=False)
            wrote = True
            continue
        ended = not snap.running and not snap.first_turn_due()
        if ended and snap.state in ("verifying", "delivering"):
            ended = False  # hangar's work after the agent's (verification, a repair turn, the PR) goes on
        if ended and snap.settling():
            # The job's state (the session's phase) follows its turns a moment later (the operator writes it).
            ended_since = ended_since or time.monotonic()
            ended = time.monotonic() - ended_since > JOB_SETTLE_SECONDS
        if ended:
            q = snap.question()
            if q is None or not elicits or (task is not None and time.time() >= st.deadline):
                return result(snap, st, done=True)
            key, asked, request = question_request(target, q[0], q[1], st)
            if task is not None:
                if await through_task({key: request}):
                    return result(await snapshot(hub, target), st, done=True)
                wrote = True
                continue
            if is_modern:
                return InputRequiredResult(input_requests={key: request}, request_state=st.dump())
            st.asked = {}
            resp = await elicit(ctx, question_prompt(target, q[0]), AnswerForm)
            if await apply_question_response(hub, who, target, st, asked, resp):
                return result(await snapshot(hub, target), st, done=True)
            wrote = True
            continue
        now = time.time()
        if now >= st.deadline:
            return result(snap, st, done=False, timed_out=True)
        primary = snap.primary()
        note = (
            f"turn {primary['metadata']['name']} {snap.phase_of(primary)}"
            if primary is not None
            else f"{target.where} {snap.state}: waiting for its first turn"
        )
        if task is not None:
            await task.working(note)  # tasks carry no progress notifications: the status message says it
        elif note != last_note or now - last_report >= PROGRESS_EVERY:
            # Seconds since the call's first round: the same clock on every round, so it never goes back.
            await ctx.report_progress(round(min(now - st.started, timeout), 1), timeout, note)
            last_note, last_report = note, now
        # Woken by the watches when the target changes; read again every half second anyway.
        subs = changes(hub)
        if subs is not None:
            await subs.wait_change(watched_uri(target), POLL_SECONDS)
        else:
            await anyio.sleep(POLL_SECONDS)
