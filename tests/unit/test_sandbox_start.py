"""The way to a session's first sandbox (issue 15): as few apiserver round trips as its safety allows.

On the operator rig with its cache primed, as in the operator: the session is read from the cache (the watch
event or the operator's own write that brought the reconcile), not from the apiserver; the policy rides on
the status write that starts or claims the sandbox; the key Secret is made beside the volume and the pod
(the pod waits for the volume only); a freed slot wakes the warm pools that could not fill.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from hangar.kube import owner_ref
from hangar.testing.fake_apiserver import Write

from .governance_rig import until
from .operator_rig import Rig, make_rig
from .test_warm_pools import make_ready, members, pool_rig


async def primed(tmp_path: Path, **settings: Any) -> Rig:
    rig = await make_rig(tmp_path, **settings)
    await rig.ctx.resync_cache()
    return rig


def session_writes(rig: Rig, name: str) -> list[Write]:
    return [w for w in rig.kube.writes if w.resource == "sessions" and w.name == name]


async def test_a_new_session_starts_its_sandbox_without_reading_itself_in_one_status_write(
    tmp_path: Path,
) -> None:
    rig = await primed(tmp_path)
    rig.env(approvals="ask")
    await rig.session("s")
    # Any read of the session from here fails: the cache has it from the create.
    rig.kube.fail_next("get", "sessions", 500, times=100)
    start = len(rig.kube.writes)
    await rig.reconcile("s")
    st = rig.status("sessions", "s")
    assert st["phase"] == "Starting" and st["policy"] == "ask" and st["sandbox"]["pod"] == "s-r1"
    writes = rig.kube.writes[start:]
    [write] = [w for w in writes if w.resource == "sessions"]
    assert (
        write.verb == "patch_status" and write.body["policy"] == "ask" and write.body["phase"] == "Starting"
    )
    # The pod comes after its volume; its key Secret is made beside them.
    order = [w.resource for w in writes if w.verb == "create_core" and w.resource != "events"]
    assert sorted(order) == ["persistentvolumeclaims", "pods", "secrets"]
    assert order.index("persistentvolumeclaims") < order.index("pods")
    # The driver's hello is checked against the cached session as well: connected, then the policy holds.
    await rig.connect("s")
    assert rig.status("sessions", "s")["phase"] == "Idle"


async def test_the_pod_does_not_wait_for_its_key_secret(tmp_path: Path) -> None:
    """The Secret's create is held until the pod's is done: the pod is made all the same (the runner and a
    kubelet wait for a Secret a volume names), and the start completes once the Secret is made."""
    rig = await primed(tmp_path)
    rig.env()
    await rig.session("s")
    create = rig.kube.create_core
    pod_made = asyncio.Event()

    async def held_create(kind: str, body: dict[str, Any]) -> bool:
        if kind == "secrets":
            await asyncio.wait_for(pod_made.wait(), 5)  # a TimeoutError here: the pod waited for the Secret
        made = await create(kind, body)
        if kind == "pods":
            pod_made.set()
        return made

    rig.kube.create_core = held_create  # type: ignore[method-assign]
    await rig.reconcile("s")
    order = [w.resource for w in rig.kube.writes if w.verb == "create_core" and w.resource != "events"]
    assert order[-3:] == ["persistentvolumeclaims", "pods", "secrets"]
    assert rig.status("sessions", "s")["sandbox"]["pod"] == "s-r1"
    assert rig.ctx.run_keys  # the key made now is the one the driver's hello is checked with


async def test_a_key_secret_that_could_not_be_made_leaves_no_pod_and_the_next_attempt_starts(
    tmp_path: Path,
) -> None:
    rig = await primed(tmp_path)
    rig.env()
    await rig.session("s")
    rig.kube.fail_next("create_core", "secrets", 500)
    with pytest.raises(ApiException):
        await rig.reconcile("s")
    assert rig.kube.peek("pods", "s-r1") is None  # made beside the Secret, deleted when the Secret failed
    assert not (rig.status("sessions", "s").get("sandbox") or {}).get("pod")
    await rig.reconcile("s")  # kopf's retry
    assert rig.status("sessions", "s")["sandbox"]["pod"] == "s-r1"
    assert rig.kube.peek("pods", "s-r1") is not None and rig.kube.peek("secrets", "s-r1-key") is not None


async def test_the_policy_is_written_with_the_wait_when_no_slot_is_free(tmp_path: Path) -> None:
    rig = await primed(tmp_path, max_sandboxes=1)
    rig.env(approvals="deny-risky")
    await rig.running("first")
    await rig.session("s")
    start = len(rig.kube.writes)
    await rig.reconcile("s")
    st = rig.status("sessions", "s")
    assert st["reason"] == "NoSandboxSlot" and st["policy"] == "deny-risky"
    # One write of the session: its wait and its policy (and the wait's Event).
    assert [w.verb for w in rig.kube.writes[start:] if w.resource == "sessions"] == ["patch_status"]
    rig.c.wakeups.stop()


async def test_a_session_with_a_prompt_still_has_its_turn_before_its_sandbox(tmp_path: Path) -> None:
    rig = await primed(tmp_path)
    rig.env()
    await rig.session("s", prompt="hello")
    await rig.reconcile("s")
    assert rig.kube.peek("turns", "s-1") is not None  # a sandbox that never connects fails it with why
    assert rig.status("sessions", "s")["policy"] == "auto"
    await rig.connect("s")
    assert rig.status("turns", "s-1")["phase"] == "Running"


async def test_a_first_volume_that_is_another_sessions_is_never_mounted(tmp_path: Path) -> None:
    """A volume of the same name left by a deleted namesake: no pod, the reconcile fails (and is tried again)."""
    rig = await primed(tmp_path)
    rig.env()
    other = await rig.session("old")
    rig.kube.seed(
        "persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "s-workspace", "ownerReferences": [owner_ref(other)]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    await rig.session("s")
    with pytest.raises(RuntimeError, match="belongs to another session"):
        await rig.reconcile("s")
    assert rig.kube.peek("pods", "s-r1") is None
    assert not (rig.status("sessions", "s").get("sandbox") or {}).get("pod")


async def test_a_first_volume_an_earlier_attempt_made_is_used(tmp_path: Path) -> None:
    rig = await primed(tmp_path)
    rig.env()
    s = await rig.session("s")
    rig.kube.seed(
        "persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "s-workspace", "ownerReferences": [owner_ref(s)]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    await rig.reconcile("s")
    assert rig.status("sessions", "s")["sandbox"]["pod"] == "s-r1"
    assert rig.kube.peek("pods", "s-r1") is not None


async def test_a_claim_writes_the_policy_in_its_one_status_write(tmp_path: Path) -> None:
    rig = await pool_rig(tmp_path, size=1)
    await rig.ctx.resync_cache()
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    rig.connected.add("s1-r1")  # type: ignore[attr-defined]  # the adopted driver is back during the claim
    await rig.session("s1", approvals="ask")
    rig.kube.fail_next("get", "sessions", 500, times=100)  # read from the cache, never the apiserver
    await rig.reconcile("s1")
    [write] = [w for w in session_writes(rig, "s1") if w.verb == "patch_status"]
    assert write.body["policy"] == "ask" and write.body["phase"] == "Idle"
    assert write.body["sandbox"]["connected"] is True and write.body["sandbox"]["pod"] == name


async def test_a_freed_slot_wakes_a_pool_that_could_not_fill(tmp_path: Path) -> None:
    """Not the pool's 60 s backstop: the slot a session gives back refills the pool at once."""
    rig = await make_rig(tmp_path, max_sandboxes=1)
    rig.env(warmPool={"size": 1, "maxAgeSeconds": 600})
    await rig.ctx.resync_cache()
    await rig.running("s1", harness="codex")  # not the pool's harness: a fresh sandbox holds the one slot
    await rig.c.pools.reconcile("default", "dev")
    assert members(rig) == [] and ("default", "dev") in rig.c.pools.short
    await rig.kube.patch("sessions", "s1", {"spec": {"stopped": True}})
    await rig.reconcile("s1")
    await until(lambda: len(members(rig)) == 1, "the pool refilled", 5)
    await until(lambda: ("default", "dev") not in rig.c.pools.short, "the pool is full", 5)
    rig.c.wakeups.stop()


