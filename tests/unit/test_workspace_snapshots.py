"""Workspace snapshots (issue 10, item 6) on the operator rig: with the CSI snapshot API each checkpoint also
snapshots the workspace volume (owned by the Session, labelled, recorded with readyToUse); without it the
checkpoint says why not; only the newest few are kept; a lost volume is made again from the newest ready
snapshot, waits while one is still being cut, and starts empty (said so) when there is none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hangar.kube import SNAPSHOT_GROUP
from hangar.turns import create_turn
from hangar_operator.snapshots import NO_API, restore_choice, to_prune

from .operator_rig import Rig, make_rig

SNAPS = "volumesnapshots"


def snap(name: str, ready: bool = False, error: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"readyToUse": ready}
    if error:
        status["error"] = {"message": error}
    return {"metadata": {"name": name}, "status": status}


@pytest.mark.parametrize(
    ("names", "ready", "keep", "pruned"),
    [
        (["a", "b", "c"], set(), 3, []),
        (["a", "b", "c", "d", "e"], {"a", "b", "c", "d", "e"}, 3, ["a", "b"]),
        # None of the newest three is ready yet: the newest ready one stays besides them.
        (["a", "b", "c", "d", "e"], {"a", "b"}, 3, ["a"]),
        (["a", "b", "c", "d"], set(), 3, ["a"]),
        (["a", "b"], {"a"}, 1, []),
        (["a", "b", "c"], {"c"}, 1, ["a", "b"]),
    ],
)
def test_which_snapshots_are_pruned(names: list[str], ready: set[str], keep: int, pruned: list[str]) -> None:
    assert to_prune(names, ready, keep) == pruned


@pytest.mark.parametrize(
    ("found", "use", "wait"),
    [
        ({}, None, None),
        ({"a": snap("a", True), "b": snap("b", True)}, "b", None),
        # The newest ready one, even when a newer one is still being cut.
        ({"a": snap("a", True), "b": snap("b")}, "a", None),
        # None ready: wait for the newest still being cut, not for one that failed.
        ({"a": snap("a"), "b": snap("b", error="no space")}, None, "a"),
        ({"b": snap("b", error="no space")}, None, None),
        # A record whose VolumeSnapshot is gone (pruned, deleted) is not a choice.
        ({"c": snap("c", True)}, "c", None),
    ],
)
def test_which_snapshot_restores_a_lost_volume(
    found: dict[str, Any], use: str | None, wait: str | None
) -> None:
    assert restore_choice(["a", "b", "c"], found) == (use, wait)


async def suspended_idle(rig: Rig, name: str = "s1") -> dict[str, Any]:
    """A session checkpointed and suspended for being idle; its checkpoint record."""
    turn = await rig.running(name)
    await rig.event(name, "turn_ended", turn=turn, outcome="completed", summary="done")
    long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    rig.kube.set_status("turns", turn, {"finishedAt": long_ago})
    rig.kube.set_status("sessions", name, {"sandbox": {"startedAt": long_ago}})
    await rig.reconcile(name)
    run = rig.status("sessions", name)["sandbox"]["run"]
    [cid] = [c for c in rig.commands(rig.run_id(name)) if c.startswith("checkpoint-")]
    await rig.event(name, "command_result", op="checkpoint", ok=True, command_id=cid, size=7, sha256="cd")
    st = rig.status("sessions", name)
    assert st["phase"] == "Suspended" and rig.kube.peek("pods", run) is None
    ck: dict[str, Any] = st["checkpoints"][-1]
    return ck


async def lose_volume_and_send(rig: Rig, name: str = "s1") -> None:
    assert await rig.kube.delete_core("persistentvolumeclaims", f"{name}-workspace")
    await create_turn(rig.kube, name, "what did you do?", by="alice")
    await rig.reconcile(name)


async def test_a_checkpoint_snapshots_the_volume_and_a_lost_volume_comes_back_from_it(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, snapshot_api=True, idle_suspend_after=60)
    rig.env()
    ck = await suspended_idle(rig)
    name = f"s1-{ck['id']}"
    assert ck["snapshot"] == {"name": name, "readyToUse": False, "pruned": False}
    vs = rig.get(SNAPS, name)
    assert vs["apiVersion"] == f"{SNAPSHOT_GROUP}/v1" and vs["kind"] == "VolumeSnapshot"
    assert vs["spec"] == {"source": {"persistentVolumeClaimName": "s1-workspace"}}
    assert vs["metadata"]["labels"]["hangar.dev/session"] == "s1"
    assert vs["metadata"]["labels"]["hangar.dev/checkpoint"] == ck["id"]
    [owner] = vs["metadata"]["ownerReferences"]
    assert owner["kind"] == "Session" and owner["name"] == "s1"

    # The volume is lost while the snapshot is still being cut: the next run waits for it, holding no slot.
    await lose_volume_and_send(rig)
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Pending" and st["reason"] == "RestoringWorkspace" and name in st["message"]
    assert rig.kube.peek("persistentvolumeclaims", "s1-workspace") is None
    assert st["sandbox"].get("pod") is None

    # Once it is ready, the record says so and the volume is made again from it.
    rig.kube.set_status(SNAPS, name, {"readyToUse": True, "restoreSize": "12Gi"})
    await rig.reconcile("s1")
    st = rig.status("sessions", "s1")
    assert st["checkpoints"][-1]["snapshot"]["readyToUse"] is True
    assert st["phase"] == "Starting" and st["sandbox"]["run"] == "s1-r2"
    pvc = rig.get("persistentvolumeclaims", "s1-workspace")
    assert pvc["spec"]["dataSource"] == {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": name}
    assert pvc["spec"]["resources"]["requests"]["storage"] == "12Gi"
    assert ("s1", "WorkspaceRestored") in [(o, r) for o, r, _ in rig.events()]
    kinds = [e.kind for e in await rig.ctx.db.events("session/s1")]
    assert "workspace_restored" in kinds
    await rig.connect("s1")
    assert rig.status("turns", "s1-2")["phase"] == "Running"


async def test_without_the_snapshot_api_the_checkpoint_says_so_and_a_lost_volume_starts_empty(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path, idle_suspend_after=60)
    rig.env()
    ck = await suspended_idle(rig)
    assert ck["snapshot"] == {"skipped": NO_API, "readyToUse": False, "pruned": False}
    assert not [w for w in rig.kube.writes if w.resource == SNAPS]
    await lose_volume_and_send(rig)
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Starting"
    assert "dataSource" not in rig.get("persistentvolumeclaims", "s1-workspace")["spec"]
    [(_, _, why)] = [e for e in rig.events() if e[1] == "WorkspaceLost"]
    assert "no snapshot" in why
    kinds = [e.kind for e in await rig.ctx.db.events("session/s1")]
    assert "workspace_lost" in kinds


async def test_a_failed_snapshot_is_recorded_and_nothing_waits_on_it(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, snapshot_api=True, idle_suspend_after=60, snapshot_class="pd-snaps")
    rig.env()
    ck = await suspended_idle(rig)
    name = ck["snapshot"]["name"]
    assert rig.get(SNAPS, name)["spec"]["volumeSnapshotClassName"] == "pd-snaps"
    rig.kube.set_status(SNAPS, name, {"readyToUse": False, "error": {"message": "quota exceeded"}})
    await lose_volume_and_send(rig)
    st = rig.status("sessions", "s1")
    assert st["checkpoints"][-1]["snapshot"]["error"] == "quota exceeded"
    assert st["phase"] == "Starting"  # an empty volume, said so: a failed snapshot is not waited for
    assert [e for e in rig.events() if e[1] == "WorkspaceLost"]


async def test_only_the_newest_snapshots_are_kept(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, snapshot_api=True, idle_suspend_after=60)
    rig.env()
    for i in range(4):
        if i:
            # The next message resumes it; its turn ends; an hour later it is suspended again.
            await create_turn(rig.kube, "s1", f"message {i}", by="alice")
            await rig.reconcile("s1")
            await rig.connect("s1")
            turn = f"s1-{i + 1}"
            await rig.event("s1", "turn_ended", turn=turn, outcome="completed", summary="done")
            long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
            rig.kube.set_status("turns", turn, {"finishedAt": long_ago})
            rig.kube.set_status("sessions", "s1", {"sandbox": {"startedAt": long_ago}})
            await rig.reconcile("s1")
            [cid] = [c for c in rig.commands(rig.run_id("s1")) if c.startswith("checkpoint-")]
            await rig.event("s1", "command_result", op="checkpoint", ok=True, command_id=cid, size=7)
        else:
            await suspended_idle(rig)
        for c in rig.status("sessions", "s1")["checkpoints"]:
            if rig.kube.peek(SNAPS, c["snapshot"]["name"]):
                rig.kube.set_status(SNAPS, c["snapshot"]["name"], {"readyToUse": True})
    cks = rig.status("sessions", "s1")["checkpoints"]
    assert len(cks) == 4
    names = [c["snapshot"]["name"] for c in cks]
    assert rig.kube.names(SNAPS) == sorted(names[1:])
    assert cks[0]["snapshot"]["pruned"] is True
    assert [c["snapshot"]["pruned"] for c in cks[1:]] == [False, False, False]


async def test_discovery_is_cached(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    snaps = rig.c.sandboxes.snapshots
    assert await snaps.available() is False
    rig.kube.server.served[(SNAPSHOT_GROUP, "v1")] = {SNAPS}
    assert await snaps.available() is False  # "no" is asked again only after a while
    snaps._asked_at -= 3600
    assert await snaps.available() is True
    rig.kube.server.served.clear()
    assert await snaps.available() is True  # "yes" is kept
