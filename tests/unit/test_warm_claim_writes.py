"""A warm claim's writes (pools.py ``_adopt``): the session's status write does not wait for the key Secret or
the volume's re-owning, and what a stop between them leaves undone is mended at the next start
(``Pools.finish_claim``, from ``Sandboxes.check``): a volume still the pool's is re-owned, a sandbox whose key
Secret was never made is released (fail closed: its key is gone with the stopped process)."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

from hangar.models import labels as L
from hangar_operator.pool_objects import take_key
from hangar_operator.pools import NO_KEY
from hangar_operator.runs import make_run

from .operator_rig import Rig
from .test_warm_pools import make_ready, members, pool_rig


async def claimed(tmp_path: Path, **session: Any) -> tuple[Rig, str]:
    """A session that took the pool's one member, its driver back in the claim's wait."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    await make_ready(rig, name)
    rig.connected.add("s1-r1")  # type: ignore[attr-defined]
    await rig.session("s1", **session)
    return rig, name


def owners(rig: Rig, plural: str, name: str) -> list[str]:
    return [r["uid"] for r in rig.get(plural, name)["metadata"].get("ownerReferences") or []]


async def test_the_claims_status_write_does_not_wait_for_the_key_secret_or_the_volume(
    tmp_path: Path,
) -> None:
    rig, name = await claimed(tmp_path)
    held = asyncio.Event()
    create_core, patch_core = rig.kube.create_core, rig.kube.patch_core

    async def slow_create(kind: str, body: dict[str, Any]) -> bool:
        if kind == "secrets":
            await held.wait()
        return await create_core(kind, body)

    async def slow_patch(kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if kind == "persistentvolumeclaims":
            await held.wait()
        return await patch_core(kind, name, body)

    rig.kube.create_core = slow_create  # type: ignore[method-assign]
    rig.kube.patch_core = slow_patch  # type: ignore[method-assign]
    task = asyncio.create_task(rig.reconcile("s1"))
    for _ in range(200):
        if (rig.status("sessions", "s1").get("sandbox") or {}).get("pod"):
            break
        await asyncio.sleep(0)
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Idle" and st["sandbox"]["connected"] is True and st["sandbox"]["pod"] == name
    # written while the Secret and the volume's re-owning were still on their way
    assert rig.kube.peek("secrets", "s1-r1-key") is None
    assert L.POOL in rig.get("persistentvolumeclaims", f"{name}-workspace")["metadata"]["labels"]
    held.set()
    await task
    s_uid = rig.get("sessions", "s1")["metadata"]["uid"]
    assert rig.get("secrets", "s1-r1-key") and owners(rig, "persistentvolumeclaims", f"{name}-workspace") == [
        s_uid
    ]


async def undo(rig: Rig, name: str, *, secret: bool, volume: bool) -> None:
    """As a stop right after the status write leaves it: the Secret not made, the volume still the pool's;
    then a new operator process (no key in memory)."""
    if secret:
        await rig.kube.delete_core("secrets", "s1-r1-key")
    if volume:
        env = rig.get("environments", "dev")
        pvc = f"{name}-workspace"
        await rig.kube.patch_core(
            "persistentvolumeclaims",
            pvc,
            {
                "metadata": {
                    "labels": {L.POOL: "dev"},
                    "ownerReferences": [
                        {
                            "apiVersion": env["apiVersion"],
                            "kind": env["kind"],
                            "name": "dev",
                            "uid": env["metadata"]["uid"],
                        }
                    ],
                }
            },
        )
    rig.ctx.run_keys.clear()


async def test_a_volume_left_the_pools_is_made_the_sessions_and_the_key_kept_at_the_next_start(
    tmp_path: Path,
) -> None:
    rig, name = await claimed(tmp_path)
    await rig.reconcile("s1")
    key = base64.b64decode(rig.get("secrets", "s1-r1-key")["data"]["run-key"])
    await undo(rig, name, secret=False, volume=True)
    await rig.c.sandboxes.check("default", "s1")
    s_uid = rig.get("sessions", "s1")["metadata"]["uid"]
    pvc = rig.get("persistentvolumeclaims", f"{name}-workspace")
    assert [r["uid"] for r in pvc["metadata"]["ownerReferences"]] == [s_uid]
    assert L.POOL not in pvc["metadata"]["labels"] and pvc["metadata"]["labels"][L.SESSION] == "s1"
    # the sandbox stays, and the driver's hello finds its key without another read
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name and rig.kube.peek("pods", name)
    assert rig.ctx.run_keys["s1-r1"] == key
    # nothing left to mend: a second look writes nothing
    before = len(rig.kube.writes)
    await rig.c.sandboxes.check("default", "s1")
    assert len(rig.kube.writes) == before


async def test_a_claim_whose_key_secret_was_never_made_is_released_at_the_next_start(
    tmp_path: Path,
) -> None:
    rig, name = await claimed(tmp_path, prompt="hello")
    rig.connected.discard("s1-r1")  # type: ignore[attr-defined]  # written Starting: a turn is queued
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name
    await undo(rig, name, secret=True, volume=True)
    assert await rig.c.sandboxes.key_for_run("s1-r1") is None  # the driver's hello can't be verified
    rig.ctx.run_keys.clear()
    await rig.c.sandboxes.check("default", "s1")
    st = rig.status("sessions", "s1")
    # released: the pod goes, the volume (made the session's) stays
    assert rig.kube.peek("pods", name) is None
    assert ("s1", "SandboxLost", f"sandbox pod {name} {NO_KEY}") in rig.events()
    # and its queued turn starts another sandbox, on the same volume
    assert st["sandbox"]["pod"] == "s1-r2" and rig.get("secrets", "s1-r2-key")
    s_uid = rig.get("sessions", "s1")["metadata"]["uid"]
    assert owners(rig, "persistentvolumeclaims", f"{name}-workspace") == [s_uid]
    assert st["workspace"] == f"{name}-workspace"
    # the queued turn was not failed as if the image could not run the driver
    turn = rig.status("turns", "s1-1")
    assert turn.get("phase") != "Failed", turn


async def test_before_its_status_write_the_claim_writes_only_the_members_key_secret(tmp_path: Path) -> None:
    """The claim's test-and-set goes on the member's key Secret (small, no admission, no pod watchers): the
    pod's relabel and the pool Secret's delete come after the status write, the relabel first."""
    rig, name = await claimed(tmp_path)
    rig.kube.writes.clear()
    await rig.reconcile("s1")
    done = [(w.verb, w.resource, w.name) for w in rig.kube.writes if w.error is None]
    status = done.index(("patch_status", "sessions", "s1"))
    assert done[:status] == [("patch_core", "secrets", f"{name}-key")]
    after = done[status + 1 :]
    assert after.index(("patch_core", "pods", name)) < after.index(("delete_core", "secrets", f"{name}-key"))
    labels = rig.get("pods", name)["metadata"]["labels"]
    assert labels[L.COMPONENT] == "sandbox" and labels[L.SESSION] == "s1" and L.POOL not in labels


async def test_a_pod_left_the_pools_by_a_stop_after_the_status_write_is_made_the_sessions_at_the_next_start(
    tmp_path: Path,
) -> None:
    rig, name = await claimed(tmp_path)
    await rig.reconcile("s1")
    # As a stop right after the status write leaves it: the pod still the pool's, its key Secret claimed.
    env = rig.get("environments", "dev")
    pool_pod = {
        "labels": {L.COMPONENT: "pool-member", L.POOL: "dev", L.SESSION: None, L.RUN: None},
        "ownerReferences": [
            {
                "apiVersion": env["apiVersion"],
                "kind": env["kind"],
                "name": "dev",
                "uid": env["metadata"]["uid"],
            }
        ],
    }
    await rig.kube.patch_core("pods", name, {"metadata": pool_pod})
    s_obj = rig.get("sessions", "s1")
    key: dict[str, Any] = {"metadata": {"name": f"{name}-key", "labels": {L.COMPONENT: "run-key"}}}
    await rig.kube.create_core("secrets", key)
    await rig.kube.patch_core(
        "secrets", f"{name}-key", take_key(s_obj, make_run("default", "default", "s1", 1), 0)
    )
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name
    rig.ctx.run_keys.clear()
    rig.c.pools.claiming.clear()
    # A retirement (the pool's reconcile of a new process) does not take it: the claim won its key Secret.
    rig.c.pools.clock = lambda: time.time() + rig.ctx.settings.connect_timeout + 5
    await rig.c.pools.reconcile("default", "dev")
    assert rig.kube.peek("pods", name) is not None
    await rig.c.sandboxes.check("default", "s1")
    s_uid = rig.get("sessions", "s1")["metadata"]["uid"]
    pod = rig.get("pods", name)
    assert pod["metadata"]["labels"][L.SESSION] == "s1" and L.POOL not in pod["metadata"]["labels"]
    assert owners(rig, "pods", name) == [s_uid] and rig.kube.peek("secrets", f"{name}-key") is None
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name


async def test_a_member_claimed_by_a_process_that_stopped_before_its_status_write_is_retired(
    tmp_path: Path,
) -> None:
    """Its key Secret says claimed, by a session that went on without it: after a connect timeout the pool
    removes it (a retirement's test-and-set alone would never win it) and refills; a recent claim stays."""
    rig = await pool_rig(tmp_path, size=1)
    await rig.c.pools.reconcile("default", "dev")
    [name] = members(rig)
    gone = await rig.session("gone")
    claim = take_key(gone, make_run("default", "default", "gone", 1), time.time())
    await rig.kube.patch_core("secrets", f"{name}-key", claim)
    timeout = rig.ctx.settings.connect_timeout
    rig.c.pools.clock = lambda: time.time() + timeout / 2  # not ready within... no: too young to judge
    await rig.c.pools.reconcile("default", "dev")
    assert members(rig) == [name]
    rig.c.pools.clock = lambda: time.time() + timeout + 5
    await rig.c.pools.reconcile("default", "dev")
    assert rig.kube.peek("pods", name) is None and rig.kube.peek("secrets", f"{name}-key") is None
    assert len(members(rig)) == 1 and members(rig) != [name]  # refilled


async def test_a_session_deleted_before_its_claims_pod_relabel_does_not_leave_the_pod_behind(
    tmp_path: Path,
) -> None:
    """Deleted as soon as it connected: the relabel names a gone owner, which the garbage collector can be
    slow to find; the claim removes the pod itself."""
    rig, name = await claimed(tmp_path)
    patch_core = rig.kube.patch_core

    async def deleted_first(kind: str, obj: str, body: Any) -> dict[str, Any]:
        if kind == "pods":
            await rig.kube.delete("sessions", "s1")
        return await patch_core(kind, obj, body)

    rig.kube.patch_core = deleted_first  # type: ignore[method-assign]
    await rig.reconcile("s1")
    assert rig.kube.peek("sessions", "s1") is None
    assert rig.kube.peek("pods", name) is None and rig.kube.peek("secrets", f"{name}-key") is None
