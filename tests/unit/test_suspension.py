"""Suspend and resume on the operator rig with a real Tower simulator (spec 002): a session's governed call
that waited the suspend time is paused, its turn interrupted, a checkpoint taken and the sandbox released;
Tower's allow resumes it in a new run whose Secret carries the pre-cleared call signed with the new key; a
deny leaves it suspended; a stop withdraws the call at Tower and a later allow resumes nothing; a job's turn
is never suspended."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.approvals import args_hash
from hangar.governance.events import Event
from hangar.governance.tower import TowerClient
from hangar.testing.tower import TowerSimulator
from hangar.turns import create_turn
from hangar_api.governance import Governance, WebhookSecrets, _approval_hint
from hangar_driver import precleared
from hangar_operator.approvals import approval_name
from tests.unit.governance_rig import (
    CREDENTIAL,
    command,
    filed,
    governed_rig,
    risky_call,
    tower_decides,
    tower_sim,
    until,
)
from tests.unit.operator_rig import Rig

PUSH = "git push --force origin main"


@pytest.fixture
def tower() -> Iterator[TowerSimulator]:
    t = tower_sim()
    try:
        yield t
    finally:
        t.stop()


async def suspended(rig: Rig, session: str = "s1") -> tuple[str, str]:
    """A session suspended on its governed call: (approval, Tower's receipt)."""
    name = await risky_call(rig, session, command=PUSH)
    receipt = await filed(rig, name)
    await until(lambda: rig.status("sessions", session)["phase"] == "Suspending", "suspending", 10)
    run = f"{session}-r1"
    body = command(rig, run, f"answer-{name}")
    assert body["decision"] == "deny"
    assert body["message"] == f"Paused for approval {receipt}; this turn resumes when it's signed."
    # A moment after the deny (so the CLI records hangar's words), the turn is interrupted.
    await until(lambda: f"suspend-{session}-1" in rig.commands(run), "the interrupt")
    assert command(rig, run, f"suspend-{session}-1")["op"] == "interrupt"
    # The driver ends the turn (interrupted); the session stays Suspending and asks for a checkpoint.
    await rig.event(session, "turn_ended", turn=f"{session}-1", outcome="interrupted", exit_status=130)
    assert rig.status("sessions", session)["phase"] == "Suspending"
    assert rig.status("approvals", name)["phase"] == "Pending"  # the turn's end does not withdraw it
    await rig.reconcile(session)
    [cid] = [c for c in rig.commands(run) if c.startswith("checkpoint-")]
    ck = command(rig, run, cid)
    assert ck["op"] == "checkpoint" and ck["path"] == f"{cid[len('checkpoint-') :]}.tar.gz"
    await rig.event(session, "command_result", op="checkpoint", ok=True, command_id=cid, size=10, sha256="ab")
    return name, receipt


async def test_a_waiting_call_suspends_the_session_and_frees_its_slot(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower, governance_suspend_after=1)
    name, receipt = await suspended(rig)
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Suspended" and st["sandbox"].get("pod") is None
    sus = st["suspended"]
    assert (sus["approval"], sus["tower"], sus["turn"], sus["reason"]) == (name, receipt, "s1-1", "approval")
    assert sus["argsHash"] == args_hash("Bash", {"command": PUSH}) and sus["checkpoint"].startswith("ck-")
    [ck] = st["checkpoints"]
    assert ck["turn"] == "s1-1" and ck["location"].startswith("pvc://default/s1-workspace/checkpoints/")
    assert ck["size"] == 10 and ck["reason"] == "approval"
    assert rig.kube.peek("pods", "s1-r1") is None and rig.kube.peek("secrets", "s1-r1-key") is None
    assert await rig.c.sandboxes.in_use("default", "other") == 0
    assert rig.status("turns", "s1-1")["phase"] == "Interrupted"
    ap = rig.status("approvals", name)
    assert (
        ap["phase"] == "Pending" and ap.get("deadline") is None
    )  # it waits for Tower, past the ask deadline
    assert ("s1", "Suspended") in {(o, r) for (o, r, _) in rig.events()}


async def test_towers_allow_resumes_with_the_call_pre_cleared_for_the_new_run(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower, governance_suspend_after=1)
    name, receipt = await suspended(rig)
    await tower_decides(rig, name, "allowed", by="lee@acme.test")
    assert rig.status("approvals", name)["resolvedBy"] == "tower"
    st = await until(lambda: (x := rig.status("sessions", "s1"))["phase"] == "Starting" and x, "resumed")
    assert st["phase"] == "Starting" and st["sandbox"]["run"] == "s1-r2" and not st.get("suspended")
    assert st["resuming"]["turn"] == "s1-2" and st["resuming"]["tower"] == receipt
    turn2 = rig.get("turns", "s1-2")["spec"]
    assert receipt in turn2["message"] and PUSH in turn2["message"] and turn2["by"] == "tower:lee@acme.test"
    # The new run's Secret holds the call, signed with the new run's key and bound to it.
    data = (rig.kube.peek("secrets", "s1-r2-key") or {})["data"]
    key = base64.b64decode(data["run-key"])
    raw = base64.b64decode(data["precleared"])
    call, why = precleared.decode(raw, key, "s1-r2")
    assert why == "" and call is not None
    assert (call["turn"], call["tool"], call["tower"]) == ("s1-2", "Bash", receipt)
    assert call["args_hash"] == args_hash("Bash", {"command": PUSH})
    assert precleared.decode(raw, b"another key", "s1-r2")[0] is None
    assert precleared.decode(raw, key, "s1-r3")[0] is None
    # The new sandbox connects and the resuming turn starts in the same conversation.
    await rig.connect("s1")
    assert rig.status("turns", "s1-2")["phase"] == "Running"
    # Its driver allowed the call itself and says so: recorded, resolved by tower, nothing answered.
    await rig.event(
        "s1",
        "permission_request",
        turn="s1-2",
        request_id="r7",
        tool="Bash",
        input={"command": PUSH},
        command=PUSH,
        precleared={"approval": name, "tower": receipt, "args_hash": call["args_hash"]},
    )
    again = approval_name("s1-r2", "r7")
    ap = rig.status("approvals", again)
    assert ap["phase"] == "Allowed" and ap["resolvedBy"] == "tower" and ap["receipt"] == receipt
    assert f"answer-{again}" not in rig.commands("s1-r2")
    assert not rig.status("sessions", "s1").get("resuming")
    [entry] = await rig.ctx.db.audit_entries("governance.precleared_call")
    assert entry["tower"] == receipt


async def test_a_resume_waits_for_a_free_slot(tmp_path: Path, tower: TowerSimulator) -> None:
    rig = await governed_rig(tmp_path, tower, governance_suspend_after=1, max_sandboxes=1)
    name, _ = await suspended(rig)
    await rig.session("other", prompt="hi")
    await rig.reconcile("other")  # the slot s1 gave back
    assert rig.status("sessions", "other")["sandbox"]["pod"] == "other-r1"
    await tower_decides(rig, name, "allowed")
    st = await until(lambda: (x := rig.status("sessions", "s1"))["reason"] == "NoSandboxSlot" and x, "waits")
    assert st["phase"] == "Pending" and st["reason"] == "NoSandboxSlot" and st["resuming"]["turn"] == "s1-2"


async def test_towers_deny_leaves_it_suspended_and_a_new_message_starts_a_new_run(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower, governance_suspend_after=1)
    name, _ = await suspended(rig)
    await tower_decides(rig, name, "denied", by="kim", reason="not on a Friday")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Suspended" and st["suspended"]["decision"] == "denied"
    assert "not on a Friday" in st["message"] and st["suspended"]["message"] == "not on a Friday"
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Suspended"
    await create_turn(rig.kube, "s1", "then push to a branch instead", by="ann")
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Starting" and st["sandbox"]["run"] == "s1-r2" and not st.get("suspended")
    assert "precleared" not in (rig.kube.peek("secrets", "s1-r2-key") or {})["data"]


async def test_a_stop_while_suspended_withdraws_the_call_and_a_later_allow_resumes_nothing(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower, governance_suspend_after=1)
    name, receipt = await suspended(rig)
    await rig.kube.patch(
        "sessions", "s1", {"spec": {"stopped": True, "stoppedBy": "tower:lee", "stopReason": "x"}}
    )
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Stopped" and not st.get("suspended")
    ap = rig.status("approvals", name)
    assert ap["phase"] == "Withdrawn" and "stopped" in ap["reason"]
    await until(lambda: tower.withdrawn, "Tower told")
    assert tower.withdrawn[0][0] == receipt
    # Tower's allow arrives afterwards (its event, through the webhook's own code): nothing resumes.
    tower.approvals[receipt]["status"] = "allowed"
    tower.approvals[receipt]["decided_by"] = "lee"
    client = TowerClient(tower.url, CREDENTIAL)
    g = Governance(rig.kube, rig.ctx.db, WebhookSecrets(rig.kube, "x"), client)
    event = Event.model_validate({"id": "ev-1", "kind": "approval.decided", "approval": {"id": receipt}})
    out = await _approval_hint(g, event)
    await client.close()
    assert out["body"]["applied"] == 0
    [refused] = await rig.ctx.db.audit_entries("governance.resume_refused")
    assert refused["target"] == "s1" and refused["tower"] == receipt and "stopped" in refused["reason"]
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Stopped"


async def test_a_jobs_turn_waits_in_place(tmp_path: Path, tower: TowerSimulator) -> None:
    rig = await governed_rig(tmp_path, tower, governance_suspend_after=0)
    rig.env()
    await rig.kube.create(
        "sessions",
        {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Session",
            "metadata": {"name": "j1-a1", "labels": {"hangar.dev/job": "j1"}},
            "spec": {"environment": "dev", "prompt": "go", "approvals": "governed"},
        },
    )
    await rig.reconcile("j1-a1")
    await rig.connect("j1-a1")
    await rig.event("j1-a1", "permission_request", turn="j1-a1-1", request_id="r1", tool="Bash", command=PUSH)
    name = approval_name("j1-a1-r1", "r1")
    await filed(rig, name)
    await asyncio.sleep(0.5)
    assert rig.status("sessions", "j1-a1")["phase"] == "Running"
    assert not [c for c in rig.commands("j1-a1-r1") if c.startswith(("answer-", "suspend-"))]


async def test_the_webhook_keeps_towers_decision_for_a_call_it_cannot_find(
    tmp_path: Path, tower: TowerSimulator
) -> None:
    rig = await governed_rig(tmp_path, tower)
    tower.approvals["A-77"] = {"id": "A-77", "status": "allowed", "decided_by": "kim"}
    client = TowerClient(tower.url, CREDENTIAL)
    g = Governance(rig.kube, rig.ctx.db, WebhookSecrets(rig.kube, "x"), client)
    event = Event.model_validate({"id": "ev-2", "kind": "approval.decided", "approval": {"id": "A-77"}})
    out = await _approval_hint(g, event)
    await client.close()
    assert out["body"]["applied"] == 0
    kept = await rig.ctx.db.tower_decision("A-77")
    assert kept is not None and kept["status"] == "allowed" and json.dumps(kept)


@pytest.mark.parametrize("idle_suspended", [False, True])
async def test_run_stop_of_an_idle_session_stops_it_without_an_interrupt(
    tmp_path: Path, tower: TowerSimulator, idle_suspended: bool
) -> None:
    """Tower's run.stop for a session between turns (Idle, or suspended for being idle): no turn to
    interrupt, the session is Stopped with who and why, its sandbox released, audited once."""
    from datetime import UTC, datetime, timedelta

    from hangar_api.governance import _run_stop

    rig = await governed_rig(tmp_path, tower, idle_suspend_after=60)
    rig.env()
    turn = await rig.running("s1")
    await rig.event("s1", "turn_ended", turn=turn, outcome="completed", summary="done")
    assert rig.status("sessions", "s1")["phase"] == "Idle"
    if idle_suspended:
        long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        rig.kube.set_status("turns", turn, {"finishedAt": long_ago})
        rig.kube.set_status("sessions", "s1", {"sandbox": {"startedAt": long_ago}})
        await rig.reconcile("s1")
        [cid] = [c for c in rig.commands("s1-r1") if c.startswith("checkpoint-")]
        await rig.event("s1", "command_result", op="checkpoint", ok=True, command_id=cid, size=1)
        assert rig.status("sessions", "s1")["phase"] == "Suspended"
    client = TowerClient(tower.url, CREDENTIAL)
    g = Governance(rig.kube, rig.ctx.db, WebhookSecrets(rig.kube, "x"), client)
    event = Event.model_validate(
        {
            "id": "ev-9",
            "kind": "run.stop",
            "run": {"session": "s1", "stopped_by": "lee", "reason": "done here"},
        }
    )
    out = await _run_stop(g, event)
    await client.close()
    assert out["body"] == {"ok": True, "stopped": ["s1"]}
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Stopped" and not st.get("suspended") and st["sandbox"].get("pod") is None
    assert "tower:lee" in st["message"] and "done here" in st["message"]
    assert rig.kube.peek("pods", "s1-r1") is None
    assert not rig.get("turns", turn)["spec"].get("interrupts")  # nothing was running: nothing interrupted
    assert rig.status("turns", turn)["phase"] == "Completed"
    [audited] = await rig.ctx.db.audit_entries("governance.run_stop")
    assert audited["target"] == "s1" and audited["stopped_by"] == "lee"
    kinds = [e.kind for e in await rig.ctx.db.events("session/s1")]
    assert "run_stopped" in kinds
