"""Turn: one turn of a session or job. Requests (steers, interrupts) in spec; what happened in status."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from .base import ApprovalPolicy, Condition, Model, Resource, ResourceInfo, SteerClass, col
from .limits import INLINE_MAX, INTERRUPTS_MAX, STEERS_MAX, SUMMARY_MAX, BodyRef, InlineText, bounded, text
from .limits import MESSAGE_MAX as MESSAGE_MAX  # what the api's request models import
from .session import Taint

TurnPhase = Literal["Queued", "Running", "NeedsInput", "Completed", "Failed", "Interrupted"]
# A turn in one of these has ended: its status (steers and interrupts included) is final. NeedsInput is a turn
# that ended with a question for a person; the answer is the next turn.
TURN_ENDED: frozenset[str] = frozenset({"Completed", "Failed", "Interrupted", "NeedsInput"})
Outcome = Literal["completed", "failed", "interrupted"]
SteerStatus = Literal["sending", "delivered", "queued", "cancelled", "refused"]
WithdrawState = Literal["requested", "withdrawn", "too_late"]
# sent: on its way to the driver; confirmed: the driver stopped the turn (signed); killed: no confirmation in
# time, hangar killed the run; too_late: the turn had already ended.
InterruptStatus = Literal["sent", "confirmed", "killed", "too_late"]

_REF = "The body, when it is longer than the inline limit: the message field then holds a preview"


class Steer(Model):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][-a-z0-9]*$")
    message: InlineText
    message_ref: BodyRef | None = Field(default=None, description=_REF)
    by: str = ""
    klass: SteerClass = Field(default="unclassified", alias="class")
    classified_by: str | None = Field(default=None, description="Who set the class (REST: the caller)")
    classified_at: datetime | None = None
    withdrawn: bool = Field(default=False, description="Take it back while it is still sending")


class InterruptRequest(Model):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][-a-z0-9]*$")
    message: Annotated[
        str | None,
        text(
            INLINE_MAX,
            min_length=1,
            description="Stop, then go on with this: in the same turn when it is live, else as the next turn",
        ),
        bounded(INLINE_MAX),
    ] = None
    message_ref: BodyRef | None = Field(default=None, description=_REF)
    by: str = ""
    klass: SteerClass = Field(default="unclassified", alias="class")
    classified_by: str | None = None
    classified_at: datetime | None = None


class TurnSpec(Model):
    session: str | None = None
    job: str | None = None
    index: int = Field(ge=1)
    message: InlineText
    message_ref: BodyRef | None = Field(default=None, description=_REF)
    by: str = ""
    steers: list[Steer] = Field(default_factory=list, max_length=STEERS_MAX)
    interrupts: list[InterruptRequest] = Field(default_factory=list, max_length=INTERRUPTS_MAX)
    from_steer: str | None = Field(default=None, description="The queued steer this turn was started by")
    klass: SteerClass = Field(
        default="unclassified", alias="class", description="For follow-ups and queued steers"
    )
    classified_by: str | None = Field(default=None, description="Who set the class (REST: the caller)")
    classified_at: datetime | None = None


class SteerState(Model):
    id: str
    status: SteerStatus = "sending"
    at: datetime | None = None
    reason: str = ""
    klass: SteerClass = Field(default="unclassified", alias="class")
    classified_by: str | None = None
    classified_at: datetime | None = None
    next_turn: str | None = None
    withdraw: WithdrawState | None = Field(
        default=None,
        description="requested; then withdrawn (status cancelled) or too_late (the driver had it)",
    )
    written_at: datetime | None = Field(default=None, description="When the driver wrote it to the CLI")


class InterruptState(Model):
    id: str
    status: InterruptStatus = "sent"
    at: datetime | None = None
    reason: str = ""
    message_status: SteerStatus | None = Field(
        default=None, description="delivered: the same turn went on with it; queued: it started next_turn"
    )
    next_turn: str | None = None
    klass: SteerClass = Field(default="unclassified", alias="class")
    classified_by: str | None = None
    classified_at: datetime | None = None


class Artifact(Model):
    name: str
    path: str
    size: int = 0
    sha256: str = ""


class Usage(Model):
    input_tokens: int = 0
    output_tokens: int = 0


class TurnStatus(Model):
    phase: TurnPhase = "Queued"
    outcome: Outcome | None = None
    exit_status: int | None = None
    reason: str = ""
    policy: ApprovalPolicy | None = None
    summary: Annotated[str, text(SUMMARY_MAX), bounded(SUMMARY_MAX)] = ""
    result: dict[str, Any] | None = None
    question: str | None = None
    steers: list[SteerState] = Field(default_factory=list)
    interrupts: list[InterruptState] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    taint: Taint = Field(default_factory=Taint)
    run: str | None = None
    restarted: bool = Field(default=False, description="Restarted once in a new conversation")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None

    @property
    def ended(self) -> bool:
        return self.phase in TURN_ENDED


class Turn(Resource):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        kind="Turn",
        plural="turns",
        singular="turn",
        short_names=["hturn"],
        columns=[
            col("Session", "string", ".spec.session"),
            col("Job", "string", ".spec.job", priority=1),
            col("Index", "integer", ".spec.index"),
            col("Phase", "string", ".status.phase"),
            col("Exit", "integer", ".status.exitStatus"),
            col("Reason", "string", ".status.reason", priority=1),
            col("Summary", "string", ".status.summary", priority=1),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        root_rules=[
            {
                "rule": "has(self.spec.session) != has(self.spec.job)",
                "message": "a Turn belongs to exactly one of spec.session or spec.job",
            }
        ],
    )
    kind: str = "Turn"
    spec: TurnSpec
    status: TurnStatus = Field(default_factory=TurnStatus)
