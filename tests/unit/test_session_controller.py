"""The Session controller's reconcile and the sandbox manager on a FakeKube: every session phase."""

from __future__ import annotations

from pathlib import Path

from tests.unit.operator_rig import make_rig


async def test_a_session_goes_pending_starting_idle_running_idle(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.session("s1", prompt="hello")
    assert rig.status("sessions", "s1") == {}  # nothing happens before the controller looks
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Starting" and st["sandbox"]["pod"] == "s1-r1" and st["counters"]["sandboxes"] == 1
    assert rig.kube.peek("pods", "s1-r1") and rig.kube.peek("secrets", "s1-r1-key")
    assert rig.kube.peek("persistentvolumeclaims", "s1-workspace")
    assert rig.condition("sessions", "s1")["status"] == "False"
    assert rig.condition("sessions", "s1")["reason"] == "SandboxStarting"
    assert st["observedGeneration"] == rig.get("sessions", "s1")["metadata"]["generation"]
    assert rig.status("turns", "s1-1") == {}  # queued: no sandbox to run it yet

    await rig.connect("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Running" and st["currentTurn"] == "s1-1" and st["sandbox"]["connected"]
    turn = rig.status("turns", "s1-1")
    assert turn["phase"] == "Running" and turn["run"] == "s1-r1" and turn["policy"] == "auto"
    assert "start-s1-1" in rig.commands("s1-r1")
    ready = rig.condition("sessions", "s1")
    assert ready["status"] == "True" and ready["reason"] == "SandboxConnected"
    reasons = [r for (obj, r, _) in rig.events() if obj == "s1"]
    assert sorted(reasons) == ["SandboxConnected", "SandboxStarted"]

    await rig.event(
        "s1", "turn_ended", turn="s1-1", outcome="completed", summary="hi", usage={"input_tokens": 3}
    )
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Idle" and "currentTurn" not in st and st["lastTurn"] == "s1-1"
    assert st["counters"]["inputTokens"] == 3
    turn = rig.status("turns", "s1-1")
    assert turn["phase"] == "Completed" and turn["exitStatus"] == 0 and turn["summary"] == "hi"
    assert rig.condition("turns", "s1-1")["status"] == "True"
    # lastTransitionTime moved only when Ready flipped: connected (True) then Running and Idle (still True).
    assert rig.condition("sessions", "s1")["lastTransitionTime"] == ready["lastTransitionTime"]


async def test_a_missing_environment_waits_then_starts(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    await rig.session("s1", prompt="hello")
    await rig.reconcile("s1")
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Pending" and st["reason"] == "EnvironmentNotFound"
    assert rig.condition("sessions", "s1")["reason"] == "EnvironmentNotFound"
    assert [r for (_, r, _) in rig.events()] == ["EnvironmentNotFound"]  # once, not every tick
    rig.env()
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Starting"


async def test_a_session_waits_for_a_slot_once_per_wait(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, max_sandboxes=1)
    rig.env()
    await rig.running("s1")
    await rig.session("s2", prompt="hi")
    for _ in range(3):
        await rig.reconcile("s2")
    st = rig.status("sessions", "s2")
    assert st["phase"] == "Pending" and st["reason"] == "NoSandboxSlot"
    assert st["message"] == "waiting for a sandbox slot (1 of 1 in use)"
    assert [r for (o, r, _) in rig.events() if o == "s2"] == ["WaitingForSlot"]
    # s1 stops: its slot frees, s2 starts.
    await rig.kube.patch("sessions", "s1", {"spec": {"stopped": True}})
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Stopped"
    await rig.reconcile("s2")
    assert rig.status("sessions", "s2")["phase"] == "Starting"


async def test_stopping_interrupts_the_turn_and_releases_the_sandbox(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    run = rig.run_id("s1")
    assert run in rig.ctx.run_keys and rig.ctx.gateway._runs.get(run) is not None
    await rig.kube.patch("sessions", "s1", {"spec": {"stopped": True}})
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Stopped" and st["sandbox"] == {"connected": False}
    assert rig.condition("sessions", "s1")["reason"] == "Stopped"
    t = rig.status("turns", turn)
    assert t["phase"] == "Interrupted" and t["exitStatus"] == 130 and t["reason"] == "the session was stopped"
    assert rig.kube.peek("pods", "s1-r1") is None and rig.kube.peek("secrets", "s1-r1-key") is None
    assert rig.kube.peek("persistentvolumeclaims", "s1-workspace") is not None  # the workspace stays
    # The run's per-run state is gone: its key, its queued commands, and the driver can't say hello again.
    assert run not in rig.ctx.run_keys and rig.ctx.gateway._runs.get(run) is None
    assert await rig.c.router.key_for_run(run) is None


async def test_a_lost_pod_fails_the_turn_and_the_next_turn_starts_a_new_sandbox(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await rig.event("s1", "turn_started", turn=turn)
    await rig.kube.delete_core("pods", "s1-r1")
    await rig.reconcile("s1")  # the periodic check finds the pod gone
    t = rig.status("turns", turn)
    assert t["phase"] == "Failed" and t["reason"] == "sandbox pod s1-r1 was deleted"
    assert rig.condition("turns", turn)["reason"] == "Failed"
    assert ("s1", "SandboxLost", "sandbox pod s1-r1 was deleted") in rig.events()
    assert any(r == "TurnFailed" and "was deleted" in m for (_, r, m) in rig.events())
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Idle" and "pod" not in st["sandbox"]
    ready = rig.condition("sessions", "s1")
    assert ready["status"] == "False" and ready["reason"] == "SandboxReleased", ready
    assert ready["message"].endswith("; the next message starts a sandbox"), ready
    await rig.kube.create(
        "turns",
        {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Turn",
            "metadata": {"name": "s1-2", "labels": {"hangar.dev/session": "s1"}},
            "spec": {"session": "s1", "index": 2, "message": "again"},
        },
    )
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == "s1-r2"


async def test_a_turn_sent_to_a_sandbox_on_its_way_out_is_requeued(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")  # start_turn sent; the driver never said turn_started
    await rig.kube.delete_core("pods", "s1-r1")
    await rig.reconcile("s1")
    t = rig.status("turns", turn)
    assert t["phase"] == "Queued" and "run" not in t
    # …and it runs in the next sandbox.
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == "s1-r2"


async def test_a_released_runs_key_can_no_longer_say_hello(tmp_path: Path) -> None:
    import asyncio

    from hangar_driver import protocol as P

    rig = await make_rig(tmp_path, gateway_host="127.0.0.1", gateway_port=0)
    await rig.c.start()
    try:
        rig.env()
        await rig.session("s1", prompt="hi")
        await rig.reconcile("s1")
        key = rig.ctx.run_keys["s1-r1"]
        rejected: list[str] = []
        rig.ctx.gateway._on_rejected = lambda who, why: _note(rejected, why)

        async def hello() -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", rig.ctx.gateway_port)
            frame = P.sign(key, P.make_frame("s1-r1", P.D2G, P.HELLO, {"run": "s1-r1", "harness": "claude"}))
            writer.write(P.encode(frame))
            await writer.drain()
            try:
                return await asyncio.wait_for(reader.readline(), 10)
            finally:
                writer.close()

        assert P.decode(await hello())["type"] == P.WELCOME  # the live run is welcomed
        await rig.kube.patch("sessions", "s1", {"spec": {"stopped": True}})
        await rig.reconcile("s1")
        assert await hello() == b"" and "unknown run" in rejected[-1]
    finally:
        await rig.c.stop()


async def _note(into: list[str], why: str) -> None:
    into.append(why)
