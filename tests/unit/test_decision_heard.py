"""A decision's status written once the driver says the CLI has its answer: ``deliveredAt`` in the same write,
and no write on the apiserver while the answer is on its way (``approvals/delivery.py``, ``HEAR_WAIT``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hangar.kube import Obj
from hangar_operator.approvals import approval_name, delivery

from .operator_rig import Rig, count_reads, hold_status_writes, make_rig
from .test_approval_controller import asked
from .test_delivered_off_lock import confirm


def status_writes(rig: Rig, name: str) -> list[Obj]:
    return [w.body for w in rig.kube.writes if w.verb == "patch_status" and w.name == name]


async def decision_out(rig: Rig, name: str, monkeypatch: pytest.MonkeyPatch) -> asyncio.Task[None]:
    """The decision's reconcile, its driver connected, run until its answer is queued for the driver."""
    run = rig.run_id("s1")
    monkeypatch.setattr(rig.ctx.gateway, "connected", lambda r: r == run)
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    look = asyncio.create_task(rig.c.approvals.reconcile("default", name, rig.get("approvals", name)))
    for _ in range(500):
        if f"answer-{name}" in rig.commands(run):
            return look
        await asyncio.sleep(0.001)
    raise AssertionError("no answer sent")


async def test_the_decision_and_its_delivery_are_one_write_after_the_drivers_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    before = len(status_writes(rig, name))
    look = await decision_out(rig, name, monkeypatch)
    await asyncio.sleep(0.02)
    assert len(status_writes(rig, name)) == before  # nothing written while the answer is on its way
    # The driver's word, as the gateway hands it over: heard before it waits for the lock the decision holds.
    await asyncio.wait_for(rig.event("s1", "command_result", **confirm(name)), 5)
    await asyncio.wait_for(look, 5)
    await rig.c.approvals.deliveries.settled()
    writes = status_writes(rig, name)[before:]
    assert len(writes) == 1 and writes[0]["phase"] == "Allowed" and writes[0]["deliveredAt"]
    st = rig.status("approvals", name)
    assert st["deliveredAt"] >= st["decidedAt"]
    assert not rig.c.approvals.deliveries.hearing and not rig.c.approvals.deliveries.recorded
    assert rig.commands(rig.run_id("s1")).count(f"answer-{name}") == 1
    # Its latest watch event: nothing to do, and it is no longer counted among the answers out.
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    assert ("default", name) not in rig.c.approvals.sent


async def test_an_older_event_after_the_confirmation_sends_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    look = await decision_out(rig, name, monkeypatch)
    stale = rig.get("approvals", name)  # Pending, decided: the decision's own event, late
    await asyncio.wait_for(rig.event("s1", "command_result", **confirm(name)), 5)
    await asyncio.wait_for(look, 5)
    writes = len(rig.kube.writes)
    await asyncio.wait_for(rig.c.approvals.reconcile("default", name, stale), 5)
    assert rig.commands(rig.run_id("s1")).count(f"answer-{name}") == 1
    assert len(rig.kube.writes) == writes


async def test_unheard_in_time_the_status_goes_first_and_the_word_is_written_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "HEAR_WAIT", 0.05)
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    look = await decision_out(rig, name, monkeypatch)
    await asyncio.wait_for(look, 5)
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and "deliveredAt" not in st
    assert ("default", name) in rig.c.approvals.sent  # its confirmation is still to come
    await rig.event("s1", "command_result", **confirm(name))
    await rig.c.approvals.deliveries.settled()
    assert rig.status("approvals", name)["deliveredAt"]
    assert not rig.c.approvals.deliveries.hearing


async def test_a_lost_compare_and_set_keeps_what_was_heard_and_sends_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    look = await decision_out(rig, name, monkeypatch)
    # Someone changes the Approval meanwhile (a label, say): the decision's write loses and is made again.
    await rig.kube.patch("approvals", name, {"metadata": {"labels": {"x": "y"}}})
    await asyncio.wait_for(rig.event("s1", "command_result", **confirm(name)), 5)
    await asyncio.wait_for(look, 5)
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and st["deliveredAt"]
    assert rig.commands(rig.run_id("s1")).count(f"answer-{name}") == 1


async def test_no_wait_when_the_driver_is_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "HEAR_WAIT", 30.0)
    rig = await make_rig(tmp_path)  # this rig's gateway never listens: no driver is connected
    name = await asked(rig, "s1")
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    await asyncio.wait_for(rig.c.approvals.reconcile("default", name), 5)  # the answer waits at the gateway
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and "deliveredAt" not in st
    assert not rig.c.approvals.deliveries.hearing


async def test_a_decision_before_the_requests_status_decides_from_that_write_without_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1", approvals="ask")
    release = hold_status_writes(monkeypatch, "approvals", "requestedAt")
    request = asyncio.create_task(
        rig.event("s1", "permission_request", turn=turn, request_id="r1", tool="Bash", command="rm -rf x")
    )
    name = approval_name(rig.run_id("s1"), "r1")
    for _ in range(500):  # created, its status write held
        if rig.kube.scoped("default").peek("approvals", name) is not None:
            break
        await asyncio.sleep(0.001)
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    early = rig.get("approvals", name)  # the decision's event: no status yet
    assert not early.get("status") and early["spec"]["decision"] == "allow"
    reads = count_reads(monkeypatch)
    look = asyncio.create_task(rig.c.approvals.reconcile("default", name, early))  # waits for the lock
    await asyncio.sleep(0.01)
    release.set()
    await asyncio.wait_for(asyncio.gather(request, look), 5)
    assert rig.status("approvals", name)["phase"] == "Allowed"
    assert "approvals" not in reads
    assert rig.commands(rig.run_id("s1")).count(f"answer-{name}") == 1
    assert not rig.c.approvals.deliveries.early
