"""A Job's state is a summary of its attempts: each attempt's state from its session and last turn, then the
job's from all of them."""

from __future__ import annotations

from typing import Any

import pytest

from hangar_operator.job_rules import job_state
from hangar_operator.jobs import QUESTION_INTERRUPTED, attempt_state


def sess(phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j-a1"}, "spec": {"environment": "e"}, "status": {"phase": phase, **status}}


def turn(phase: str | None, interrupts: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    st = {"phase": phase, **status} if phase else {}
    spec = {"session": "j-a1", "index": 1, "message": "go", "interrupts": interrupts or []}
    return {"metadata": {"name": "j-a1-t1"}, "spec": spec, "status": st}


PENDING = [{"id": "ap-1", "turn": "j-a1-t1", "tool": "Bash"}]


@pytest.mark.parametrize(
    ("session", "last_turn", "want"),
    [
        (None, None, ("queued", None)),
        (sess("Pending"), None, ("queued", None)),
        (sess("Stopped"), None, ("stopped", None)),
        (sess("Failed"), turn("Running"), ("failed", None)),
        # A pending approval speaks first, whatever the turn says.
        (sess("Running", pendingApprovals=PENDING), turn("Running"), ("awaiting_approval", None)),
        (sess("Running"), turn(None), ("queued", None)),
        (sess("Running"), turn("Queued"), ("queued", None)),
        (sess("Running"), turn("Running"), ("running", None)),
        (sess("Idle"), turn("Completed"), ("done", None)),
        (sess("Idle"), turn("Failed"), ("failed", None)),
        (sess("Idle"), turn("NeedsInput", question="Which branch?"), ("needs_input", "Which branch?")),
        (sess("Idle"), turn("NeedsInput"), ("needs_input", "The agent asked for input.")),
        (sess("Stopped"), turn("Running"), ("stopped", None)),
    ],
)
def test_attempt_state(session: dict[str, Any] | None, last_turn: dict[str, Any] | None, want: Any) -> None:
    assert attempt_state(session, last_turn) == want


def test_an_interrupted_attempt_asks_who_interrupted_what_to_do_instead() -> None:
    by_alice = [{"id": "i1", "by": "bob", "message": "use tabs"}, {"id": "i2", "by": "alice"}]
    assert attempt_state(sess("Idle"), turn("Interrupted", by_alice)) == (
        "needs_input",
        QUESTION_INTERRUPTED.format(by="alice"),
    )
    # A steering interrupt (with a message) is not a person's stop; with none, someone did it.
    assert attempt_state(sess("Idle"), turn("Interrupted", [{"id": "i1", "by": "bob", "message": "x"}])) == (
        "needs_input",
        QUESTION_INTERRUPTED.format(by="someone"),
    )


@pytest.mark.parametrize(
    ("states", "cancelled", "want"),
    [
        (["running", "done"], True, "cancelled"),
        ([], False, "failed"),
        (["done", "running", "awaiting_approval"], False, "awaiting_approval"),
        (["running", "needs_input"], False, "needs_input"),
        (["done", "running"], False, "running"),
        (["failed", "queued"], False, "queued"),
        (["failed", "done"], False, "done"),  # best-of-N: one done is enough
        (["failed", "failed"], False, "failed"),
        (["stopped"], False, "failed"),  # an attempt that stopped without an outcome did not deliver
        (["cancelled", "failed"], False, "failed"),
    ],
)
def test_job_state(states: list[str], cancelled: bool, want: str) -> None:
    assert job_state(states, cancelled) == want
