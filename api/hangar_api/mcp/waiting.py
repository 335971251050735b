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
taken, nothing is sent and the outcome is ``stale``. A declined approval is not asked again in the same call
(it stays pending); a declined or cancelled question, or a cancelled approval form, ends the call.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from fastapi import HTTPException
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError

from hangar.kube import ApiException, Kube, Obj, owner_ref
from hangar.models.job import JOB_FINAL
from hangar.models.limits import MessageText

from .. import approvals as ap
from .. import job_attempts
from ..auth import Caller
from ..views import job_pr, turn_view
from .auth import acting
from .common import Hub, Target

POLL_SECONDS = 0.5
PROGRESS_EVERY = 2.0
ELICIT_WAIT_SECONDS = 15 * 60
JOB_SETTLE_SECONDS = 10.0  # how long a job's state may lag behind its turns' end
ENDED = ("Completed", "Failed", "Interrupted", "NeedsInput")
Outcome = Literal["answered", "declined", "cancelled", "stale"]


class ApprovalForm(BaseModel):
    decision: Literal["allow", "deny", "allow_always"] = Field(
        description="allow, deny, or allow_always (this call and calls like it for the rest of the turn)"
    )
    message: str | None = Field(
        default=None, max_length=ap.MESSAGE_MAX, description="Optional: what the agent is told"
    )


class AnswerForm(BaseModel):
    answer: MessageText = Field(description="Your answer to the agent")


APPROVAL_SCHEMA = render_elicitation_schema(ApprovalForm)
ANSWER_SCHEMA = render_elicitation_schema(AnswerForm)


