"""Applying what a person answered through ``wait_for_turn``'s forms: an approval decided (REST's
compare-and-set: decided once), a question answered as the next Turn (created under the exact next index, so
it is sent at most once), a decline remembered (``declines.py``). And what a call has done so far
(:class:`CallState`, carried across 2026-07-28 rounds in the sealed ``requestState``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import HTTPException
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ElicitResult
from pydantic import BaseModel, Field, ValidationError

from hangar.kube import ApiException, Kube, Obj, owner_ref
from hangar.models import Session
from hangar.models.limits import MESSAGE_MAX, bounded

from .. import approvals as ap
from .. import job_attempts
from ..auth import Caller
from ..watch_cache import api_cache_of
from . import declines
from .auth import acting
from .common import Hub, Target

Outcome = Literal["answered", "declined", "cancelled", "stale"]


class ApprovalForm(BaseModel):
    decision: Literal["allow", "deny", "allow_always"] = Field(
        description="allow, deny, or allow_always (this call and calls like it for the rest of the turn)"
    )
    message: str | None = Field(
        default=None, max_length=ap.MESSAGE_MAX, description="Optional: what the agent is told"
    )


class AnswerForm(BaseModel):
    answer: Annotated[str, bounded(MESSAGE_MAX)] = Field(
        min_length=1, max_length=MESSAGE_MAX, description="Your answer to the agent"
    )


APPROVAL_SCHEMA = render_elicitation_schema(ApprovalForm)
ANSWER_SCHEMA = render_elicitation_schema(AnswerForm)


@dataclass
class CallState:
    declined: list[str] = field(default_factory=list)  # approvals the person declined to answer
    history: list[dict[str, Any]] = field(default_factory=list)  # each approval form's outcome
    elicitation: dict[str, Any] | None = None  # the last question's outcome
    questions: int = 0
    asked: dict[str, dict[str, Any]] = field(default_factory=dict)  # input key -> what it asks
    started: float = 0.0  # wall-clock start of the call's first round (another replica may take a retry)
    deadline: float = 0.0

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
                started=float(data.get("started") or 0.0),
                deadline=float(data.get("deadline") or 0.0),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()


async def decide(
    hub: Hub, who: Caller, snap_names: list[str], target: Target, approval: str, form: ApprovalForm
) -> dict[str, Any]:
    body = ap.DecisionBody(decision=form.decision, message=form.message or None)
    audit: dict[str, Any] = {"via": "mcp", target.kind: target.name}
    try:
        # The cache told of the decision: wait_for_turn's next look (through it) does not ask it again.
        cache = api_cache_of(hub.state)
        await ap.decide(
            hub.kube, hub.db, acting(who), snap_names, approval, body, target.where, cache=cache, **audit
        )
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
            or Session.model_validate(s).status.phase in ("Failed", "Stopped")
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
    hub: Hub,
    who: Caller,
    client: str,
    target: Target,
    names: list[str],
    st: CallState,
    approval: str,
    resp: ElicitResult,
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
        await declines.remember(hub.db, client, approval)
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
