"""Governed calls ask Tower first (spec 002), on the operator rig with a real Tower simulator over HTTP:
filed with what Tower needs, the receipt on the Approval, retried while Tower is down, decided by Tower like
a person, a "decided" kept before its receipt, re-read from Tower, and shadow mode recorded beside hangar."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.approvals import args_hash
from hangar.testing.tower import TowerSimulator
from hangar_operator.approvals import approval_name
from tests.unit.governance_rig import filed, governed_rig, risky_call, tower_decides, tower_sim, until


@pytest.fixture
def tower() -> Iterator[TowerSimulator]:
    t = tower_sim()
    try:
        yield t
    finally:
        t.stop()


async def test_a_governed_call_is_filed_with_tower_and_the_receipt_recorded(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower)
    name = await risky_call(rig, "s1")
    receipt = await filed(rig, name)
    ap = rig.get("approvals", name)
    assert ap["spec"]["tower"] == "enforce" and ap["status"]["phase"] == "Pending"
    assert ap["metadata"]["labels"]["hangar.dev/tower-approval"] == receipt
    [call] = tower.filed
    assert call["id"] == receipt
    assert call["tool"] == "Bash" and call["command"] == "git push --force origin main"
    assert call["args_hash"] == args_hash("Bash", {"command": "git push --force origin main"})
    assert (call["session"], call["turn"], call["run"], call["approval"]) == ("s1", "s1-1", "s1-r1", name)
    assert call["namespace"] == "default" and call["policy"] == "governed" and call["job"] is None
    assert call["started_by"] == "session.spec.prompt" and "force" in call["why"]
    assert call["taint"] == {"tainted": False, "reasons": []}
    # Nothing was answered: the call waits for Tower.
    assert f"answer-{name}" not in rig.commands("s1-r1")


async def test_tower_decides_like_a_person_and_is_recorded_as_tower(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower)
    name = await risky_call(rig, "s1")
    await filed(rig, name)
    await tower_decides(rig, name, "allowed", by="lee@acme.test")
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and st["resolvedBy"] == "tower" and st["by"] == "tower:lee@acme.test"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1


async def test_tower_down_the_filing_is_retried_and_the_call_keeps_waiting(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower)
    tower.available = False
    name = await risky_call(rig, "s1")
    await until(lambda: ("default", f"file/{name}") in rig.c.tower_calls.tasks, "a filing in the background")
    import asyncio

    await asyncio.sleep(0.4)  # a few failed attempts
    assert not rig.status("approvals", name).get("receipt") and tower.filed == []
    assert rig.status("approvals", name)["phase"] == "Pending"
    tower.available = True
    await filed(rig, name)
    assert len(tower.filed) == 1


async def test_a_decision_kept_before_the_receipt_is_applied_once_it_is_recorded(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower)
    # The webhook re-read A-1's "decided" before hangar had filed the call: kept an hour in the database.
    decision = {"id": "A-1", "status": "denied", "decided_by": "kim", "reason": "not on a Friday"}
    await rig.ctx.db.keep_tower_decision("A-1", decision)
    name = await risky_call(rig, "s1")
    assert await filed(rig, name) == "A-1"
    st = await until(lambda: (x := rig.status("approvals", name))["phase"] != "Pending" and x, "decided")
    assert st["phase"] == "Denied" and st["resolvedBy"] == "tower" and st["by"] == "tower:kim"
    assert st["message"] == "not on a Friday"


async def test_pending_calls_are_re_read_from_tower(tmp_path: Path, tower: TowerSimulator) -> None:
    rig = await governed_rig(tmp_path, tower)
    name = await risky_call(rig, "s1")
    receipt = await filed(rig, name)
    await rig.c.tower_calls.reread()
    assert rig.status("approvals", name)["phase"] == "Pending"  # still pending at Tower
    tower.decide(receipt, "allowed", by="kim")  # its event goes nowhere (no webhook here)
    await rig.c.tower_calls.reread()
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and st["resolvedBy"] == "tower"
    assert (await rig.ctx.db.tower_decision(receipt) or {}).get("status") == "allowed"


async def test_ask_files_only_its_risky_calls_when_tower_enforces(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower)
    risky = await risky_call(rig, "s1", approvals="ask")
    await filed(rig, risky)
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r2", tool="Bash", command="ls")
    plain = approval_name("s1-r1", "r2")
    assert rig.get("approvals", plain)["spec"].get("tower") is None
    assert rig.status("approvals", plain)["phase"] == "Pending"  # a person answers it, as under ask
    assert len(tower.filed) == 1


async def test_shadow_decides_as_deny_risky_and_records_tower_beside_it(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower, mode="shadow")
    name = await risky_call(rig, "s1")
    st = rig.status("approvals", name)
    assert st["phase"] == "Denied" and st["resolvedBy"] == "policy"  # nothing waited on Tower
    assert f"answer-{name}" in rig.commands("s1-r1")
    assert rig.get("approvals", name)["spec"]["tower"] == "shadow"
    receipt = await filed(rig, name)
    tower.decide(receipt, "allowed", by="kim")
    await rig.c.tower_calls.reread()
    st = rig.status("approvals", name)
    assert st["phase"] == "Denied" and st["tower"]["status"] == "allowed" and st["tower"]["by"] == "kim"
    [entry] = await rig.ctx.db.audit_entries("governance.shadow_decision")
    assert entry["tower_decision"] == "allowed" and entry["hangar_decision"] == "deny"
    assert entry["agrees"] is False


async def test_a_harmless_governed_call_is_not_filed(tmp_path: Path, tower: TowerSimulator) -> None:
    rig = await governed_rig(tmp_path, tower)
    await risky_call(rig, "s1", command="ls -la")
    assert tower.filed == []


async def test_a_restart_between_towers_receipt_and_recording_it_does_not_file_twice(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    """The filing carries the Approval's uid as its idempotency key: the operator that comes back files the
    call again (it has no receipt) and Tower answers the receipt it gave, filing nothing new."""
    from hangar_operator.controllers import build
    from hangar_operator.retry import Retrier

    rig = await governed_rig(tmp_path, tower)
    rig.kube.fail_next(
        "patch", "approvals", 500, times=10_000
    )  # the receipt is never recorded: as if it died
    name = await risky_call(rig, "s1")
    await until(lambda: tower.filed, "Tower's receipt")
    rig.c.tower_calls.stop()  # the operator is gone
    rig.kube.server.faults.clear()
    assert not rig.status("approvals", name).get("receipt")
    [first] = tower.filed
    # A new operator on the same cluster and database: at start it files what has no receipt.
    again = build(rig.kube, rig.ctx.db, rig.ctx.settings, Retrier(first_delay=0.05, max_delay=0.2))
    again.tower_calls.first_backoff = 0.05
    again.tower_calls.start()
    try:
        receipt = await filed(rig, name)
    finally:
        again.tower_calls.stop()
    assert receipt == first["id"] and len(tower.filed) == 1
    assert rig.get("approvals", name)["metadata"]["labels"]["hangar.dev/tower-approval"] == receipt


async def test_the_simulator_answers_a_repeated_filing_with_its_receipt(tower: TowerSimulator) -> None:
    """Over HTTP through hangar's client: the same key, the same receipt (nothing filed or announced again);
    another key, a new filing; the same key for another call, refused."""
    from hangar.governance.tower import Call, TowerClient, TowerUnavailable

    from .governance_rig import CREDENTIAL

    client = TowerClient(tower.url, CREDENTIAL)
    call = Call(
        tool="Bash",
        command="git push --force",
        args_hash="h1",
        namespace="default",
        session="s1",
        turn="s1-1",
        run="s1-r1",
        approval="ap-1",
        policy="governed",
    )
    try:
        a = await client.file(call, "uid-1")
        b = await client.file(call.model_copy(update={"taint": {"tainted": True}}), "uid-1")
        assert (a.id, a.status) == (b.id, b.status) == ("A-1", "pending")
        assert len(tower.filed) == 1 and tower.keys["uid-1"][0] == "A-1"
        created = [d for d in tower.deliveries.values() if d.event["kind"] == "approval.created"]
        assert len(created) == 1
        tower.decide("A-1", "allowed")
        assert (await client.file(call, "uid-1")).status == "allowed"
        c = await client.file(call.model_copy(update={"approval": "ap-2", "turn": "s1-2"}), "uid-2")
        assert c.id == "A-2" and len(tower.filed) == 2
        with pytest.raises(TowerUnavailable, match="422"):
            await client.file(call.model_copy(update={"args_hash": "h2"}), "uid-1")
    finally:
        await client.close()