async def test_fill_slots_wakes_the_short_pools_only_with_slots_left_after_the_waiting_sessions(
    tmp_path: Path,
) -> None:
    rig = await primed(tmp_path, max_sandboxes=1)
    rig.env()
    woken: list[int] = []
    rig.c.sweeper.wake_pools = lambda: woken.append(1)
    await rig.c.sweeper.fill_slots()
    assert woken == [1]  # a free slot, nobody waiting
    await rig.running("a")
    await rig.session("b")
    await rig.reconcile("b")
    assert rig.status("sessions", "b")["reason"] == "NoSandboxSlot"
    await rig.c.sweeper.fill_slots()
    assert woken == [1]  # no slot free: the waiting session comes first anyway
    await asyncio.sleep(0)
    rig.c.wakeups.stop()


async def test_a_claim_is_made_at_the_member_version_its_watch_showed_last(tmp_path: Path) -> None:
    """The kubelet moved the pod after it was ready; its watch event told the pool: one compare-and-set,
    no 409 and no read. A stale or unknown version is never taken over a newer one."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    older = rig.get("pods", name)
    moved = rig.kube.set_status("pods", name, {"conditions": [{"type": "Ready", "status": "True"}]})
    rig.c.pools.pod_seen("default", moved)
    rig.c.pools.pod_seen("default", older)  # a late event: ignored
    rig.kube.fail_next("get_core", "pods", 500, name=name, times=10)  # no read of the member
    await rig.session("s1")
    start = len(rig.kube.writes)
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name
    cas = [w for w in rig.kube.writes[start:] if w.verb == "patch_core" and w.name == name]
    assert len(cas) == 1 and cas[0].error is None
