"""The REST API's answers as pydantic models: the OpenAPI document's response schemas, and what FastAPI
checks each answer against. The views (``views.py``, ``approvals.approval_view``) build the answers as
dicts; tests/unit/test_api_schemas.py keeps their keys and these fields the same, so a view can't grow a
key the document does not describe (or lose one it does).

Names are snake_case, as the views write them; nested resource parts the views copy from a resource's
status (a sandbox, counters, checkpoints) are objects whose keys are the resource model's, in snake_case.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Obj = dict[str, Any]
Class = Literal["correction", "redirect", "new_info", "unclassified"]


class View(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


# --- turns, steers, interrupts -----------------------------------------------------------------------
class SteerView(View):
    id: str
    turn: str
    message: str
    by: str
    status: str = Field(description="sending, delivered, queued, cancelled or refused")
    reason: str
    withdraw: str | None = Field(description="requested, withdrawn or too_late")
    klass: str = Field(alias="class", description="correction, redirect, new_info or unclassified")
    classified_by: str | None
    classified_at: str | None
    next_turn: str | None
    written_at: str | None
    at: str | None


class InterruptView(View):
    id: str
    turn: str
    message: str | None
    by: str
    status: str = Field(description="sent, confirmed, killed or too_late")
    reason: str
    message_status: str | None
    next_turn: str | None
    klass: str = Field(alias="class")
    classified_by: str | None
    classified_at: str | None
    at: str | None


class TurnView(View):
    name: str
    index: int
    message: str
    by: str
    phase: str = Field(description="Queued, Running, NeedsInput, Completed, Failed or Interrupted")
    outcome: str | None
    exit_status: int | None
    summary: str
    reason: str
    result: Obj | None = Field(description="The agent's final answer, as its CLI gave it")
    question: str | None = Field(description="What the agent asks (a NeedsInput turn)")
    policy: str | None
    usage: Obj | None = Field(description="input_tokens, output_tokens")
    cost_usd: float | None
    artifacts: list[Obj]
    taint: bool
    started_at: str | None
    finished_at: str | None
    steers: list[SteerView]
    interrupts: list[InterruptView]
    klass: str = Field(alias="class")
    classified_by: str | None
    classified_at: str | None
    session: str | None
    from_steer: str | None = Field(default=None, description="Only on a turn a queued steer started")


class JobTurnView(TurnView):
    n: int = Field(description="1-based index in the job's turns (the class route takes it)")


class TurnRef(View):
    name: str
    index: int | None = None


class TurnList(View):
    turns: list[TurnView]


class SteerAnswer(View):
    kind: Literal["steer"]
    steer: SteerView
    turn: TurnRef
    accepted_at: float


class SendAnswer(View):
    """A new turn (``kind: turn``), or a steer of the running one (``kind: steer``)."""

    kind: Literal["turn", "steer"]
    turn: TurnView | TurnRef
    steer: SteerView | None = Field(default=None, description="kind steer only")
    accepted_at: float | None = Field(default=None, description="kind steer only")


class InterruptAnswer(View):
    interrupt: InterruptView
    turn: TurnRef
    accepted_at: float


class WithdrawAnswer(View):
    withdrawn: bool | None = Field(
        description="true: 200; null: 202 (the sandbox has not answered); false: 409"
    )
    steer: SteerView
    detail: str


class ClassAnswer(View):
    """The classified steer, or the interrupt."""

    steer: SteerView | None = None
    interrupt: InterruptView | None = None


# --- sessions ------------------------------------------------------------------------------------------
class SessionView(View):
    name: str
    harness: str
    environment: str
    model: str | None
    approvals: str | None
    created_at: str | None
    phase: str
    reason: str
    message: str
    policy: str | None
    sandbox: Obj | None
    conversation: str | None
    fork_of: str | None
    forked_from: Obj | None
    current_turn: str | None
    taint: Obj
    counters: Obj
    pending_approvals: list[Obj]
    checkpoints: list[Obj]
    suspended: Obj | None
    resuming: Obj | None
    turns: list[TurnView] | None = Field(default=None, description="On a read of one session")


class SessionList(View):
    sessions: list[SessionView]


class Deleted(View):
    deleted: str


class EventView(View):
    """One activity event: ``seq``, ``turn``, ``kind``, ``at`` and the event's own keys."""

    model_config = ConfigDict(extra="allow")
    seq: int
    turn: str | None
    kind: str
    at: str


