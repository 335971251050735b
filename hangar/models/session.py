"""Session: a named, long-lived conversation with one agent in one sandbox."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from .base import ApprovalPolicy, Condition, Harness, Model, Resource, ResourceInfo, col, name_rule
from .limits import INLINE_MAX, MODEL_MAX, REASON_MAX, BodyRef, bounded, text

SessionPhase = Literal[
    "Pending", "Starting", "Idle", "Running", "Suspending", "Suspended", "Stopped", "Failed"
]


class SessionSpec(Model):
    harness: Harness = "claude"
    environment: str = Field(min_length=1, max_length=253)
    approvals: ApprovalPolicy | None = Field(
        default=None, description="Overrides the environment's and the deployment's policy"
    )
    model: Annotated[str | None, text(MODEL_MAX), bounded(MODEL_MAX)] = None
    prompt: Annotated[
        str | None,
        text(INLINE_MAX, description="First message: starts turn 1 when the session is created"),
        bounded(INLINE_MAX),
    ] = None
    prompt_ref: BodyRef | None = Field(
        default=None,
        description="The prompt's body when it is longer than the inline limit (prompt: a preview)",
    )
    stopped: bool = Field(
        default=False, description="Stop the session: interrupt any turn, release the sandbox"
    )
    stopped_by: str | None = Field(
        default=None, max_length=253, description="Who asked for the stop (tower:<who> for Tower's run.stop)"
    )
    stop_reason: Annotated[
        str | None, text(REASON_MAX, description="Why the session was stopped"), bounded(REASON_MAX)
    ] = None
    tainted: bool = Field(default=False, description="Start tainted (intake work that reads untrusted input)")
    fork_of: str | None = Field(
        default=None,
        max_length=253,
        description="Fork this session: start from its conversation, a clone of its workspace, its approvals "
        "policy and its taint",
    )


class Sandbox(Model):
    pod: str | None = None
    run: str | None = None
    connected: bool = False
    started_at: datetime | None = None


class Taint(Model):
    tainted: bool = False
    reasons: list[str] = Field(default_factory=list)
    since: datetime | None = None


class CheckpointSnapshot(Model):
    """The VolumeSnapshot of the workspace volume taken with a checkpoint, on a cluster with the CSI snapshot
    API (``snapshot.storage.k8s.io/v1``): a lost volume is restored from the newest ready one."""

    name: str | None = Field(default=None, description="The VolumeSnapshot; unset when none was taken")
    ready_to_use: bool = Field(default=False, description="The snapshot's status.readyToUse, as last read")
    error: str | None = Field(
        default=None, description="The snapshot's status.error, or why creating it failed"
    )
    pruned: bool = Field(default=False, description="Deleted: only the newest few snapshots are kept")
    skipped: str | None = Field(default=None, description="Why none was taken (no CSI snapshot API here)")


class Checkpoint(Model):
    id: str
    turn: str | None = None
    at: datetime | None = None
    conversation: str | None = Field(default=None, description="The CLI's conversation id it holds")
    location: str = Field(default="", description="Where the state lives: pvc://<ns>/<claim>/<path>")
    reason: str = Field(default="", description="Why it was taken (approval, idle)")
    size: int = 0
    sha256: str = ""
    snapshot: CheckpointSnapshot | None = None


SuspendReason = Literal["approval", "idle"]


class Suspension(Model):
    """Why a session gave its sandbox back, and what it waits on (spec 002: suspend and resume)."""

    reason: SuspendReason = "approval"
    approval: str | None = Field(default=None, description="hangar's Approval the session waits on")
    tower: str | None = Field(default=None, description="Tower's receipt for it (A-9)")
    turn: str | None = Field(default=None, description="The turn interrupted at the call")
    tool: str | None = None
    command: str | None = None
    args_hash: str | None = None
    since: datetime | None = None
    checkpoint: str | None = Field(default=None, description="requested, then the checkpoint's id or failed")
    decision: Literal["allowed", "denied"] | None = None
    decided_by: str | None = None
    message: str | None = Field(default=None, description="Tower's reason, when it gave one")


class Resuming(Model):
    """A suspended session on its way back: the turn that resumes it and the call pre-cleared for it."""

    approval: str
    tower: str | None = None
    turn: str
    tool: str
    args_hash: str
    decided_by: str | None = None
    decided_at: datetime | None = None
    suspended_at: datetime | None = None


class ForkOrigin(Model):
    """What a fork took from its parent when it was made (so the parent may change or go afterwards)."""

    session: str
    conversation: str | None = None
    policy: ApprovalPolicy | None = None
    tainted: bool = False
    at: datetime | None = None


class PendingApproval(Model):
    id: str
    session: str | None = Field(default=None, description="Set on a job's list: the attempt it is from")
    turn: str
    tool: str
    command: str | None = None


class Counters(Model):
    turns: int = 0
    steers: int = 0
    interrupts: int = 0
    approvals: int = 0
    sandboxes: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def changed(self, before: Counters) -> dict[str, Any]:
        """The counters that differ from ``before``, as a status patch holds them. Each writer patches only
        what it changed: a merge patch of them leaves the others as another writer set them (the session's
        pendingApprovals writer counts approvals off the session's lock, beside the writes under it)."""
        was = before.dump()
        return {k: v for k, v in self.dump().items() if was.get(k) != v}


class SessionStatus(Model):
    phase: SessionPhase = "Pending"
    reason: str = ""
    message: str = ""
    policy: ApprovalPolicy | None = None
    sandbox: Sandbox = Field(default_factory=Sandbox)
    workspace: str | None = Field(
        default=None,
        description="The workspace volume (PVC) when it is not <session>-workspace: a warm sandbox's, taken "
        "with it",
    )
    conversation: str | None = Field(default=None, description="The CLI's session or thread id")
    forked_from: ForkOrigin | None = None
    current_turn: str | None = None
    last_turn: str | None = None
    taint: Taint = Field(default_factory=Taint)
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    suspended: Suspension | None = None
    resuming: Resuming | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    counters: Counters = Field(default_factory=Counters)
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


# A session forks once, when it is made: the operator has taken its parent's conversation, policy and taint.
FORK_ONCE = {
    "rule": "has(self.spec.forkOf) == has(oldSelf.spec.forkOf) && "
    "(!has(self.spec.forkOf) || self.spec.forkOf == oldSelf.spec.forkOf)",
    "message": "spec.forkOf can't change: a session is a fork of its parent from the start or not at all",
    "reason": "FieldValueForbidden",
}


class Session(Resource):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        kind="Session",
        plural="sessions",
        singular="session",
        short_names=["hsess"],
        columns=[
            col("Harness", "string", ".spec.harness"),
            col("Environment", "string", ".spec.environment"),
            col("Phase", "string", ".status.phase"),
            col("Approvals", "string", ".status.policy"),
            col("Turns", "integer", ".status.counters.turns"),
            col("Pending", "string", ".status.pendingApprovals[*].id", "approvals waiting for a decision"),
            col("Tainted", "boolean", ".status.taint.tainted"),
            col(
                "Suspended",
                "string",
                ".status.suspended.tower",
                "Tower's approval a suspended session waits on",
            ),
            col("Pod", "string", ".status.sandbox.pod", priority=1),
            col("Message", "string", ".status.message", "why it waits or failed", priority=1),
            col("Cost", "number", ".status.counters.costUsd", "USD so far", priority=1),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        root_rules=[name_rule("Session"), FORK_ONCE],
    )
    kind: str = "Session"
    spec: SessionSpec
    status: SessionStatus = Field(default_factory=SessionStatus)
