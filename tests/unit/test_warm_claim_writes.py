"""A warm claim's writes (pools.py ``_adopt``): the session's status write does not wait for the key Secret or
the volume's re-owning, and what a stop between them leaves undone is mended at the next start
(``Pools.finish_claim``, from ``Sandboxes.check``): a volume still the pool's is re-owned, a sandbox whose key
Secret was never made is released (fail closed: its key is gone with the stopped process)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

from hangar.models import labels as L
from hangar_operator.pools import NO_KEY

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
