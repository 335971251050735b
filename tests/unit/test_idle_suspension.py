"""Idle sessions give their sandbox back (issue 10, item 11), on the operator rig: past the idle time a
session is checkpointed and suspended with reason idle, holding no slot; the next message resumes it in a
new run on the same volume; the Environment's own value wins over the deployment's; 0 never suspends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hangar.turns import create_turn

from .operator_rig import Rig, make_rig


async def idle_session(rig: Rig, name: str = "s1") -> None:
    """A session whose first turn ended, its sandbox connected, and whose last turn ended long ago."""
    turn = await rig.running(name)
    await rig.event(name, "turn_ended", turn=turn, outcome="completed", summary="done")
    assert rig.status("sessions", name)["phase"] == "Idle"
    long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    rig.kube.set_status("turns", turn, {"finishedAt": long_ago})
    rig.kube.set_status("sessions", name, {"sandbox": {"startedAt": long_ago}})


async def test_an_idle_session_is_checkpointed_and_gives_its_sandbox_back(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, idle_suspend_after=60)
    rig.env()
    await idle_session(rig)
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Suspending" and st["suspended"]["reason"] == "idle"
    [cid] = [c for c in rig.commands("s1-r1") if c.startswith("checkpoint-")]
    await rig.event("s1", "command_result", op="checkpoint", ok=True, command_id=cid, size=7, sha256="cd")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Suspended" and st["sandbox"].get("pod") is None
    assert "idle" in st["message"] and st["suspended"]["reason"] == "idle"
    [ck] = st["checkpoints"]
    assert ck["reason"] == "idle" and ck["size"] == 7
    assert rig.kube.peek("pods", "s1-r1") is None and rig.kube.peek("secrets", "s1-r1-key") is None
    assert (
        await rig.c.sandboxes.in_use("default", "other") == 0
    )  # the slot count shows running sandboxes only
    # Nothing more happens until someone needs the agent.
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Suspended"
    # The next message resumes it: a new run on the same volume, and the turn starts once it connects.
    await create_turn(rig.kube, "s1", "what did you do?", by="alice")
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Starting" and st["sandbox"]["run"] == "s1-r2" and not st.get("suspended")
    await rig.connect("s1")
    assert rig.status("turns", "s1-2")["phase"] == "Running"
    kinds = [e.kind for e in await rig.ctx.db.events("session/s1")]
    assert "suspended" in kinds and "resumed" in kinds


async def test_the_environment_decides_and_zero_is_never(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, idle_suspend_after=60)
    rig.env(idleSuspendSeconds=0)
    await idle_session(rig)
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Idle"

    rig2 = await make_rig(tmp_path / "b", idle_suspend_after=0)
    rig2.env(idleSuspendSeconds=30)
    await idle_session(rig2)
    await rig2.reconcile("s1")
    assert rig2.status("sessions", "s1")["phase"] == "Suspending"


async def test_a_session_that_worked_recently_keeps_its_sandbox(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, idle_suspend_after=3600)
    rig.env()
    turn = await rig.running("s1")
    await rig.event("s1", "turn_ended", turn=turn, outcome="completed", summary="done")
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Idle"
    assert not [c for c in rig.commands("s1-r1") if c.startswith("checkpoint-")]
