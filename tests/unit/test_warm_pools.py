"""Warm sandbox pools (pools.py): filling, claiming exactly once, key rotation, slots, age and spec changes.

On the operator rig (FakeKube, an unstarted gateway): a member's driver is "connected" through the pool's
``is_connected`` seam and "ready" by its ``driver_ready`` event fed as the gateway would.
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import pytest

from hangar.kube import ApiException
from hangar.models import labels as L
from hangar_driver import protocol as P
from hangar_operator.pool_objects import MEMBER, Member, parse_pool_run, retire_key, take_key
from hangar_operator.pools import REFILL_AFTER
from hangar_operator.runs import make_run

from .operator_rig import Rig, make_rig

POOL = {"warmPool": {"size": 2, "maxAgeSeconds": 600, "harness": "claude"}}


async def pool_rig(tmp_path: Path, size: int = 2, **settings: Any) -> Rig:
    rig = await make_rig(tmp_path, **settings)
    rig.env(warmPool={"size": size, "maxAgeSeconds": 600})
    connected: set[str] = set()
    rig.c.pools.is_connected = connected.__contains__
    rig.c.pools.wakeups = None  # the tests look at the pool themselves, step by step

    async def wait_connected(run: str, timeout: float) -> bool:
        return run in connected

    rig.c.pools.wait_connected = wait_connected
    rig.connected = connected  # type: ignore[attr-defined]
    return rig


def members(rig: Rig) -> list[str]:
    return sorted(
        n
        for n in rig.kube.names("pods")
        if (rig.get("pods", n)["metadata"].get("labels") or {}).get(L.COMPONENT) == MEMBER
    )


async def make_ready(rig: Rig, name: str) -> str:
    """The member's pod runs and its driver said driver_ready over a verified connection."""
    rig.kube.set_status("pods", name, {"phase": "Running"})
    run = Member("default", "dev", name).run_id
    rig.connected.add(run)  # type: ignore[attr-defined]
    await rig.c.router.on_connect(run, {"driver_version": "test"})
    await rig.c.router.on_event(run, 1, "driver_ready", {"error": None, "harness": "claude"})
    return run


def pool_status(rig: Rig) -> dict[str, Any]:
    return dict(rig.status("environments", "dev")["pool"])


async def test_a_pool_fills_to_its_size_and_each_member_holds_a_slot(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, max_sandboxes=5)
    await rig.c.pools.reconcile("default", "dev")
    names = members(rig)
    assert len(names) == 2 and all(n.startswith("dev-pool-w") for n in names)
    env_uid = rig.get("environments", "dev")["metadata"]["uid"]
    for n in names:
        pod = rig.get("pods", n)
        assert pod["metadata"]["ownerReferences"][0]["uid"] == env_uid
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["HANGAR_POOL"] == "1" and "HANGAR_SESSION" not in env
        assert env["HANGAR_RUN_ID"] == f"pool.default.{n}" and parse_pool_run(env["HANGAR_RUN_ID"])
        assert rig.get("persistentvolumeclaims", f"{n}-workspace")
        assert rig.get("secrets", f"{n}-key")
    assert await rig.c.sandboxes.in_use("default", "x") == 2
    assert pool_status(rig) == {"size": 2, "ready": 0, "starting": 2, "summary": "0/2"}
    await make_ready(rig, names[0])
    await rig.c.pools.reconcile("default", "dev")
    assert pool_status(rig)["summary"] == "1/2" and members(rig) == names  # nothing more made