class EventPage(View):
    events: list[EventView]
    last_seq: int = Field(description="Read on with ?since=last_seq (also the X-Hangar-Last-Seq header)")


# --- approvals -----------------------------------------------------------------------------------------
class ApprovalView(View):
    id: str
    session: str | None
    turn: str | None
    tool: str | None
    command: str | None
    args_hash: str | None
    policy: str | None
    tainted: bool
    why: str
    rule: str
    governed: bool
    phase: str
    decision: str | None
    by: str | None
    message: str | None
    resolved_by: str | None
    requested_at: str | None
    sandbox_asked_at: str | None
    deadline: str | None
    decided_at: str | None
    delivered_at: str | None
    reason: str
    tower: str | None
    receipt: str | None
    tower_answer: Obj | None


class SessionApprovals(View):
    session: str
    policy: str
    tainted: bool
    pending: list[ApprovalView]
    recent: list[ApprovalView]


class AttemptPolicy(View):
    session: str
    policy: str | None
    tainted: bool


class JobApprovals(View):
    job: str
    policy: str | None
    tainted: bool
    state: str
    attempts: list[AttemptPolicy]
    pending: list[ApprovalView]
    recent: list[ApprovalView]


# --- jobs ----------------------------------------------------------------------------------------------
class JobView(View):
    id: str
    name: str
    submitter: str
    prompt: str
    environment: str
    repository: str
    base_branch: str
    harness: str
    model: str | None
    approvals: str | None
    attempts_requested: int
    deliver: str
    cancelled: bool
    created_at: str | None
    state: str
    reason: str
    message: str
    policy: str | None
    question: str | None
    awaiting_approval: bool
    pending_approvals: list[Obj]
    attempts: list[Obj]
    taint: Obj
    cost_usd: float
    verification: Obj | None
    delivery: Obj | None
    branch: str | None = Field(description="The job's branch (hangar/<job> or the name given)")
    pr_url: str | None = Field(description="The pull request, once delivery opened it")
    head_commit: str | None = Field(description="The delivered branch's head commit")
    release: Obj | None = Field(description="Who released or rejected a job that waited for it")
    timeline: list[Obj] = Field(description="The job's state changes: who, when, why")
    started_at: str | None
    finished_at: str | None
    turns: list[JobTurnView] | None = Field(default=None, description="On a read of one job")
    turn_count: int | None = Field(default=None, description="On a list")


class JobList(View):
    jobs: list[JobView]


class FollowUpResult(View):
    session: str
    kind: Literal["turn", "steer"]
    turn: TurnRef
    steer: SteerView | None = Field(default=None, description="kind steer only")


class FollowUpAnswer(View):
    job: str
    kind: Literal["turn", "steer", "mixed"]
    klass: str = Field(alias="class")
    sent_to: list[str]
    results: list[FollowUpResult]


class FanError(View):
    session: str
    status: int
    error: str


class SteerSent(SteerAnswer):
    session: str


class InterruptSent(InterruptAnswer):
    session: str


class JobSteerAnswer(View):
    job: str
    kind: Literal["steer"]
    sent_to: list[str]
    detail: str
    steer: SteerView
    turn: TurnRef
    accepted_at: float
    steers: list[SteerSent]
    errors: list[FanError]


class JobInterruptAnswer(View):
    job: str
    kind: Literal["interrupt"]
    sent_to: list[str]
    detail: str
    interrupt: InterruptView
    turn: TurnRef
    accepted_at: float
    interrupts: list[InterruptSent]
    errors: list[FanError]


class JobTurnClassAnswer(View):
    turn: JobTurnView


class GovernanceAnswer(View):
    """What Tower is told: ``ok``, or why the event changed nothing (``ignored``), and the like."""

    model_config = ConfigDict(extra="allow")


class WithdrawRefused(View):
    """A 409 of the withdraw routes: the agent has the steer already (``withdrawn: false`` and the steer),
    or the turn changed meanwhile (``detail`` only)."""

    detail: str
    withdrawn: Literal[False] | None = None
    steer: SteerView | None = None


WITHDRAW_ANSWERS: dict[int | str, Any] = {
    200: {"model": WithdrawAnswer, "description": "Withdrawn: the steer's status is cancelled"},
    202: {"model": WithdrawAnswer, "description": "Asked; the sandbox has not answered yet (withdrawn null)"},
    409: {"model": WithdrawRefused, "description": "Too late: the agent has the steer (withdrawn false)"},
}
