"""requestedAt of one run's calls is strictly increasing at the stored (millisecond) resolution."""

from __future__ import annotations

from datetime import UTC, datetime

from hangar.models.base import iso
from hangar_operator.approvals import asked_order
from hangar_operator.approvals.asked_order import RequestClock


def test_calls_of_one_run_within_a_millisecond_get_increasing_stamps() -> None:
    clock = RequestClock()
    stamps = [clock.now("run-a") for _ in range(50)]  # far faster than one a millisecond
    shown = [iso(t) for t in stamps]
    assert shown == sorted(shown) and len(set(shown)) == 50
    assert all(t.microsecond % 1000 == 0 for t in stamps)


def test_other_runs_are_not_pushed_ahead() -> None:
    clock = RequestClock()
    for _ in range(20):
        clock.now("run-a")
    b = clock.now("run-b")
    assert abs((b - datetime.now(UTC)).total_seconds()) < 0.005


def test_old_stamps_are_pruned_so_the_clock_stays_bounded() -> None:
    clock = RequestClock()
    old = datetime(2020, 1, 1, tzinfo=UTC)
    clock.last = {f"run-{i}": old for i in range(asked_order.PRUNE_AT)}
    clock.now("run-new")
    assert list(clock.last) == ["run-new"]


def test_many_runs_asking_at_once_are_not_walked_on_every_call() -> None:
    clock = RequestClock()
    for i in range(asked_order.PRUNE_AT + 50):  # all recent: a prune keeps them
        clock.now(f"run-{i}")
    kept = clock.last
    clock.now("run-next")
    assert clock.last is kept  # not rebuilt: the next prune waits for twice as many runs
    assert clock.prune_at >= 2 * asked_order.PRUNE_AT
