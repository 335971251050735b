"""``deliveredAt`` written beside the session's next driver events, not ahead of them (``approvals/delivery.py``),
and the watch events of an Approval no reconcile can act on answered without the session's lock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hangar_operator.approvals import approval_name
from hangar_operator.approvals.delivery import ended
from tests.unit.operator_rig import Rig, hold_status_writes, make_rig

from .test_approval_controller import asked


@pytest.mark.parametrize(
    ("phase", "delivered", "sent", "expected"),
    [
        # Not ended: a decision may still come, a deadline pass, the turn end.
        (None, False, False, False),
        (None, True, True, False),
        ("Pending", False, False, False),
        ("Pending", False, True, False),
        ("Pending", True, True, False),
        # Withdrawn: nothing to deliver, whatever else.
        ("Withdrawn", False, False, True),
        ("Withdrawn", False, True, True),
        # Decided and recorded as delivered: never unset.
        ("Allowed", True, False, True),
        ("Denied", True, False, True),
        ("Expired", True, False, True),
        # Decided, sent by this process, the confirmation to come (its write records it).
        ("Allowed", False, True, True),
        ("Denied", False, True, True),
        ("Expired", False, True, True),
        # Decided, not delivered, not sent here (a restart; a write given up): the answer is sent again.
        ("Allowed", False, False, False),
        ("Denied", False, False, False),
        ("Expired", False, False, False),
    ],
)
def test_what_no_reconcile_can_act_on(phase: str | None, delivered: bool, sent: bool, expected: bool) -> None:
    assert ended(phase, delivered, sent) is expected


async def decided(rig: Rig, session: str = "s1", request_id: str = "r1") -> str:
    name = await asked(rig, session, request_id)
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    await rig.c.approvals.reconcile("default", name)
    assert rig.status("approvals", name)["phase"] == "Allowed"
    return name


def confirm(name: str) -> dict[str, object]:
    return {"op": "answer", "ok": True, "command_id": f"answer-{name}"}


def hold_delivered(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The apiserver slow to take a ``deliveredAt`` record: each such status write waits for the event."""
    return hold_status_writes(monkeypatch, "approvals", "deliveredAt")


async def test_the_next_request_is_not_queued_behind_the_delivered_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await decided(rig)
    release = hold_delivered(monkeypatch)
    await asyncio.wait_for(rig.event("s1", "command_result", **confirm(name)), 5)
    # The agent's next call asks while the record is still being written: it is pending at once.
    await asyncio.wait_for(
        rig.event("s1", "permission_request", turn="s1-1", request_id="r2", tool="Bash", command="rm -rf y"),
        5,
    )
    second = approval_name(rig.run_id("s1"), "r2")
    assert rig.status("approvals", second)["phase"] == "Pending"
    assert "deliveredAt" not in rig.status("approvals", name)
    release.set()
    await rig.c.approvals.deliveries.settled()
    assert rig.status("approvals", name)["deliveredAt"]
    assert ("default", name) not in rig.c.approvals.sent


async def test_a_watch_event_while_the_record_is_written_sends_nothing_and_takes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await decided(rig)
    release = hold_delivered(monkeypatch)
    sent = rig.commands("s1-r1").count(f"answer-{name}")
    await rig.event("s1", "command_result", **confirm(name))
    async with rig.ctx.lock("default", "s1"):  # the session busy: the event is answered all the same
        await asyncio.wait_for(rig.c.approvals.reconcile("default", name, rig.get("approvals", name)), 5)
    assert rig.commands("s1-r1").count(f"answer-{name}") == sent
    release.set()
    await rig.c.approvals.deliveries.settled()
    # The record's own event: nothing to do either, under a held lock too.
    writes = len(rig.kube.writes)
    async with rig.ctx.lock("default", "s1"):
        await asyncio.wait_for(rig.c.approvals.reconcile("default", name, rig.get("approvals", name)), 5)
    assert len(rig.kube.writes) == writes and rig.commands("s1-r1").count(f"answer-{name}") == sent


async def test_a_write_the_apiserver_did_not_take_is_tried_again(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await decided(rig)
    rig.kube.fail_next("patch_status", "approvals", 503, name=name, times=2)
    await rig.event("s1", "command_result", **confirm(name))
    await asyncio.wait_for(rig.c.approvals.deliveries.settled(), 10)
    assert rig.status("approvals", name)["deliveredAt"]


async def test_a_write_refused_for_good_is_repaired_by_the_answer_sent_again(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await decided(rig)
    rig.kube.fail_next("patch_status", "approvals", 422, name=name)
    await rig.event("s1", "command_result", **confirm(name))
    await rig.c.approvals.deliveries.settled()
    assert "deliveredAt" not in rig.status("approvals", name)
    assert ("default", name) not in rig.c.approvals.sent
    # The next look (an event, the listing at start-up) sends the answer again, under the same command id
    # (the driver answers with its recorded result), and that confirmation is recorded.
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    assert ("default", name) in rig.c.approvals.sent
    assert f"answer-{name}" in rig.commands("s1-r1")
    await rig.event("s1", "command_result", **confirm(name), duplicate=True)
    await rig.c.approvals.deliveries.settled()
    assert rig.status("approvals", name)["deliveredAt"]


async def test_two_confirmations_write_the_record_once(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await decided(rig)
    await rig.event("s1", "command_result", **confirm(name))
    await rig.event("s1", "command_result", **confirm(name), duplicate=True)
    await rig.c.approvals.deliveries.settled()
    written = [
        w for w in rig.kube.writes if w.verb == "patch_status" and w.name == name and "deliveredAt" in w.body
    ]
    assert len(written) == 1


async def test_a_confirmation_of_an_undecided_approval_records_nothing(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.event("s1", "command_result", **confirm(name))
    await rig.c.approvals.deliveries.settled()
    assert rig.status("approvals", name)["phase"] == "Pending"
    assert "deliveredAt" not in rig.status("approvals", name)
