"""The Turn controller on a FakeKube: starting, steering, interrupting and ending turns, each end one write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hangar.kube import ApiException
from tests.unit.operator_rig import Rig, make_rig


async def steer(rig: Rig, turn: str, sid: str, message: str, **extra: Any) -> None:
    obj = rig.get("turns", turn)
    steers = [*obj["spec"].get("steers", []), {"id": sid, "message": message, **extra}]
    await rig.kube.patch("turns", turn, {"spec": {"steers": steers}})


async def interrupt(rig: Rig, turn: str, iid: str, message: str | None = None) -> None:
    obj = rig.get("turns", turn)
    entry: dict[str, Any] = {"id": iid, **({"message": message} if message else {})}
    await rig.kube.patch("turns", turn, {"spec": {"interrupts": [*obj["spec"].get("interrupts", []), entry]}})


async def deliver(rig: Rig, turn: str) -> None:
    """What the raw Turn event handler does for a watch event of ``turn``."""
    obj = rig.get("turns", turn)
    if rig.c.steering.pending("default", obj):
        async with rig.ctx.lock("default", obj["spec"]["session"]):
            await rig.c.steering.reconcile("default", obj["spec"]["session"], turn)


def states(rig: Rig, turn: str, kind: str) -> dict[str, dict[str, Any]]:
    return {x["id"]: x for x in rig.status("turns", turn).get(kind, [])}


async def test_turn_outcomes_completed_failed_interrupted_needs_input(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    cases = [
        ({"outcome": "completed"}, "Completed", 0),
        ({"outcome": "failed", "error": "boom", "exit_status": 2}, "Failed", 2),
        ({"outcome": "interrupted"}, "Interrupted", 130),
        ({"outcome": "completed", "ask": True}, "NeedsInput", 0),
    ]
    for i, (payload, phase, code) in enumerate(cases):
        name = f"s{i}"
        turn = await rig.running(name)
        if payload.pop("ask", False):
            await rig.event(name, "handback", turn=turn, kind="ask", question="Which branch?")
        await rig.event(name, "turn_ended", turn=turn, **payload)
        t = rig.status("turns", turn)
        assert (t["phase"], t["exitStatus"]) == (phase, code), t
        assert rig.condition("turns", turn)["status"] == ("True" if phase == "Completed" else "False")
        assert rig.status("sessions", name)["phase"] == "Idle"
        # An ended turn stays as it ended: a repeated end changes nothing.
        await rig.event(name, "turn_ended", turn=turn, outcome="failed")
        assert rig.status("turns", turn)["phase"] == phase
    assert any(r == "TurnFailed" and "boom" in m for (o, r, m) in rig.events() if o == "s1")


async def test_a_policy_a_one_shot_harness_cannot_honour_fails_the_turn(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.session("s1", prompt="hi", harness="pi", approvals="ask")
    await rig.reconcile("s1")
    await rig.connect("s1")
    t = rig.status("turns", "s1-1")
    assert t["phase"] == "Failed" and "needs a live turn" in t["reason"] and t["policy"] == "ask"


async def test_a_steer_is_sent_then_delivered(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await steer(rig, turn, "a", "also count them")
    await deliver(rig, turn)
    assert states(rig, turn, "steers")["a"]["status"] == "sending"
    assert f"steer-{turn}-a" in rig.commands("s1-r1")
    await deliver(rig, turn)  # a repeated event asks for nothing new
    assert rig.commands("s1-r1").count(f"steer-{turn}-a") == 1
    await rig.event("s1", "steer", turn=turn, steer_id="a", status="delivered")
    assert states(rig, turn, "steers")["a"]["status"] == "delivered"


async def test_a_steer_whose_first_handling_raised_is_still_delivered(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await steer(rig, turn, "a", "also count them")
    rig.kube.fail_next("patch_status", "turns", 500, name=turn)
    obj = rig.get("turns", turn)

    async def handle() -> None:  # what the raw event handler hands to the retry queue
        async with rig.ctx.lock("default", "s1"):
            await rig.c.steering.reconcile("default", "s1", turn)

    assert rig.c.steering.pending("default", obj)
    await rig.c.retry.run(f"turns/default/{turn}", handle)
    assert rig.c.retry.failures == 1 and "a" not in states(rig, turn, "steers")
    for _ in range(50):  # no later write to the Turn: the retry alone delivers it
        await asyncio.sleep(0.02)
        if "a" in states(rig, turn, "steers"):
            break
    assert states(rig, turn, "steers")["a"]["status"] == "sending"
    assert f"steer-{turn}-a" in rig.commands("s1-r1")


async def test_withdrawals_before_and_after_sending(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await steer(rig, turn, "a", "one")
    await deliver(rig, turn)
    await steer(rig, turn, "b", "two", withdrawn=True)
    await deliver(rig, turn)
    assert states(rig, turn, "steers")["b"]["status"] == "cancelled"
    steers = rig.get("turns", turn)["spec"]["steers"]
    steers[0]["withdrawn"] = True
    await rig.kube.patch("turns", turn, {"spec": {"steers": steers}})
    await deliver(rig, turn)
    assert states(rig, turn, "steers")["a"]["withdraw"] == "requested"
    assert f"withdraw-{turn}-a" in rig.commands("s1-r1")
    await rig.event("s1", "command_result", turn=turn, op="withdraw", ok=True, steer_id="a", withdrawn=True)
    a = states(rig, turn, "steers")["a"]
    assert a["status"] == "cancelled" and a["withdraw"] == "withdrawn"


async def test_a_turns_end_writes_its_steers_and_interrupts_final_in_the_same_write(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await interrupt(rig, turn, "i1", "use tabs instead")
    await deliver(rig, turn)
    assert states(rig, turn, "interrupts")["i1"]["status"] == "sent"
    await steer(rig, turn, "late", "after the end")  # written, not yet seen by the operator
    before = len(rig.kube.writes)
    await rig.event("s1", "turn_ended", turn=turn, outcome="interrupted")  # a one-shot CLI stops
    ended = [w for w in rig.kube.writes[before:] if w.resource == "turns" and w.name == turn]
    ends = [w for w in ended if w.verb == "patch_status" and "phase" in w.body]
    assert len(ends) == 1
    body = ends[0].body
    assert body["phase"] == "Interrupted"
    (i1,) = body["interrupts"]
    assert i1["status"] == "confirmed" and i1["messageStatus"] == "queued"
    (late,) = body["steers"]
    assert late["status"] == "queued" and {late["nextTurn"], i1["nextTurn"]} == {"s1-2", "s1-3"}
    assert rig.get("turns", i1["nextTurn"])["spec"]["message"] == "use tabs instead"
    assert rig.get("turns", late["nextTurn"])["spec"]["message"] == "after the end"


async def test_an_unconfirmed_interrupt_kills_the_run(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await interrupt(rig, turn, "i1", "stop now")
    await deliver(rig, turn)
    for _ in range(100):  # the grace is 0.2 s here
        await asyncio.sleep(0.02)
        if rig.status("sessions", "s1")["sandbox"].get("pod") == "s1-r2":
            break
    t = rig.status("turns", turn)
    assert t["phase"] == "Interrupted" and "hangar killed the run" in t["reason"]
    (i1,) = t["interrupts"]
    assert i1["status"] == "killed" and i1["messageStatus"] == "queued"
    assert rig.kube.peek("pods", "s1-r1") is None
    assert any(r == "InterruptKilled" for (_, r, _) in rig.events())
    # The message starts the next turn, in a new sandbox.
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == "s1-r2"


async def test_a_lost_conversation_restarts_the_turn_once(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    err = "No conversation found with session ID abc"
    await rig.event("s1", "turn_ended", turn=turn, outcome="failed", error=err)
    t = rig.status("turns", turn)
    assert t["phase"] == "Running" and t["restarted"]  # requeued, and started again at once
    await rig.event("s1", "turn_ended", turn=turn, outcome="failed", error=err)
    assert rig.status("turns", turn)["phase"] == "Failed"


async def test_a_steer_sent_whose_sending_write_failed_is_withdrawn_through_the_driver(
    tmp_path: Path,
) -> None:
    """The steer goes to the driver before "sending" is written: if that write fails and a withdrawal comes
    before the retry, the steer is on its way all the same, so the driver arbitrates (never "cancelled"
    here while the agent may have it)."""
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    await steer(rig, turn, "a", "also count them")
    rig.kube.fail_next("patch_status", "turns", 500, name=turn)
    with pytest.raises(ApiException):
        await deliver(rig, turn)
    assert f"steer-{turn}-a" in rig.commands("s1-r1") and "a" not in states(rig, turn, "steers")
    steers = rig.get("turns", turn)["spec"]["steers"]
    steers[0]["withdrawn"] = True
    await rig.kube.patch("turns", turn, {"spec": {"steers": steers}})
    await deliver(rig, turn)
    a = states(rig, turn, "steers")["a"]
    assert a["status"] == "sending" and a["withdraw"] == "requested"
    assert f"withdraw-{turn}-a" in rig.commands("s1-r1")
    await rig.event("s1", "command_result", turn=turn, op="withdraw", ok=True, steer_id="a", withdrawn=False)
    await rig.event("s1", "steer", turn=turn, steer_id="a", status="delivered")
    a = states(rig, turn, "steers")["a"]
    assert a["status"] == "delivered" and a["withdraw"] == "too_late"


async def test_an_event_already_stored_is_not_applied_again_before_or_after_a_reconnect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router knows the last event it stored for a connected run (no database read per event); after a
    disconnect it asks the database again."""
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    run = rig.run_id("s1")
    applied: list[int] = []
    apply = rig.c.router._apply

    async def counted(r: Any, name: str, p: dict[str, Any], t: str | None, received: Any = None) -> None:
        applied.append(len(applied))
        await apply(r, name, p, t, received)

    monkeypatch.setattr(rig.c.router, "_apply", counted)
    await rig.c.router.on_event(run, 1, "text", {"turn": turn, "text": "hi"})
    await rig.c.router.on_event(run, 1, "text", {"turn": turn, "text": "hi"})
    assert len(applied) == 1 and await rig.ctx.db.driver_acked(run) == 1
    await rig.c.router.on_disconnect(run)
    assert run not in rig.c.router.stored
    await rig.c.router.on_event(run, 1, "text", {"turn": turn, "text": "hi"})
    assert len(applied) == 1
    await rig.c.router.on_event(run, 2, "text", {"turn": turn, "text": "more"})
    assert len(applied) == 2 and rig.c.router.stored[run] == 2
