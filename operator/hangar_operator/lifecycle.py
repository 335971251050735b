"""Each kind's lifecycle in one place: its phases and the events that move them.

The controllers move a resource only through :func:`move`, so a transition missing here is a bug that fails
loudly (in tests) rather than a phase written by hand. ``Suspending``/``Suspended`` are governance's
(``governance/suspension.py``): a call waiting on Tower pauses the turn, checkpoints and frees the slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

Table = Mapping[tuple[str, str], str]

# Session: (phase, event) -> phase. Events come from the session's spec, its sandbox and its turns.
SESSION: Table = {
    ("Pending", "wait"): "Pending",  # no slot, no environment, no parent yet: status.reason says which
    ("Pending", "sandbox_created"): "Starting",
    ("Idle", "sandbox_created"): "Starting",  # after a lost sandbox, the next turn starts another
    # spec.stopped cleared (a person's new message after a stop, Tower's included): a new run.
    ("Stopped", "sandbox_created"): "Starting",
    ("Stopped", "wait"): "Pending",
    ("Starting", "connected"): "Idle",
    ("Idle", "turn_started"): "Running",
    ("Running", "turn_ended"): "Idle",
    ("Running", "turn_requeued"): "Idle",
    ("Idle", "turn_ended"): "Idle",
    **{(p, "sandbox_released"): "Idle" for p in ("Starting", "Idle", "Running", "Pending")},
    **{(p, "wait"): "Pending" for p in ("Idle", "Starting")},
    **{
        (p, "stop"): "Stopped"
        for p in ("Pending", "Starting", "Idle", "Running", "Suspending", "Suspended", "Stopped")
    },
    # Governance (governance/suspension.py): the turn is interrupted at the call (its end keeps the session
    # Suspending), a checkpoint is taken, and the release frees the slot; an allow resumes it.
    ("Idle", "suspend"): "Suspending",
    ("Running", "suspend"): "Suspending",
    ("Suspending", "turn_ended"): "Suspending",
    ("Suspending", "suspended"): "Suspended",
    ("Suspended", "resume"): "Pending",
    **{(p, "fail"): "Failed" for p in ("Pending", "Starting", "Idle", "Running", "Suspending")},
}

# Turn: Queued until its session's sandbox runs it; ended phases are final.
TURN: Table = {
    ("Queued", "started"): "Running",
    (
        "Running",
        "requeued",
    ): "Queued",  # the sandbox went before the agent had it, or the conversation was lost
    ("Queued", "refused"): "Failed",  # the policy needs a live harness; the sandbox never connected
    ("Running", "completed"): "Completed",
    ("Running", "failed"): "Failed",
    ("Running", "interrupted"): "Interrupted",
    ("Running", "asked"): "NeedsInput",  # ended with a question for a person
    ("Running", "sandbox_lost"): "Failed",
    ("Running", "interrupt_killed"): "Interrupted",
    ("Running", "stopped"): "Interrupted",
}

# Approval: Pending until decided exactly once (every move is a compare-and-set on resourceVersion).
APPROVAL: Table = {
    ("", "requested"): "Pending",
    ("", "policy_allowed"): "Allowed",
    ("", "policy_denied"): "Denied",
    ("Pending", "allowed"): "Allowed",
    ("Pending", "denied"): "Denied",
    ("Pending", "expired"): "Expired",
    ("Pending", "withdrawn"): "Withdrawn",
}

# Job: its state is derived from its attempts on every change (jobs.py); these are the moves that happen.
# A job that delivers goes on from its attempts' end: verifying (the Environment's command in the sandbox),
# then delivering (push, pull request) and delivered. One that doesn't (no repository, deliver: none) ends
# done. awaiting_approval is also the wait for a release (the repository's policy) before anything runs.
# delivered is left only by a follow-up (below).
_JOB_LIVE = ("queued", "running", "needs_input", "awaiting_approval", "verifying")
JOB: Table = {
    **{(a, b): b for a in _JOB_LIVE for b in _JOB_LIVE},
    **{(a, "delivering"): "delivering" for a in _JOB_LIVE},
    ("delivering", "delivering"): "delivering",
    ("delivering", "delivered"): "delivered",
    **{(a, "done"): "done" for a in _JOB_LIVE},
    **{(a, "failed"): "failed" for a in (*_JOB_LIVE, "delivering")},
    **{(a, "cancelled"): "cancelled" for a in (*_JOB_LIVE, "delivering")},
    # A follow-up after delivery: the delivered attempt works again, and its work is pushed to the same
    # branch (the pull request updated). The only way out of a final state.
    **{("delivered", b): b for b in _JOB_LIVE},
}


class IllegalTransition(RuntimeError):
    pass


def move(table: Table, phase: str | None, event: str) -> str:
    """The phase ``event`` moves ``phase`` to; raises for a move the lifecycle does not have."""
    key = (phase or "", event)
    if key not in table:
        raise IllegalTransition(f"{event!r} does not apply in phase {phase!r}")
    return table[key]


def can(table: Table, phase: str | None, event: str) -> bool:
    return (phase or "", event) in table


P = TypeVar("P", str, str | None)


def after(table: Table, phase: P, event: str) -> P:
    """The phase ``event`` moves ``phase`` to, or ``phase`` itself where the lifecycle has no such move (an
    event that may come in any phase and moves only some)."""
    return move(table, phase, event) if can(table, phase, event) else phase