async def test_a_new_session_takes_a_ready_member_with_a_rotated_key_and_the_pool_refills(
    tmp_path: Path,
) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    pool_run = await make_ready(rig, name)
    pool_key = await rig.c.sandboxes.key_for_run(pool_run)
    assert pool_key is not None
    before = await rig.c.sandboxes.in_use("default", "s1")
    await rig.session("s1", prompt="hello")
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Starting"
    assert st["sandbox"]["pod"] == name and st["sandbox"]["run"] == "s1-r1"
    assert st["workspace"] == f"{name}-workspace" and st["counters"]["sandboxes"] == 1
    # The pod and its volume are the session's now: relabelled, re-owned, the claim recorded.
    s_uid = rig.get("sessions", "s1")["metadata"]["uid"]
    pod = rig.get("pods", name)
    labels = pod["metadata"]["labels"]
    assert labels[L.COMPONENT] == "sandbox" and labels[L.SESSION] == "s1" and labels[L.RUN] == "s1-r1"
    assert L.POOL not in labels and pod["metadata"]["annotations"][L.CLAIMED_BY] == s_uid
    assert [r["uid"] for r in pod["metadata"]["ownerReferences"]] == [s_uid]
    pvc = rig.get("persistentvolumeclaims", f"{name}-workspace")
    assert [r["uid"] for r in pvc["metadata"]["ownerReferences"]] == [s_uid]
    # The driver is told to adopt the session's run; both ends derive the same key from the pool's.
    assert rig.commands(pool_run) == ["adopt-s1-r1"]
    adopt = rig.ctx.gateway._runs[pool_run].pending["adopt-s1-r1"]
    derived = P.derive_run_key(pool_key, "s1-r1", adopt["nonce"]).encode()
    assert derived != pool_key and await rig.c.sandboxes.key_for_run("s1-r1") == derived
    secret = rig.get("secrets", "s1-r1-key")
    assert base64.b64decode(secret["data"]["run-key"]) == derived
    # The pool's key is dead: its Secret is gone and a hello with it is refused.
    assert rig.kube.peek("secrets", f"{name}-key") is None
    assert await rig.c.sandboxes.key_for_run(pool_run) is None
    # A claim turns the member's slot into the session's: the count does not move.
    assert await rig.c.sandboxes.in_use("default", "x") == before
    # The session's run says hello: it is connected, and the member's run is forgotten.
    await rig.connect("s1")
    assert rig.status("sessions", "s1")["sandbox"]["connected"] is True
    assert pool_run not in rig.ctx.gateway._runs
    # The pool refills.
    await rig.c.pools.reconcile("default", "dev")
    assert len(members(rig)) == 1 and members(rig) != [name]


