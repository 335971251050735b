"""Approval: one tool call waiting for a decision."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field

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
