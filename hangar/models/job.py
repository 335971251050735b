"""Job: a task run toward a deliverable (a branch or a PR), by one or more attempts (best-of-N).

Each attempt is a Session named ``<job>-a<i>`` (owned by the Job, labelled ``hangar.dev/job``), started with
the job's prompt and the job's approvals policy and taint; its turns are the job's turns. The job's status
is a summary of its attempts that the operator keeps current.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from .base import NAME_MAX, ApprovalPolicy, Condition, Harness, Model, Resource, ResourceInfo, col, name_rule
from .limits import MODEL_MAX, BodyRef, InlineText, bounded, text
from .session import PendingApproval, Taint

JobState = Literal[
    "queued",
    "running",
    "needs_input",
    "awaiting_approval",
    "verifying",
    "delivering",
    "done",
    "failed",
    "cancelled",
]
JOB_FINAL: frozenset[str] = frozenset({"done", "failed", "cancelled"})
ATTEMPTS_MAX = 8
# Room for the attempt suffix: a Job's sessions are "<job>-a<i>", themselves within NAME_MAX.
JOB_NAME_MAX = NAME_MAX - len(f"-a{ATTEMPTS_MAX}")


def _same(field: str) -> str:
    return f"self.spec.{field} == oldSelf.spec.{field}"


def _same_optional(field: str) -> str:
    return (
        f"has(self.spec.{field}) == has(oldSelf.spec.{field}) && "
        f"(!has(self.spec.{field}) || self.spec.{field} == oldSelf.spec.{field})"
    )


# What was submitted stays as it was: editing a running job's prompt or attempts would silently do nothing
# (its attempts already run with them), so the apiserver refuses it. Only `cancelled` may change.
SUBMITTED_ONCE = {
    "rule": " && ".join(
        [_same(f) for f in ("submitter", "repository", "baseBranch", "prompt", "environment", "harness")]
        + [_same(f) for f in ("attempts", "deliver", "tainted")]
        + [_same_optional("model"), _same_optional("approvals"), _same_optional("promptRef")]
    ),
    "message": "a Job's spec is fixed once submitted: only spec.cancelled may change (submit a new job instead)",
    "reason": "FieldValueForbidden",
}


def attempt_session(job: str, index: int) -> str:
    return f"{job}-a{index}"


class JobSpec(Model):
    submitter: str = Field(min_length=1, max_length=253)
    repository: str = Field(default="", max_length=2048)
    base_branch: str = "main"
    prompt: InlineText
    prompt_ref: BodyRef | None = Field(
        default=None,
        description="The prompt's body when it is longer than the inline limit (prompt: a preview)",
    )
    environment: str = Field(min_length=1, max_length=253)
    harness: Harness = "claude"
    model: Annotated[str | None, text(MODEL_MAX), bounded(MODEL_MAX)] = None
    approvals: ApprovalPolicy | None = Field(
        default=None,
        description="Overrides the environment's and the deployment's policy; every attempt keeps it",
    )
    attempts: int = Field(default=1, ge=1, le=ATTEMPTS_MAX, description="best-of-N")
    deliver: Literal["branch", "pr", "none"] = "pr"
    tainted: bool = Field(default=False, description="Start tainted (intake work that reads untrusted input)")
    cancelled: bool = False


class Attempt(Model):
    index: int
    session: str | None = None
    state: str = "queued"
    phase: str | None = Field(default=None, description="The attempt session's phase")
    last_turn: str | None = None
    outcome: str | None = None
    verified: bool | None = None


class JobStatus(Model):
    state: JobState = "queued"
    reason: str = ""
    message: str = ""
    policy: ApprovalPolicy | None = None
    question: str | None = None
    awaiting_approval: bool = False
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    turns: list[str] = Field(default_factory=list)
    verification: dict[str, Any] | None = None
    delivery: dict[str, Any] | None = None
    taint: Taint = Field(default_factory=Taint)
    cost_usd: float = 0.0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class Job(Resource):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        kind="Job",
        plural="jobs",
        singular="job",
        short_names=["hjob"],
        columns=[
            col("Submitter", "string", ".spec.submitter"),
            col("State", "string", ".status.state"),
            col("Approvals", "string", ".status.policy"),
            col("Attempts", "integer", ".spec.attempts"),
            col("Pending", "string", ".status.pendingApprovals[*].id", "approvals waiting for a decision"),
            col("Tainted", "boolean", ".status.taint.tainted"),
            col("Repository", "string", ".spec.repository", priority=1),
            col("Cost", "number", ".status.costUsd", "USD so far", priority=1),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        root_rules=[name_rule("Job", JOB_NAME_MAX), SUBMITTED_ONCE],
    )
    kind: str = "Job"
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)
