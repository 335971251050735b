"""What stands between a decision and the agent: the watch events of the request before it take neither the
session's lock nor a read, and a confirmation written while a look was out does not send the answer again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hangar.kube import Obj
from hangar.testing.fake_kube import FakeKube
from hangar_operator.approvals.delivery import waiting_as_known

from .operator_rig import make_rig
from .test_approval_controller import asked
from .test_pending_writer import count_answers


@pytest.mark.parametrize(
    ("phase", "decided", "armed", "expected"),
    [
        (None, False, False, True),  # the request's create: its status write is seen next
        (None, False, True, True),
        ("Pending", False, True, True),  # its status write, its deadline armed here
        ("Pending", False, False, False),  # not armed here (a restart's listing; the timer fired): a look
        (None, True, False, False),  # a decision: always looked at
        (None, True, True, False),
        ("Pending", True, True, False),
        ("Pending", True, False, False),
        ("Allowed", False, True, False),  # ended ones are ``ended``'s to say
        ("Withdrawn", False, False, False),
    ],
)
def test_what_an_undecided_approval_needs_no_look_for(
    phase: str | None, decided: bool, armed: bool, expected: bool
) -> None:
    assert waiting_as_known(phase, decided, armed) is expected


async def test_the_requests_own_events_take_no_lock_and_keep_the_deadline(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    assert rig.c.approvals.armed("default", name)
    created = rig.get("approvals", name)
    created["status"] = {}  # as its create's event shows it: stamps, no status yet
    writes = len(rig.kube.writes)
    async with rig.ctx.lock("default", "s1"):  # the session busy (the request's own writes)
        await asyncio.wait_for(rig.c.approvals.reconcile("default", name, created), 5)
        await asyncio.wait_for(rig.c.approvals.reconcile("default", name, rig.get("approvals", name)), 5)
    assert len(rig.kube.writes) == writes
    assert rig.c.approvals.armed("default", name)  # the deadline still holds


async def test_a_pending_approval_not_armed_here_is_looked_at_and_armed(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    rig.c.approvals.timers.pop(("default", name)).cancel()  # as after a restart
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    assert rig.c.approvals.armed("default", name)


async def test_a_decision_behind_the_requests_events_is_sent_from_its_own(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    # The status write's event, older than the decision, needs nothing; the decision's event delivers.
    pending = rig.get("approvals", name)
    pending["spec"].pop("decision")
    await rig.c.approvals.reconcile("default", name, pending)
    assert f"answer-{name}" not in rig.commands("s1-r1")
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    assert rig.status("approvals", name)["phase"] == "Allowed"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1


async def test_a_confirmation_written_while_a_look_was_out_sends_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    decision_event = rig.get("approvals", name)
    await rig.c.approvals.reconcile("default", name)  # decided (an earlier event's look)
    sent = count_answers(monkeypatch)
    # The decision's own event is looked at; its read goes out before the confirmation is written and comes
    # back after it (what it read is older than the deliveredAt).
    gate, out = asyncio.Event(), asyncio.Event()
    get = FakeKube.get

    async def late(self: FakeKube, plural: str, n: str) -> Obj | None:
        obj = await get(self, plural, n)
        if plural == "approvals" and not out.is_set():
            out.set()
            await gate.wait()
        return obj

    monkeypatch.setattr(FakeKube, "get", late)
    look = asyncio.create_task(rig.c.approvals.reconcile("default", name, decision_event))
    await asyncio.wait_for(out.wait(), 5)
    rig.c.approvals.deliveries.confirmed("default", name)  # the driver's word (the look holds the lock)
    await asyncio.wait_for(rig.c.approvals.deliveries.settled(), 5)
    assert rig.status("approvals", name)["deliveredAt"]
    gate.set()
    await asyncio.wait_for(look, 5)
    assert sent == []