async def test_concurrent_claims_never_share_a_member(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    for s in ("s1", "s2", "s3"):
        await rig.session(s, prompt="hi")
    await asyncio.gather(*(rig.reconcile(s) for s in ("s1", "s2", "s3")))
    pods = {s: rig.status("sessions", s)["sandbox"]["pod"] for s in ("s1", "s2", "s3")}
    assert list(pods.values()).count(name) == 1  # one took it; the others started fresh sandboxes
    assert all(p == f"{s}-r1" for s, p in pods.items() if p != name)
    [taker] = [s for s, p in pods.items() if p == name]
    assert rig.get("pods", name)["metadata"]["labels"][L.SESSION] == taker


async def test_a_claim_is_a_test_and_set_on_the_members_key_secret(tmp_path: Path) -> None:
    """Two claimers (two operators, say) and a retirement, each with the same patch: the apiserver lets one
    through; the Secret says whose the member is."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    a = await rig.session("a")
    b = await rig.session("b")
    key = f"{name}-key"
    await rig.kube.patch_core("secrets", key, take_key(a, make_run("default", "default", "a", 1), 1.0))
    for other in (take_key(b, make_run("default", "default", "b", 1), 2.0), retire_key()):
        with pytest.raises(ApiException) as lost:
            await rig.kube.patch_core("secrets", key, other)
        assert lost.value.status == 422
    notes = rig.get("secrets", key)["metadata"]["annotations"]
    assert notes[L.CLAIMED_BY] == a["metadata"]["uid"] and notes[L.RUN] == "a-r1"
    # For a process that reads the member's key from its Secret (after a start), the pool's key is dead from
    # the claim on, before the pod is relabelled.
    rig.c.pools.keys.clear()
    assert await rig.c.pools.key_for_run(Member("default", "dev", name).run_id) is None


async def test_a_member_claimed_elsewhere_is_not_taken_its_adopt_undone_and_the_session_starts_fresh(
    tmp_path: Path,
) -> None:
    """The compare-and-set goes out beside the adopt: when it loses, the adopt is undone (fail closed). The
    session's run forgets the derived key and its connection, the member (whose driver took the adopt, so no
    other claimer can use it) is removed, and the session starts a fresh sandbox with a key of its own."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    pool_run = await make_ready(rig, name)
    pool_key = await rig.c.sandboxes.key_for_run(pool_run)
    assert pool_key is not None
    # Another claimer takes it first (this process still thinks it is ready).
    other = await rig.session("other")
    await rig.kube.patch_core(
        "secrets", f"{name}-key", take_key(other, make_run("default", "default", "other", 1), time.time())
    )
    await rig.session("s1", prompt="hi")
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["sandbox"]["pod"] == "s1-r1" and not st.get("workspace")  # fresh, not the member's volume
    assert rig.kube.peek("pods", name) is None  # removed: its driver took an adopt
    assert pool_run not in rig.ctx.gateway._runs and rig.commands(pool_run) == []
    assert "s1-r1" not in rig.c.pools.adopting
    # The fresh run's key is its own Secret's, not one derived from the member's.
    fresh = base64.b64decode(rig.get("secrets", "s1-r1-key")["data"]["run-key"])
    assert await rig.c.sandboxes.key_for_run("s1-r1") == fresh
    assert rig.status("sessions", "other").get("sandbox", {}).get("pod") is None  # never had it recorded
    # The adopted driver's hello, verified before its connection was dropped, reaches on_connect late: it
    # does not make the fresh sandbox connected; the fresh driver's own hello does.
    await rig.c.router.on_connect("s1-r1", {"driver_version": "test", "adopted_from": pool_run})
    assert rig.status("sessions", "s1")["sandbox"]["connected"] is False
    await rig.connect("s1")
    assert rig.status("sessions", "s1")["sandbox"]["connected"] is True


