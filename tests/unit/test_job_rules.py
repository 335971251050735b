"""The rules of a delivering job: verification's next step for an attempt, ranking best-of-N attempts (and
why the others lost), the job's state from its attempts, the lifecycle's moves, and the PR's title and body."""

from __future__ import annotations

import itertools

import pytest

from hangar.models.environment import Verification as VerificationSpec
from hangar.models.job import Attempt, Verification
from hangar_operator.job_rules import job_state, pr_body, pr_title, rank, repair_message, verification_step
from hangar_operator.lifecycle import JOB, IllegalTransition, move

SPEC = VerificationSpec(command="make test", repair_turns=1)


def attempt(index: int = 1, state: str = "done", diff: int | None = None, *runs: Verification) -> Attempt:
    return Attempt(index=index, state=state, diff_lines=diff, verifications=list(runs))


def run(turn: str, passed: bool | None, exit_code: int | None = None) -> Verification:
    return Verification(turn=turn, command_id=f"verify-{turn}", passed=passed, exit_code=exit_code)


@pytest.mark.parametrize(
    ("a", "spec", "repairs", "want"),
    [
        # Nothing to check: finished work is ready to deliver.
        (attempt(), None, 0, ("verified", "none")),
        (attempt(), SPEC, 0, ("verifying", "verify")),
        (attempt(1, "done", None, run("t1", None)), SPEC, 0, ("verifying", "none")),
        (attempt(1, "done", None, run("t1", True, 0)), SPEC, 0, ("verified", "none")),
        # A failure gets a repair turn while there are repairs left, then fails the attempt.
        (attempt(1, "done", None, run("t1", False, 1)), SPEC, 0, ("running", "repair")),
        (attempt(1, "done", None, run("t1", False, 1)), SPEC, 1, ("failed", "none")),
        (
            attempt(1, "done", None, run("t1", False, 1)),
            VerificationSpec(command="x", repair_turns=0),
            0,
            ("failed", "none"),
        ),
        # A verification of an earlier turn says nothing about this one.
        (attempt(1, "done", None, run("t0", True, 0)), SPEC, 0, ("verifying", "verify")),
    ],
)
def test_verification_step(
    a: Attempt, spec: VerificationSpec | None, repairs: int, want: tuple[str, str]
) -> None:
    step = verification_step(a, "t1", spec, repairs)
    assert (step.state, step.action) == want
    if step.state == "failed":
        assert step.outcome and "verification failed (exit 1)" in step.outcome


def test_the_repair_message_carries_the_failure() -> None:
    v = run("t1", False, 2).model_copy(update={"output_tail": "FAILED tests/test_x.py::test_y"})
    msg = repair_message("make test", v)
    assert "`make test` failed (exit 2)" in msg and "FAILED tests/test_x.py::test_y" in msg


def test_rank_prefers_verified_then_the_smallest_diff_then_cost() -> None:
    a1 = attempt(1, "verified", 40)
    a2 = attempt(2, "failed")
    a2.outcome = "verification failed (exit 1) after 2 tries"
    a3 = attempt(3, "verified", 12)
    ordered = rank([a1, a2, a3], {1: 0.01, 2: 0.01, 3: 0.02})
    assert [a.index for a in ordered] == [3, 1]
    assert a3.rank == 1 and a3.lost is None and a1.rank == 2
    assert (
        a1.lost == "attempt 3 was delivered: it passed verification with a smaller diff (12 lines against 40)"
    )
    assert a2.lost == "not delivered: verification failed (exit 1) after 2 tries" and a2.rank is None
    b1, b2 = attempt(1, "verified", 5), attempt(2, "verified", 5)
    assert [a.index for a in rank([b1, b2], {1: 0.5, 2: 0.1})] == [2, 1]
    assert b1.lost is not None and "a lower cost ($0.1000 against $0.5000)" in b1.lost
    c1, c2 = attempt(1, "verified", 5), attempt(2, "verified", 5)
    rank([c1, c2], {})
    assert c1.rank == 1 and c2.lost is not None and "an equal result, started first" in c2.lost
    assert rank([attempt(1, "failed")], {}) == []


@pytest.mark.parametrize(
    ("states", "want"),
    [
        (["verified", "running"], "running"),  # best-of-N waits for every attempt to settle
        (["verified", "verifying"], "verifying"),
        (["verified", "failed"], "verified"),
        (["failed", "failed"], "failed"),
        (["needs_input", "verifying"], "needs_input"),  # nothing is delivered while a person is needed
        (["awaiting_approval", "verified"], "awaiting_approval"),
        (["done"], "done"),
        (["stopped"], "failed"),
    ],
)
def test_job_state(states: list[str], want: str) -> None:
    assert job_state(states, cancelled=False) == want
    assert job_state(states, cancelled=True) == "cancelled"


def test_the_lifecycle_of_a_delivering_job() -> None:
    path = [
        "queued",
        "awaiting_approval",
        "running",
        "needs_input",
        "running",
        "verifying",
        "delivering",
        "delivered",
    ]
    for a, b in itertools.pairwise(path):
        assert move(JOB, a, b) == b
    for final in ("done", "failed", "cancelled"):
        with pytest.raises(IllegalTransition):
            move(JOB, final, "running")
    # Only a follow-up leaves delivered: the delivered attempt works again, toward the same branch and PR.
    assert move(JOB, "delivered", "queued") == "queued" and move(JOB, "delivered", "running") == "running"
    with pytest.raises(IllegalTransition):
        move(JOB, "delivered", "delivering")
    with pytest.raises(IllegalTransition):
        move(JOB, "running", "delivered")  # only a delivery delivers
    with pytest.raises(IllegalTransition):
        move(JOB, "delivering", "done")
    assert move(JOB, "delivering", "failed") == "failed"


def test_pr_title_and_body() -> None:
    assert pr_title("\n  Fix the flaky test\nin tests/x.py") == "Fix the flaky test"
    long = pr_title("x" * 100)
    assert len(long) == 72 and long.endswith("…")
    body = pr_body(
        job="j1",
        prompt="Fix it\n\nplease",
        summary="Changed x.",
        verification=run("t1", True, 0),
        command="make test",
        tainted=True,
        taint_reasons=["WebFetch"],
        cost_usd=0.0123,
        attempt=2,
        attempts=3,
    )
    assert "> Fix it\n>\n> please" in body and "Changed x." in body
    assert "`make test` passed (exit 0)." in body and "**Tainted**" in body and "WebFetch" in body
    assert "Cost: $0.0123; attempt 2 of 3 (best-of-3)." in body
    plain = pr_body(
        job="j1",
        prompt="p",
        summary="",
        verification=None,
        command=None,
        tainted=False,
        taint_reasons=[],
        cost_usd=0,
        attempt=1,
        attempts=1,
    )
    assert "No verification command" in plain and "Taint: none." in plain and "one attempt" in plain