# --- what the call has done so far (carried across 2026-07-28 rounds in the sealed requestState) ----------
@dataclass
class CallState:
    declined: list[str] = field(default_factory=list)  # approvals the person declined to answer
    history: list[dict[str, Any]] = field(default_factory=list)  # each approval form's outcome
    elicitation: dict[str, Any] | None = None  # the last question's outcome
    questions: int = 0
    asked: dict[str, dict[str, Any]] = field(default_factory=dict)  # input key -> what it asks

    def dump(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def load(cls, raw: str | None) -> CallState:
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            return cls(
                declined=list(data.get("declined") or []),
                history=list(data.get("history") or []),
                elicitation=data.get("elicitation"),
                questions=int(data.get("questions") or 0),
                asked=dict(data.get("asked") or {}),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()


# --- reading the target ---------------------------------------------------------------------------------
def _phase(turn: Obj) -> str:
    return str((turn.get("status") or {}).get("phase") or "Queued")


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

    @property
    def running(self) -> bool:
        return any(_phase(t) not in ENDED for t in self.latest)

    @property
    def state(self) -> str:
        st = self.obj.get("status") or {}
        if self.target.kind == "job":
            return str(st.get("state") or "queued")
        return str(st.get("phase") or "Pending")

    def settling(self) -> bool:
        """A job whose turns have ended but whose state (which the operator derives from them a moment
        later) doesn't say so yet."""
        if self.target.kind != "job":
            return False
        if self.state in ("queued", "running", "awaiting_approval"):
            return True
        return self.state == "needs_input" and not any(
            _phase(t) in ("NeedsInput", "Interrupted") for t in self.latest
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
        asking = [t for t in self.latest if _phase(t) == "NeedsInput"]
        if asking:
            return asking[0]
        if not self.latest:
            return None
        return max(self.latest, key=lambda t: ((t.get("status") or {}).get("startedAt") or "", _index(t)))

    def question(self) -> tuple[str, dict[str, int]] | None:
        """The open question and the turns it waits in ({session: index}), if the agent waits on one."""
        if self.target.kind == "job":
            st = self.obj.get("status") or {}
            if self.state != "needs_input" or self.running:
                return None
            if not any(_phase(t) in ("NeedsInput", "Interrupted") for t in self.latest):
                return None  # the state still shows a question someone already answered
            asking = [t for t in self.latest if _phase(t) == "NeedsInput"]
            text = st.get("question") or next(
                ((t.get("status") or {}).get("question") for t in asking if t.get("status")), None
            )
            if not text:
                return None
            live = {s["metadata"]["name"] for s in job_attempts.live_attempts(self.obj, self.sessions)}
            turns = {t["spec"]["session"]: _index(t) for t in self.latest if t["spec"]["session"] in live}
            return str(text), turns
        t = self.primary()
        if t is None or _phase(t) != "NeedsInput":
            return None
        text = (t.get("status") or {}).get("question") or "(the agent asked without a question)"
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
        pending = [
            a
            for a in await ap.approvals_of(k, names)
            if (a.get("status") or {}).get("phase") == "Pending" and not (a.get("spec") or {}).get("decision")
        ]
        pending.sort(key=lambda a: (a.get("status") or {}).get("requestedAt") or "")
    return Snapshot(target, obj, sessions, latest, pending)


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
        out["delivery"] = (snap.obj.get("status") or {}).get("delivery")
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


# --- applying answers -------------------------------------------------------------------------------------
async def decide(
    hub: Hub, who: Caller, snap_names: list[str], target: Target, approval: str, form: ApprovalForm
) -> dict[str, Any]:
    body = ap.DecisionBody(decision=form.decision, message=form.message or None)
    audit: dict[str, Any] = {"via": "mcp", target.kind: target.name}
    try:
        await ap.decide(hub.kube, hub.db, acting(who), snap_names, approval, body, target.where, **audit)
    except HTTPException as e:  # decided by someone else, expired, withdrawn, gone: nothing changed
        return {"id": approval, "outcome": "stale", "detail": str(e.detail)}
    return {"id": approval, "outcome": "answered", "decision": form.decision, "message": form.message}


async def _create_next_turn(k: Kube, s: Obj, index: int, message: str, by: str) -> str | None:
    """Turn ``<session>-<index>``, or None when that name is taken (someone else answered first)."""
    session = s["metadata"]["name"]
    name = f"{session}-{index}"
    body = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Turn",
        "metadata": {
            "name": name,
            "labels": {"hangar.dev/session": session, "app.kubernetes.io/part-of": "hangar"},
            "ownerReferences": [owner_ref(s)],
        },
        # An answer to the agent's own question is new information (steering.md, classifying steers).
        "spec": {"session": session, "index": index, "message": message, "by": by, "class": "new_info"},
    }
    try:
        await k.create("turns", body)
    except ApiException as e:
        if e.status == 409:
            return None
        raise
    return name


async def answer(hub: Hub, who: Caller, target: Target, asked: dict[str, Any], text: str) -> dict[str, Any]:
    """Send ``text`` as the next message of each session still waiting in the turn that asked, at most
    once: the next turn's name is created exactly, so a second answer (another client, a retry) finds it
    taken and sends nothing."""
    k = hub.kube
    base = {"question": asked.get("question"), "answer": text}
    if target.kind == "job":
        j = await k.get("jobs", target.name)
        if j is None:
            return {**base, "outcome": "stale", "detail": f"job {target.name!r} is gone"}
        try:
            job_attempts.refuse_final(j, "take an answer")
        except HTTPException as e:
            return {**base, "outcome": "stale", "detail": str(e.detail)}
    sent: list[str] = []
    for session, index in dict(asked.get("turns") or {}).items():
        s = await k.get("sessions", session)
        if (
            s is None
            or (s.get("status") or {}).get("phase") in ("Failed", "Stopped")
            or s["spec"].get("stopped")
        ):
            continue
        name = await _create_next_turn(k, s, int(index) + 1, text, who.subject)
        if name is not None:
            sent.append(name)
    if not sent:
        return {**base, "outcome": "stale", "detail": "the question was already answered; nothing was sent"}
    action = "session.send" if target.kind == "session" else "job.follow_up"
    await hub.db.audit(who.subject, action, target.name, turns=sent, via="mcp", answers=asked.get("question"))
    return {**base, "outcome": "answered", "turns": sent}


async def apply_approval_response(
    hub: Hub, who: Caller, target: Target, names: list[str], st: CallState, approval: str, resp: ElicitResult
) -> bool:
    """Apply one approval form's response; True when the call should stop (the form was cancelled)."""
    if resp.action == "accept":
        try:
            form = ApprovalForm.model_validate(resp.content or {})
        except ValidationError as e:
            raise ToolError(f"invalid: the approval form's answer doesn't validate: {e}") from None
        st.history.append(await decide(hub, who, names, target, approval, form))
        return False
    if resp.action == "decline":
        st.declined.append(approval)
        st.history.append({"id": approval, "outcome": "declined"})
        return False
    st.history.append({"id": approval, "outcome": "cancelled"})
    return True


async def apply_question_response(
    hub: Hub, who: Caller, target: Target, st: CallState, asked: dict[str, Any], resp: ElicitResult
) -> bool:
    """Apply the answer to a question; True when the call should stop (declined or cancelled)."""
    if resp.action == "accept":
        try:
            form = AnswerForm.model_validate(resp.content or {})
        except ValidationError as e:
            raise ToolError(f"invalid: the answer doesn't validate: {e}") from None
        st.elicitation = await answer(hub, who, target, asked, form.answer)
        return False
    outcome: Outcome = "declined" if resp.action == "decline" else "cancelled"
    st.elicitation = {"question": asked.get("question"), "outcome": outcome}
    return True


async def apply_input_responses(
    hub: Hub, who: Caller, target: Target, st: CallState, responses: dict[str, Any]
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
            stop |= await apply_approval_response(hub, who, target, snap.names, st, asked["id"], resp)
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


# --- the tool ---------------------------------------------------------------------------------------------
async def wait_for_turn(
    hub: Hub, who: Caller, ctx: Context[Any, Any], target: Target, timeout: float
) -> dict[str, Any] | InputRequiredResult:
    is_modern, elicits = modern(ctx), can_elicit(ctx)
    st = CallState.load(ctx.request_state) if is_modern else CallState()
    if is_modern and ctx.input_responses:
        if await apply_input_responses(hub, who, target, st, dict(ctx.input_responses)):
            snap = await snapshot(hub, target)
            return result(snap, st, done=not snap.running and not snap.first_turn_due())
    st.asked = {}
    started = time.monotonic()
    deadline = started + timeout
    ended_since: float | None = None
    last_note, last_report = "", 0.0
    while True:
        snap = await snapshot(hub, target)
        askable = [a for a in snap.pending if a["metadata"]["name"] not in st.declined]
        if askable:
            ended_since = None
            if not elicits:
                return result(snap, st, done=False)
            if is_modern:
                requests: dict[str, Any] = {}
                for a in askable:
                    key = f"approve-{a['metadata']['name']}"
                    st.asked[key] = {"kind": "approval", "id": a["metadata"]["name"]}
                    requests[key] = ElicitRequest(
                        params=ElicitRequestFormParams(
                            message=approval_prompt(target, a), requested_schema=APPROVAL_SCHEMA
                        )
                    )
                return InputRequiredResult(input_requests=requests, request_state=st.dump())
            a = askable[0]
            resp = await elicit(ctx, approval_prompt(target, a), ApprovalForm)
            if await apply_approval_response(hub, who, target, snap.names, st, a["metadata"]["name"], resp):
                return result(await snapshot(hub, target), st, done=False)
            continue
        ended = not snap.running and not snap.first_turn_due()
        if ended and snap.state in ("verifying", "delivering"):
            ended = False  # hangar's work after the agent's (verification, a repair turn, the PR) goes on
        if ended and snap.settling():
            # The job's state follows its turns a moment later (the operator derives it).
            ended_since = ended_since or time.monotonic()
            ended = time.monotonic() - ended_since > JOB_SETTLE_SECONDS
        if ended:
            q = snap.question()
            if q is None or not elicits:
                return result(snap, st, done=True)
            text, turns = q
            st.questions += 1
            key = f"answer-{st.questions}"
            asked = {"kind": "question", "question": text, "turns": turns}
            if is_modern:
                st.asked[key] = asked
                form = ElicitRequestFormParams(
                    message=question_prompt(target, text), requested_schema=ANSWER_SCHEMA
                )
                return InputRequiredResult(
                    input_requests={key: ElicitRequest(params=form)}, request_state=st.dump()
                )
            resp = await elicit(ctx, question_prompt(target, text), AnswerForm)
            if await apply_question_response(hub, who, target, st, asked, resp):
                return result(await snapshot(hub, target), st, done=True)
            continue
        now = time.monotonic()
        if now >= deadline:
            return result(snap, st, done=False, timed_out=True)
        primary = snap.primary()
        note = (
            f"turn {primary['metadata']['name']} {_phase(primary)}"
            if primary is not None
            else f"{target.where} {snap.state}: waiting for its first turn"
        )
        if note != last_note or now - last_report >= PROGRESS_EVERY:
            await ctx.report_progress(round(now - started, 1), timeout, note)
            last_note, last_report = note, now
        await anyio.sleep(POLL_SECONDS)
