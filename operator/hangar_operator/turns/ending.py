"""A turn's end, written once: the phase and outcome together with the final state of every steer and
interrupt, in one status write. A client that reads a turn once it has ended sees all of it final.

Every place a turn ends (the driver's signed ``turn_ended``, the sandbox lost, an interrupt unconfirmed in
time, the session stopped, a start refused) builds its patch here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from hangar.kube import Kube, Obj
from hangar.models import Turn
from hangar.models.turn import InterruptRequest, InterruptState, Steer, SteerState, Usage

from .. import metrics
from ..lifecycle import TURN, move
from ..status import patch_status

log = logging.getLogger("hangar.operator.turns")

# Creates (once) the Turn that a queued steer's or interrupt's message starts; returns its name.
NextTurn = Callable[[Steer | InterruptRequest], Awaitable[str]]
Shown = dict[str, Any]


@dataclass
class Ending:
    event: str  # a TURN lifecycle event: completed, failed, interrupted, asked, sandbox_lost, …
    outcome: Literal["completed", "failed", "interrupted"]
    exit_status: int
    reason: str = ""
    summary: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    # The sandbox went (or was killed) with the turn: a steer still sending may never have reached the CLI.
    lost: str | None = None
    # What an interrupt still waiting becomes: a signed end confirms it; a kill does not.
    interrupts: Literal["confirmed", "killed"] = "confirmed"
    interrupt_reason: str = "no confirmation from the driver in time"


def failed(event: str, reason: str) -> Ending:
    return Ending(event=event, outcome="failed", exit_status=1, reason=reason[:2000])


async def final_requests(
    turn: Turn, ending: Ending, next_turn: NextTurn, now: datetime
) -> tuple[list[SteerState], list[InterruptState], list[Shown]]:
    """Every steer and interrupt of ``turn`` in its final state, and the progress events to show."""
    lost, interrupts_to = ending.lost, ending.interrupts
    shown: list[Shown] = []
    steers = [s.model_copy(deep=True) for s in turn.status.steers]
    by_id = {s.id: s for s in steers}
    for req in turn.spec.steers:
        state = by_id.get(req.id)
        if state is not None and not (state.status == "sending" and lost):
            continue
        if state is None:
            state = SteerState(id=req.id, klass=req.klass)
            steers.append(state)
            if req.withdrawn:
                state.status, state.withdraw, state.at, state.reason = (
                    "cancelled",
                    "withdrawn",
                    now,
                    "withdrawn",
                )
                metrics.STEERS.labels(status="cancelled").inc()
                continue
        state.status, state.at = "queued", now
        state.reason = f"not delivered: {lost}" if lost else "the turn ended before the steer was sent"
        if state.withdraw == "requested":
            state.withdraw = "too_late"
        state.next_turn = await next_turn(req)
        metrics.STEERS.labels(status="queued").inc()
        shown.append(
            {
                "message": f"steer {req.id} queued: it starts {state.next_turn}",
                "event": "steer.status",
                "steer": req.id,
            }
        )
    interrupts = [i.model_copy(deep=True) for i in turn.status.interrupts]
    by_iid = {i.id: i for i in interrupts}
    for i in interrupts:
        if i.status == "sent":
            i.status, i.at = ("confirmed", now) if interrupts_to == "confirmed" else ("killed", now)
            if interrupts_to == "killed":
                i.reason = ending.interrupt_reason
    for ireq in turn.spec.interrupts:
        istate = by_iid.get(ireq.id)
        if istate is None:
            istate = InterruptState(
                id=ireq.id, status="too_late", at=now, reason="the turn had already ended"
            )
            istate.klass = ireq.klass
            interrupts.append(istate)
        if ireq.message and istate.message_status is None:
            istate.message_status = "queued"
            istate.next_turn = await next_turn(ireq)
            shown.append(
                {
                    "message": f"interrupt {ireq.id}: its message starts {istate.next_turn}",
                    "event": "interrupt.status",
                }
            )
    return steers, interrupts, shown


async def end_turn(
    kube: Kube, obj: Obj, ending: Ending, next_turn: NextTurn
) -> tuple[Obj, list[Shown]] | None:
    """Ends the turn ``obj`` (read just before, under its session's lock) with one status write.

    Returns the turn as written and the progress events to show, or None when it had ended already."""
    turn = Turn.model_validate(obj)
    if turn.status.ended:
        return None
    phase = move(TURN, turn.status.phase, ending.event)
    now = datetime.now(UTC)
    steers, interrupts, shown = await final_requests(turn, ending, next_turn, now)
    patch: dict[str, Any] = {
        "phase": phase,
        "outcome": ending.outcome,
        "exitStatus": ending.exit_status,
        "reason": ending.reason[:2000],
        "finishedAt": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "steers": [s.dump() for s in steers],
        "interrupts": [i.dump() for i in interrupts],
    }
    if ending.summary is not None:
        patch["summary"] = ending.summary[:4000]
    if ending.usage is not None:
        patch["usage"] = ending.usage.dump()
    if ending.cost_usd is not None:
        patch["costUsd"] = ending.cost_usd
    written = await patch_status(kube, "turns", obj, patch)
    metrics.TURNS.labels(outcome=ending.outcome).inc()
    if turn.status.started_at is not None:
        metrics.TURN_SECONDS.observe(max(0.0, (now - turn.status.started_at).total_seconds()))
    return written, shown
