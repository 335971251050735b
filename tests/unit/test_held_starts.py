"""A new run's ``Starting`` status write, held until its driver connects (held_starts.py, issue 15's cold path):
folded into the ``connected`` write when the hello comes first, written on its own when the hold runs out, and
written first for anyone who takes the session's lock; the slot is counted as taken meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from hangar.testing.fake_apiserver import Write
from hangar_operator.held_starts import combine

from .governance_rig import until
from .operator_rig import Rig, make_rig

LONG = 30.0  # a hold no test waits out


async def held_rig(tmp_path: Path, hold: float = LONG, **settings: Any) -> Rig:
    rig = await make_rig(tmp_path, start_hold=hold, **settings)
    await rig.ctx.resync_cache()
    rig.env()
    return rig


def session_writes(rig: Rig, name: str, since: int = 0) -> list[Write]:
    return [w for w in rig.kube.writes[since:] if w.resource == "sessions" and w.verb == "patch_status"]


async def test_a_driver_that_connects_within_the_hold_makes_the_start_one_status_write(
    tmp_path: Path,
) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    start = len(rig.kube.writes)
    await rig.reconcile("s")
    # The objects are made; the status is not written yet, and the slot stays taken.
    assert rig.kube.peek("pods", "s-r1") is not None
    assert session_writes(rig, "s", start) == []
    assert "sandbox" not in rig.status("sessions", "s")
    assert await rig.c.sandboxes.in_use("default", "other") == 1
    await rig.connect("s")
    [write] = session_writes(rig, "s", start)
    st = rig.status("sessions", "s")
    assert st["phase"] == "Idle" and st["message"] == "sandbox connected", st
    assert st["sandbox"]["pod"] == st["sandbox"]["run"] == "s-r1" and st["sandbox"]["connected"] is True
    assert st["sandbox"]["startedAt"] and st["counters"]["sandboxes"] == 1
    assert write.body["phase"] == "Idle" and write.body["sandbox"]["startedAt"]
    assert rig.condition("sessions", "s")["reason"] == "SandboxConnected"
    assert not rig.ctx.held.has(("default", "s")) and not rig.ctx.reserved
    assert await rig.c.sandboxes.in_use("default", "other") == 1  # now counted from its status
    assert ("s", "SandboxStarted", "started sandbox pod s-r1") in rig.events()
    assert any(r == "SandboxConnected" for (_, r, _m) in rig.events())


async def test_a_slow_driver_sees_the_starting_write_land_on_its_own(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path, hold=0.1)
    await rig.session("s")
    await rig.reconcile("s")
    await until(lambda: rig.status("sessions", "s").get("phase") == "Starting", "the Starting write")
    st = rig.status("sessions", "s")
    assert st["sandbox"]["pod"] == "s-r1" and st["sandbox"]["connected"] is False
    assert rig.condition("sessions", "s")["reason"] == "SandboxStarting"
    assert not rig.ctx.reserved and not rig.ctx.held.has(("default", "s"))
    await rig.connect("s")
    assert rig.status("sessions", "s")["phase"] == "Idle"


async def test_whoever_takes_the_sessions_lock_sees_the_starting_write(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    async with rig.ctx.lock("default", "s"):
        assert rig.status("sessions", "s")["phase"] == "Starting"
        assert (await rig.ctx.cached("default", "sessions", "s"))["status"]["sandbox"]["pod"] == "s-r1"
    assert not rig.ctx.reserved
    # A second look changes nothing: the same run, no second write.
    start = len(rig.kube.writes)
    await rig.reconcile("s")
    assert session_writes(rig, "s", start) == [] and rig.kube.peek("pods", "s-r2") is None


async def test_a_pod_lost_before_its_hello_releases_the_held_start(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    await rig.kube.delete_core("pods", "s-r1")
    await rig.c.sandboxes.pod_gone("default", "s", "s-r1", "s-r1", "was deleted")
    st = rig.status("sessions", "s")
    assert "pod" not in st["sandbox"] and st["counters"]["sandboxes"] == 1, st
    assert ("s", "SandboxLost", "sandbox pod s-r1 was deleted") in rig.events()
    assert not rig.ctx.reserved and not rig.ctx.held.has(("default", "s"))


async def test_the_slot_of_a_held_start_is_taken(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path, max_sandboxes=1)
    await rig.session("a")
    await rig.session("b")
    await rig.reconcile("a")
    await rig.reconcile("b")
    st = rig.status("sessions", "b")
    assert st["reason"] == "NoSandboxSlot" and st["message"] == "waiting for a sandbox slot (1 of 1 in use)"
    assert rig.kube.peek("pods", "b-r1") is None


async def test_a_run_made_again_is_written_at_once(tmp_path: Path) -> None:
    # Its key Secret was there (an earlier attempt, or an operator that stopped before writing): the gateway
    # reads that run's key through the status, so the status is not held.
    rig = await held_rig(tmp_path)
    await rig.session("s")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s-r1-key"}, "data": {}}
    rig.kube.seed("secrets", secret)
    await rig.reconcile("s")
    assert rig.status("sessions", "s")["phase"] == "Starting"
    assert not rig.ctx.held.has(("default", "s")) and not rig.ctx.reserved


async def test_a_connected_write_that_fails_keeps_the_start_held(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    run = rig.run_id("s")
    rig.kube.fail_next("patch_status", "sessions", 500)
    with pytest.raises(ApiException):
        await rig.c.sandboxes.connected("default", "s", "s-r1", {})
    assert rig.ctx.held.has(("default", "s")) and await rig.c.sandboxes.in_use("default", "other") == 1
    await rig.c.router.on_connect(run, {"driver_version": "test"})  # the hello again
    st = rig.status("sessions", "s")
    assert st["phase"] == "Idle" and st["sandbox"]["pod"] == "s-r1" and st["sandbox"]["connected"] is True
    assert not rig.ctx.reserved


async def test_an_operator_on_its_way_out_writes_what_it_held(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    await rig.c.stop()
    assert rig.status("sessions", "s")["phase"] == "Starting"
    assert not rig.ctx.held.has(("default", "s"))


async def test_a_session_deleted_while_held_is_let_go(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    await rig.kube.delete("sessions", "s")
    rig.ctx.cache.drop("sessions", "default", "s")  # its DELETED watch event
    async with rig.ctx.lock("default", "s"):
        pass
    assert not rig.ctx.held.has(("default", "s")) and not rig.ctx.reserved


@pytest.mark.parametrize(
    ("first", "then", "combined"),
    [
        (
            {"phase": "Starting", "sandbox": {"pod": "p", "connected": False}},
            {"sandbox": {"connected": True}},
            {"phase": "Starting", "sandbox": {"pod": "p", "connected": True}},
        ),
        ({"workspace": None, "phase": "Starting"}, {"phase": "Idle"}, {"workspace": None, "phase": "Idle"}),
        ({"message": "starting"}, {"message": None}, {"message": None}),
        (
            {"counters": {"sandboxes": 1}},
            {"counters": {"turns": 2}},
            {"counters": {"sandboxes": 1, "turns": 2}},
        ),
        ({"sandbox": None}, {"sandbox": {"pod": "p"}}, {"sandbox": {"pod": "p"}}),
        ({}, {}, {}),
    ],
)
def test_two_status_patches_combine_as_if_applied_one_after_the_other(
    first: dict[str, Any], then: dict[str, Any], combined: dict[str, Any]
) -> None:
    assert combine(first, then) == combined


async def test_a_hello_of_another_run_writes_the_held_start_as_it_is(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    assert await rig.c.sandboxes.connected("default", "s", "s-r9", {}) is False
    st = rig.status("sessions", "s")
    assert (
        st["phase"] == "Starting" and st["sandbox"]["run"] == "s-r1" and st["sandbox"]["connected"] is False
    )
    assert not rig.ctx.held.has(("default", "s")) and not rig.ctx.reserved


async def test_a_held_start_whose_write_fails_is_kept_for_the_next_lock(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    rig.kube.fail_next("patch_status", "sessions", 500)
    with pytest.raises(ApiException):
        async with rig.ctx.lock("default", "s"):
            raise AssertionError("the lock is not given while the held write failed")
    assert rig.ctx.held.has(("default", "s")) and await rig.c.sandboxes.in_use("default", "other") == 1
    assert not rig.ctx.lock("default", "s").lock.locked()
    async with rig.ctx.lock("default", "s"):
        assert rig.status("sessions", "s")["phase"] == "Starting"
    assert not rig.ctx.reserved


async def test_a_hold_that_runs_out_after_its_session_went_leaves_no_lock(tmp_path: Path) -> None:
    rig = await held_rig(tmp_path, hold=0.05)
    await rig.session("s")
    await rig.reconcile("s")
    await rig.kube.delete("sessions", "s")
    rig.ctx.cache.drop("sessions", "default", "s")  # its DELETED watch event
    rig.ctx.drop_lock("default", "s")  # its reconcile saw it go
    await until(lambda: not rig.ctx.held.has(("default", "s")), "the hold to run out")
    await until(lambda: ("default", "s") not in rig.ctx.locks, "the flush's lock to go")
    assert not rig.ctx.reserved


async def test_a_stop_does_not_wait_on_a_lock_held_by_stuck_work(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = await held_rig(tmp_path)
    await rig.session("s")
    await rig.reconcile("s")
    lock = rig.ctx.locks[("default", "s")]
    await lock.acquire()  # work on the session, stuck
    try:
        await rig.c.write_held(within=0.05)
    finally:
        lock.release()
    assert "its Starting write was not written on the way out" in caplog.text
    assert not rig.ctx.held.has(("default", "s"))
