"""Approval: one tool call waiting for a decision."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field

from . import labels as L
from .base import ApprovalPolicy, Condition, Model, Resource, ResourceInfo, col

Decision = Literal["allow", "deny", "allow_always"]
ResolvedBy = Literal["person", "policy", "tower", "timeout"]
ApprovalPhase = Literal["Pending", "Allowed", "Denied", "Expired", "Withdrawn"]
# An approval out of Pending is decided for good (a CEL rule keeps spec.decision from changing).
APPROVAL_DONE: frozenset[str] = frozenset({"Allowed", "Denied", "Expired", "Withdrawn"})


class ApprovalSpec(Model):
    session: str | None = None
    job: str | None = None
    turn: str = Field(min_length=1)
    request_id: str = Field(min_length=1, description="The CLI's own id for the prompt")
    tool: str
    command: str | None = Field(
        default=None, description="Shown whole up to 2,000 characters, else both ends with the cut marked"
    )
    args_hash: str
    policy: ApprovalPolicy
    tainted: bool = False
    why: str = ""
    rule: str = Field(
        default="", description="The rule id that flagged the call (ask, handback, force-push, …)"
    )
    governed: bool = Field(default=False, description="Tower decides (governed policy); until then it waits")
    tower: Literal["enforce", "shadow"] | None = Field(
        default=None,
        description="Filed with Tower: enforce (Tower decides) or shadow (its answer is recorded beside hangar's)",
    )
    # What a person asks for: written by REST, the CLI or kubectl patch. The outcome is in status.
    decision: Decision | None = None
    decided_by: str | None = None
    message: str | None = Field(default=None, max_length=8192)


class TowerAnswer(Model):
    status: Literal["pending", "allowed", "denied", "withdrawn"]
    by: str | None = None
    reason: str | None = None
    at: datetime | None = None


class ApprovalStatus(Model):
    phase: ApprovalPhase | None = None
    decision: Decision | None = None
    by: str | None = None
    message: str | None = None
    resolved_by: ResolvedBy | None = None
    receipt: str | None = Field(default=None, description="Tower's id for the call (A-9)")
    tower: TowerAnswer | None = Field(default=None, description="Tower's answer (shadow: beside hangar's)")
    requested_at: datetime | None = None
    sandbox_asked_at: datetime | None = Field(
        default=None,
        description="The sandbox's claim: when its driver read the agent's prompt (its clock, bounded by when "
        "the operator received it). Shown for measuring; nothing is decided, timed or ordered by it",
    )
    decided_at: datetime | None = None
    delivered_at: datetime | None = None
    deadline: datetime | None = None
    reason: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


# A decision is made once: spec.decision may be set only while the Approval is Pending, and never changed.
DECIDE_ONCE = {
    "rule": "has(oldSelf.spec.decision) ? self.spec == oldSelf.spec : "
    "(!has(self.spec.decision) || !has(oldSelf.status) || !has(oldSelf.status.phase) || "
    "oldSelf.status.phase == 'Pending')",
    "message": "an Approval is decided once, while it is Pending: its decision can't be changed, and an "
    "Approval that expired, was resolved by policy or was withdrawn takes no decision",
    "reason": "FieldValueForbidden",
}


class Approval(Resource):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        kind="Approval",
        plural="approvals",
        singular="approval",
        short_names=["happ"],
        columns=[
            col("Session", "string", ".spec.session"),
            col("Tool", "string", ".spec.tool"),
            col("Command", "string", ".spec.command", priority=1),
            col("Phase", "string", ".status.phase"),
            col("By", "string", ".status.resolvedBy"),
            col("Tainted", "boolean", ".spec.tainted", priority=1),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        root_rules=[DECIDE_ONCE],
    )
    kind: str = "Approval"
    spec: ApprovalSpec
    status: ApprovalStatus = Field(default_factory=ApprovalStatus)


def asked_times(st: ApprovalStatus, metadata: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    """When a call was requested and when it is denied unanswered: its status once written, else what the
    operator stamped on the Approval of a call that asks as it created it (``labels.REQUESTED_AT``,
    ``DEADLINE``)."""
    if st.phase is not None:
        return st.requested_at, st.deadline
    notes = metadata.get("annotations") or {}
    return _time(notes.get(L.REQUESTED_AT)), _time(notes.get(L.DEADLINE))


def sandbox_asked(st: ApprovalStatus, metadata: dict[str, Any]) -> datetime | None:
    """The sandbox's word on when its agent asked (bounded by the operator; for measuring only): its status
    once written, else the stamp of a call that asks (``labels.SANDBOX_ASKED_AT``)."""
    if st.phase is not None:
        return st.sandbox_asked_at
    return _time((metadata.get("annotations") or {}).get(L.SANDBOX_ASKED_AT))


def waiting(a: Approval) -> bool:
    """Does the agent wait on a person's decision: Pending, or created by the operator as a call that asks
    whose status (Pending) is not written yet. One created by hand (no status, no stamp) is not."""
    if a.status.phase is not None:
        return a.status.phase == "Pending"
    return asked_times(a.status, a.metadata)[0] is not None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else None
