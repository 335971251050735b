"""When the agent asked, by the sandbox's word (``asked_at`` in a ``permission_request``): kept bounded as the
Approval's ``status.sandboxAskedAt`` and shown over REST, and nothing decided, timed or ordered by it."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hangar_api.approvals import approval_view, pending_and_recent
from hangar_operator.approvals import approval_name
from hangar_operator.approvals.policy import SANDBOX_TIME_MAX_AGE, sandbox_time
from tests.unit.operator_rig import Rig, make_rig

RECEIVED = datetime(2026, 12, 2, 6, 0, 0, tzinfo=UTC)
STARTED = RECEIVED - timedelta(minutes=5)
R = RECEIVED.timestamp()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (R - 0.025, RECEIVED - timedelta(milliseconds=25)),  # the usual: a few ms before the operator had it
        (R, RECEIVED),
        (int(R) - 60, RECEIVED - timedelta(seconds=60)),  # whole seconds are a time too
        (R + 0.5, RECEIVED),  # a clock ahead, or a lie: no later than the operator had the event
        (R + 86_400 * 365 * 100, RECEIVED),
        (1e300, RECEIVED),  # past what a datetime holds: compared as a number first
        (STARTED.timestamp(), STARTED),  # the turn's start itself
        (STARTED.timestamp() - 0.001, None),  # before its turn began: not this turn's prompt
        (-1e300, None),
        (0, None),
        (-1, None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (True, None),  # a bool is an int to Python, not a time
        (False, None),
        (None, None),
        ("1764655200.0", None),  # a number as text is not taken
        ([R], None),
        ({"at": R}, None),
    ],
)
def test_the_sandboxs_time_is_bounded_by_the_operators(value: Any, expected: datetime | None) -> None:
    got = sandbox_time(value, RECEIVED, STARTED)
    if expected is None:
        assert got is None
    else:
        assert got is not None and abs((got - expected).total_seconds()) < 1e-5 and got.tzinfo is not None


@pytest.mark.parametrize(
    ("age", "kept"),
    [
        (timedelta(0), True),
        (SANDBOX_TIME_MAX_AGE - timedelta(seconds=1), True),  # resent after the link was down a while
        (SANDBOX_TIME_MAX_AGE + timedelta(seconds=1), False),
        (timedelta(days=400), False),
    ],
)
def test_without_a_turn_start_only_the_age_bounds_it(age: timedelta, kept: bool) -> None:
    got = sandbox_time((RECEIVED - age).timestamp(), RECEIVED)
    assert (got is not None) is kept


async def ask(
    rig: Rig, request_id: str, asked_at: Any = None, turn: str = "s1-1", **more: Any
) -> dict[str, Any]:
    payload: dict[str, Any] = {"turn": turn, "request_id": request_id, "tool": "Bash", "command": "rm -rf x"}
    if asked_at is not None:
        payload["asked_at"] = asked_at
    await rig.event("s1", "permission_request", **payload, **more)
    return rig.get("approvals", approval_name(rig.run_id("s1"), request_id))


async def test_an_approval_keeps_the_sandboxs_time_bounded_and_shows_it(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.running("s1", approvals="ask")
    await asyncio.sleep(0.05)  # the turn began before the time the sandbox claims (else it is not kept)
    before = datetime.now(UTC)
    a = await ask(rig, "r1", asked_at=before.timestamp() - 0.02)
    st = a["status"]
    assert st["phase"] == "Pending"
    asked = datetime.fromisoformat(st["sandboxAskedAt"])
    assert abs((asked - before).total_seconds() + 0.02) < 0.002
    assert approval_view(a)["sandbox_asked_at"] == st["sandboxAskedAt"]
    # From the future: no later than the operator had it (and so no later than it wrote requestedAt).
    a = await ask(rig, "r2", asked_at=datetime.now(UTC).timestamp() + 3600)
    st = a["status"]
    assert datetime.fromisoformat(st["sandboxAskedAt"]) <= datetime.fromisoformat(st["requestedAt"])
    # Before the turn began, not a number, or not said (an older driver): not kept, and asked all the same.
    for rid, value in (("r3", 1.0), ("r4", "now"), ("r5", None)):
        a = await ask(rig, rid, asked_at=value)
        assert a["status"]["phase"] == "Pending" and "sandboxAskedAt" not in a["status"]
        assert approval_view(a)["sandbox_asked_at"] is None


async def test_the_sandboxs_time_moves_neither_the_deadline_nor_the_order(tmp_path: Path) -> None:
    """A sandbox that claims its second prompt came long before the first: the deadline is the operator's
    requestedAt plus the timeout, and the pending list is in the operator's order."""
    rig = await make_rig(tmp_path)
    rig.env(approvalTimeoutSeconds=600)
    await rig.running("s1", approvals="ask")
    started = datetime.fromisoformat(rig.status("turns", "s1-1")["startedAt"])
    # Stamps are stored to the millisecond: the first call is asked a few after the turn began, so the second
    # one's claim (the turn's start) is before it, not in the same millisecond.
    while datetime.now(UTC) - started < timedelta(milliseconds=3):
        await asyncio.sleep(0.001)
    first = await ask(rig, "r1", asked_at=datetime.now(UTC).timestamp())
    second = await ask(rig, "r2", asked_at=started.timestamp())
    for a in (first, second):
        st = a["status"]
        requested, deadline = (datetime.fromisoformat(st[k]) for k in ("requestedAt", "deadline"))
        assert deadline - requested == timedelta(seconds=600)
    assert second["status"]["sandboxAskedAt"] < first["status"]["sandboxAskedAt"]
    pending, _ = pending_and_recent([second, first], 10)
    assert [p["id"] for p in pending] == [first["metadata"]["name"], second["metadata"]["name"]]


async def test_a_call_the_policy_resolves_keeps_it_too(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.running("s1", approvals="deny-risky")
    now = datetime.now(UTC).timestamp()
    await rig.event(
        "s1",
        "permission_request",
        turn="s1-1",
        request_id="r9",
        tool="Bash",
        command="git push --force",
        asked_at=now,
    )
    st = rig.status("approvals", approval_name(rig.run_id("s1"), "r9"))
    assert st["phase"] == "Denied" and st["resolvedBy"] == "policy"
    assert abs(datetime.fromisoformat(st["sandboxAskedAt"]).timestamp() - now) < 0.002
