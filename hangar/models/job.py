"""Job: a task run toward a deliverable (a branch or a PR)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import Field

from .base import ApprovalPolicy, Condition, Harness, Model, Resource, ResourceInfo, col, name_rule
from .session import Taint

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


class JobSpec(Model):
    submitter: str = Field(min_length=1)
    repository: str = Field(min_length=1)
    base_branch: str = "main"
    prompt: str = Field(min_length=1, max_length=262144)
    environment: str = Field(min_length=1)
    harness: Harness = "claude"
    model: str | None = None
    approvals: ApprovalPolicy | None = None
    attempts: int = Field(default=1, ge=1, le=8, description="best-of-N")
    deliver: Literal["branch", "pr", "none"] = "pr"
    cancelled: bool = False


class Attempt(Model):
    index: int
    session: str | None = None
    state: str = "queued"
    verified: bool | None = None


class JobStatus(Model):
    state: JobState = "queued"
    reason: str = ""
    question: str | None = None
    awaiting_approval: bool = False
    attempts: list[Attempt] = Field(default_factory=list)
    turns: list[str] = Field(default_factory=list)
    verification: dict[str, Any] | None = None
    delivery: dict[str, Any] | None = None
    taint: Taint = Field(default_factory=Taint)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    conditions: list[Condition] = Field(default_factory=list)


class Job(Resource):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        kind="Job",
        plural="jobs",
        singular="job",
        short_names=["hjob"],
        columns=[
            col("Submitter", "string", ".spec.submitter"),
            col("Repository", "string", ".spec.repository"),
            col("State", "string", ".status.state"),
            col("Attempts", "integer", ".spec.attempts", priority=1),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        root_rules=[name_rule("Job")],
    )
    kind: str = "Job"
    spec: JobSpec
    status: JobStatus | None = None