async def test_the_claims_compare_and_set_and_the_adopt_go_side_by_side(tmp_path: Path) -> None:
    """One round trip, not two: the compare-and-set on the member's pod is still on its way when the adopt
    goes out (it waits here until the adopt is queued; one after the other, it would wait forever)."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    pool_run = await make_ready(rig, name)
    patch_core = rig.kube.patch_core
    saw_adopt: list[bool] = []

    async def cas_waits_for_the_adopt(kind: str, pod: str, body: Any) -> dict[str, Any]:
        if kind == "secrets" and isinstance(body, list):
            for _ in range(200):
                if rig.commands(pool_run):
                    break
                await asyncio.sleep(0)
            saw_adopt.append(rig.commands(pool_run) == ["adopt-s1-r1"])
        return await patch_core(kind, pod, body)

    rig.kube.patch_core = cas_waits_for_the_adopt  # type: ignore[method-assign]
    await rig.session("s1")
    await rig.reconcile("s1")
    assert saw_adopt == [True]
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name


async def test_a_compare_and_set_that_fails_undoes_the_adopt_and_the_reconcile_fails(tmp_path: Path) -> None:
    """Not a lost race but an apiserver error: the adopt that went beside it is undone all the same (the member
    removed, the derived key forgotten), and the reconcile raises to be tried again (no session's sandbox)."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    pool_run = await make_ready(rig, name)
    patch_core = rig.kube.patch_core

    async def cas_fails(kind: str, pod: str, body: Any) -> dict[str, Any]:
        if kind == "secrets" and isinstance(body, list):
            raise ApiException(status=500, reason="etcd is away")
        return await patch_core(kind, pod, body)

    rig.kube.patch_core = cas_fails  # type: ignore[method-assign]
    await rig.session("s1")
    with pytest.raises(ApiException):
        await rig.reconcile("s1")
    assert rig.kube.peek("pods", name) is None
    assert "s1-r1" not in rig.ctx.run_keys and "s1-r1" not in rig.c.pools.adopting
    assert pool_run not in rig.ctx.gateway._runs
    assert not (rig.status("sessions", "s1").get("sandbox") or {}).get("pod")


async def test_only_fresh_sessions_of_the_pools_harness_take_a_member(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    await rig.session("cx", prompt="hi", harness="codex")
    await rig.reconcile("cx")
    assert rig.status("sessions", "cx")["sandbox"]["pod"] == "cx-r1"
    assert members(rig) == [name]


async def test_waiting_sessions_get_the_pools_slots_back(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=2, max_sandboxes=2)
    await rig.c.pools.reconcile("default", "dev")
    assert len(members(rig)) == 2
    await rig.session("cx", prompt="hi", harness="codex")
    await rig.reconcile("cx")
    assert rig.status("sessions", "cx")["reason"] == "NoSandboxSlot"
    await rig.ctx.resync_cache()  # the watch would have shown the waiting session
    await rig.c.pools.reconcile("default", "dev")
    assert len(members(rig)) == 1 and len(rig.ctx.pool_members) == 1  # one slot given back: one waits
    await rig.reconcile("cx")
    assert rig.status("sessions", "cx")["sandbox"]["pod"] == "cx-r1"
    # With the session holding a slot, the pool does not refill past the limit.
    await rig.ctx.resync_cache()
    await rig.c.pools.reconcile("default", "dev")
    assert len(members(rig)) == 1 and await rig.c.sandboxes.in_use("default", "x") == 2


async def test_old_members_and_members_of_an_older_spec_are_replaced(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [first] = members(rig)
    await make_ready(rig, first)
    real = rig.c.pools.clock
    rig.c.pools.clock = lambda: real() + 601
    await rig.c.pools.reconcile("default", "dev")
    [second] = members(rig)
    assert second != first and rig.kube.peek("pods", first) is None
    assert rig.kube.peek("secrets", f"{first}-key") is None
    assert rig.kube.peek("persistentvolumeclaims", f"{first}-workspace") is None
    rig.c.pools.clock = real
    await rig.kube.patch("environments", "dev", {"spec": {"image": "img2"}})
    await rig.c.pools.reconcile("default", "dev")
    [third] = members(rig)
    assert third != second and rig.get("pods", third)["spec"]["containers"][0]["image"] == "img2"
    # Resizing keeps what runs.
    await rig.kube.patch("environments", "dev", {"spec": {"warmPool": {"size": 2}}})
    await rig.c.pools.reconcile("default", "dev")
    assert third in members(rig) and len(members(rig)) == 2


async def test_a_member_whose_driver_is_not_ready_is_replaced(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    run = Member("default", "dev", name).run_id
    await rig.c.router.on_event(run, 1, "driver_ready", {"error": "sandbox setup failed: boom"})
    assert rig.kube.peek("pods", name) is None
    await rig.c.pools.reconcile("default", "dev")
    assert len(members(rig)) == 1 and members(rig) != [name]


async def test_removing_the_pool_removes_its_members(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=2)
    await rig.c.pools.reconcile("default", "dev")
    await rig.kube.patch("environments", "dev", {"spec": {"warmPool": None}})
    await rig.c.pools.reconcile("default", "dev")
    assert members(rig) == [] and rig.ctx.pool_members == {}
    assert "pool" not in rig.status("environments", "dev")


async def test_an_environment_with_a_repository_keeps_no_pool(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env(warmPool={"size": 2}, repository={"url": "https://example.com/r.git"})
    await rig.c.pools.reconcile("default", "dev")
    assert members(rig) == []


def test_the_derived_key_depends_on_the_pool_key_run_and_nonce() -> None:
    k = P.new_run_key()
    d = P.derive_run_key(k, "s-r1", "n" * 16)
    assert len(d) == len(k) and d == P.derive_run_key(k.encode(), "s-r1", "n" * 16)
    assert d != P.derive_run_key(k, "s-r2", "n" * 16) != P.derive_run_key(k, "s-r1", "m" * 16)
    assert d != P.derive_run_key(P.new_run_key(), "s-r1", "n" * 16)


async def test_a_claim_goes_through_when_only_the_pods_status_moved_since_it_was_ready(
    tmp_path: Path,
) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    rig.kube.set_status("pods", name, {"conditions": [{"type": "Ready", "status": "True"}]})  # the kubelet
    await rig.session("s1", prompt="hi")
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name


async def test_a_driver_back_as_the_sessions_run_during_the_claim_makes_it_idle_in_one_write(
    tmp_path: Path,
) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    rig.connected.add("s1-r1")  # type: ignore[attr-defined]  # the adopted driver's hello came in the wait
    await rig.session("s1")
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Idle" and st["sandbox"]["connected"] is True and st["sandbox"]["pod"] == name
    assert ("s1", "SandboxConnected") in [(o, r) for (o, r, _) in rig.events()]
    # its on_connect, after the lock (the hello of the member it names): nothing left to change
    hello = {"driver_version": "test", "adopted_from": Member("default", "dev", name).run_id}
    await rig.c.router.on_connect("s1-r1", hello)
    assert rig.status("sessions", "s1")["phase"] == "Idle"


async def test_a_claimed_sandbox_gets_the_sessions_policy_and_taint_as_a_fresh_one_does(
    tmp_path: Path,
) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    pool_run = await make_ready(rig, name)
    await rig.session("s1", prompt="hello", approvals="ask", tainted=True)
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name
    assert rig.commands(pool_run) == ["adopt-s1-r1"]
    # The adopted driver's hello in place names the member it was: the one the status names.
    await rig.c.router.on_connect("s1-r1", {"driver_version": "test", "adopted_from": pool_run})
    assert rig.status("sessions", "s1")["sandbox"]["connected"] is True
    # The turn goes to the session's run (the pool's is forgotten), with the policy and the taint.
    assert rig.commands(pool_run) == [] and rig.commands("s1-r1") == ["start-s1-1"]
    start = rig.ctx.gateway._runs["s1-r1"].pending["start-s1-1"]
    assert start["approvals"] == "ask" and start["tainted"] is True


async def test_a_waiting_session_wakes_the_pools_which_free_a_slot_and_it_starts(tmp_path: Path) -> None:
    """The wiring, with the operator's real wake-ups: the wait → the pool gives a member back → the freed slot
    wakes the waiting session."""
    rig = await make_rig(tmp_path, max_sandboxes=2)
    rig.env(warmPool={"size": 2, "maxAgeSeconds": 600})
    await rig.ctx.resync_cache()
    await rig.c.pools.reconcile("default", "dev")
    assert len(members(rig)) == 2
    await rig.session("cx", prompt="hi", harness="codex")
    await rig.ctx.resync_cache()
    await rig.reconcile("cx")
    for _ in range(100):
        await rig.ctx.resync_cache()
        if (rig.status("sessions", "cx").get("sandbox") or {}).get("pod") == "cx-r1":
            break
        await asyncio.sleep(0.05)
    assert rig.status("sessions", "cx")["sandbox"]["pod"] == "cx-r1"
    assert len(members(rig)) == 1


async def test_after_an_operator_restart_ready_members_are_kept_and_ready_again_on_reconnect(
    tmp_path: Path,
) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    run = await make_ready(rig, name)
    pools = rig.c.pools
    pools.keys.clear(), pools.ready.clear(), pools.seen.clear()  # what a restart forgets
    rig.ctx.pool_members.clear()
    real = pools.clock
    pools.clock = lambda: real() + rig.ctx.settings.connect_timeout + 5  # its first connect is long past
    pools.started = pools.clock()  # the new process's start
    await pools.reconcile("default", "dev")
    assert members(rig) == [name] and len(rig.ctx.pool_members) == 1  # counted again, not retired
    key = await rig.c.sandboxes.key_for_run(run)  # read back from its Secret for the driver's hello
    assert key is not None
    await rig.c.router.on_connect(run, {"driver_version": "test"})
    await rig.session("s1")
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name


async def test_a_member_recorded_ready_whose_driver_never_comes_back_is_retired_after_a_connect_timeout(
    tmp_path: Path,
) -> None:
    """A process that sent an adopt and stopped before the compare-and-set leaves a member still labelled the
    pool's whose driver says hello only as a run nobody has: kept a connect timeout from the new process's
    start (or a ready driver's disconnect), then retired and replaced, not held until maxAgeSeconds."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    run = await make_ready(rig, name)
    pools = rig.c.pools
    pools.keys.clear(), pools.ready.clear(), pools.seen.clear()  # a restart
    rig.ctx.pool_members.clear()
    now = [pools.clock()]
    pools.clock = lambda: now[0]
    pools.started = now[0]
    await pools.reconcile("default", "dev")
    assert members(rig) == [name]  # within the window: its driver may yet come back
    now[0] += rig.ctx.settings.connect_timeout + 1
    await pools.reconcile("default", "dev")
    assert len(members(rig)) == 1 and members(rig) != [name]  # retired, and a new one made
    # The same from a ready driver's disconnect in this process.
    [second] = members(rig)
    second_run = await make_ready(rig, second)
    pools.member_disconnected(second_run)
    await pools.reconcile("default", "dev")
    assert members(rig) == [second]
    now[0] += rig.ctx.settings.connect_timeout + 1
    await pools.reconcile("default", "dev")
    assert members(rig) != [second]
    assert run not in pools.down and second_run not in pools.down  # forgotten with their members


async def test_the_refill_is_woken_a_moment_after_the_claim_is_written_not_beside_it(tmp_path: Path) -> None:
    """A claimed member's refill (a Secret, a volume, a pod, a driver's start) would compete with the claim's
    own writes for the apiserver and the CPU while a person waits: it is woken after the claim's status write,
    for ``REFILL_AFTER`` later, so it does not meet that write on its way to its watchers either."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    order: list[str] = []
    began = time.time()

    class Wakeups:
        def at(self, key: str, when: float, fn: Any) -> None:
            written = (rig.status("sessions", "s1").get("sandbox") or {}).get("pod") == name
            order.append(f"{key} after the claim's write" if written else f"{key} before it")
            assert when >= began + REFILL_AFTER, f"woken {when - began:.3f}s after the claim began"

    rig.c.pools.wakeups = Wakeups()  # type: ignore[assignment]
    await rig.session("s1", prompt="hello")
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name
    assert order == ["pools/default/dev after the claim's write"]


async def test_the_claims_status_write_goes_alone_its_secret_and_volume_after_it(tmp_path: Path) -> None:
    """Sent side by side, the key Secret's create and the volume's patch shared the apiserver with the status
    write a person waits on: they are sent once it is back (finish_claim mends a stop in between)."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    order: list[str] = []
    patch_status, create_core, patch_core = rig.kube.patch_status, rig.kube.create_core, rig.kube.patch_core

    async def status(plural: str, obj_name: str, body: dict[str, Any], **kw: Any) -> Any:
        if plural == "sessions" and (body.get("sandbox") or {}).get("pod") == name:
            order.append("status sent")
            await asyncio.sleep(0.01)  # a slow write: anything sent beside it would be seen now
            out = await patch_status(plural, obj_name, body, **kw)
            order.append("status back")
            return out
        return await patch_status(plural, obj_name, body, **kw)

    async def create(kind: str, body: dict[str, Any]) -> Any:
        if kind == "secrets" and body["metadata"]["name"] == "s1-r1-key":
            order.append("key secret")
        return await create_core(kind, body)

    async def patch(kind: str, obj_name: str, body: dict[str, Any]) -> Any:
        if kind == "persistentvolumeclaims":
            order.append("volume")
        return await patch_core(kind, obj_name, body)

    rig.kube.patch_status = status  # type: ignore[method-assign]
    rig.kube.create_core = create  # type: ignore[method-assign]
    rig.kube.patch_core = patch  # type: ignore[method-assign]
    await rig.session("s1")
    await rig.reconcile("s1")
    assert order[:2] == ["status sent", "status back"]
    assert sorted(order[2:]) == ["key secret", "volume"]
    assert rig.get("secrets", "s1-r1-key")
