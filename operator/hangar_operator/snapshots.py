"""Workspace snapshots: a VolumeSnapshot of a session's workspace volume with each checkpoint, and a lost
volume made again from the newest ready one (issue 10, item 6).

On a cluster that serves the CSI snapshot API (``snapshot.storage.k8s.io/v1`` VolumeSnapshots, found by API
discovery), each checkpoint also snapshots the workspace PVC: the VolumeSnapshot ``<session>-<checkpoint>``,
owned by the Session and labelled with it and the checkpoint, recorded on the checkpoint (``snapshot``: name,
readyToUse, as last read). Only the newest ``KEEP_SNAPSHOTS`` are kept. Without the API the checkpoint says
why none was taken, and the archive on the volume itself is all there is.

A session's next run that finds its workspace PVC gone while the session had a volume before (a lost volume)
makes it again with ``dataSource`` the newest ready snapshot, so the resumed agent has its files and its
conversation. While no snapshot is ready but one is still being cut, the run waits (``RestoringWorkspace``);
with none at all it starts on an empty volume and says so (``WorkspaceLost``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from hangar.kube import SNAPSHOT_GROUP, ApiException, Obj, owner_ref
from hangar.models import Session
from hangar.models import labels as L
from hangar.models.session import Checkpoint, CheckpointSnapshot

from .context import Context
from .foreign_status import snapshot_status
from .sandbox_objects import labels, workspace_name, workspace_pvc
from .status import patch_status

log = logging.getLogger("hangar.operator.snapshots")

VOLUMESNAPSHOTS = "volumesnapshots"
KEEP_SNAPSHOTS = 3
# Discovery's "no" is asked again after this long (the snapshot CRDs may be installed after hangar); its
# "yes" is kept for the process's life.
REDISCOVER_SECONDS = 300.0
NO_API = "the cluster does not serve the CSI snapshot API (snapshot.storage.k8s.io/v1 volumesnapshots)"


def snapshot_name(session: str, checkpoint: str) -> str:
    return f"{session}-{checkpoint}"


def snapshot_error(obj: Obj) -> str | None:
    err = snapshot_status(obj).error
    return str(err.get("message") or "failed") if err else None


def is_ready(obj: Obj) -> bool:
    return snapshot_status(obj).ready_to_use is True


def to_prune(names: list[str], ready: set[str], keep: int = KEEP_SNAPSHOTS) -> list[str]:
    """Which snapshots to delete (``names`` oldest first): all but the newest ``keep``. When none of those is
    ready yet, the newest ready one stays too: a volume lost meanwhile still has something to come back from."""
    kept = names[-keep:] if keep > 0 else []
    if not any(n in ready for n in kept):
        kept += [n for n in reversed(names) if n in ready][:1]
    return [n for n in names if n not in kept]


def restore_choice(order: list[str], found: dict[str, Obj]) -> tuple[str | None, str | None]:
    """(the snapshot to restore a lost volume from, the one to wait for instead). ``order``: the session's
    snapshots oldest first; ``found``: the VolumeSnapshots that exist, by name. The newest ready one is taken;
    with none ready, the newest still being cut (no error) is waited for; else neither."""
    present = [n for n in order if n in found]
    ready = [n for n in present if is_ready(found[n])]
    if ready:
        return ready[-1], None
    cutting = [n for n in present if snapshot_error(found[n]) is None]
    return None, (cutting[-1] if cutting else None)


@dataclass
class Workspace:
    """What a session's next run needs of its workspace volume."""

    claim: Obj | None = None  # the PVC to create; None: it is there
    wait: str = ""  # why the run can't start yet
    restored_from: str | None = None  # the VolumeSnapshot the claim starts from
    lost: bool = False  # the volume was lost and nothing restores it: the claim is empty


class Snapshots:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._available: bool | None = None
        self._asked_at = 0.0

    async def available(self) -> bool:
        """Does the cluster serve VolumeSnapshots? API discovery, cached."""
        if self._available is not None and (
            self._available or time.monotonic() - self._asked_at < REDISCOVER_SECONDS
        ):
            return self._available
        try:
            served = await self.ctx.kube.served(SNAPSHOT_GROUP, "v1")
        except ApiException as e:  # discovery itself failed: no, for now; asked again next time
            log.warning("API discovery of %s failed: %s", SNAPSHOT_GROUP, e)
            return False
        self._available, self._asked_at = VOLUMESNAPSHOTS in served, time.monotonic()
        return self._available

    # --- taking and keeping ---------------------------------------------------------------------------
    async def take(self, ns: str, s_obj: Obj, checkpoint: str) -> CheckpointSnapshot:
        """The checkpoint's VolumeSnapshot of the workspace volume, or why there is none."""
        if not await self.available():
            return CheckpointSnapshot(skipped=NO_API)
        session = s_obj["metadata"]["name"]
        name = snapshot_name(session, checkpoint)
        spec: Obj = {"source": {"persistentVolumeClaimName": workspace_name(s_obj)}}
        if self.ctx.settings.snapshot_class:
            spec["volumeSnapshotClassName"] = self.ctx.settings.snapshot_class
        body = {
            "apiVersion": f"{SNAPSHOT_GROUP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": name,
                "labels": {**labels(session, component="workspace-snapshot"), L.CHECKPOINT: checkpoint},
                "ownerReferences": [owner_ref(s_obj)],
            },
            "spec": spec,
        }
        try:
            await self.ctx.kube_in(ns).create_ext(VOLUMESNAPSHOTS, body)  # a retry finds its own: False
        except ApiException as e:
            why = f"creating VolumeSnapshot {name} failed: {e.status} {e.reason}"
            log.warning("%s/%s: %s", ns, session, why)
            return CheckpointSnapshot(error=why)
        return CheckpointSnapshot(name=name)

    async def prune(self, ns: str, session: str) -> set[str]:
        """Deletes all but the newest ``KEEP_SNAPSHOTS`` of the session's snapshots; their names."""
        if not await self.available():
            return set()
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        found = {
            o["metadata"]["name"]: o
            for o in await kube.list_ext(VOLUMESNAPSHOTS, label_selector=L.session_selector(session))
        }
        order = _order(s_obj, found)
        gone = to_prune(order, {n for n in order if is_ready(found[n])})
        for n in gone:
            await kube.delete_ext(VOLUMESNAPSHOTS, n)
        return set(gone)

    async def refresh(self, ns: str, s_obj: Obj, pruned: set[str] | None = None) -> Obj:
        """The checkpoints' snapshot records brought up to date (readyToUse, error, pruned); the session."""
        s = Session.model_validate(s_obj)
        pruned = pruned or set()
        open_ = [
            c.snapshot
            for c in s.status.checkpoints
            if c.snapshot and c.snapshot.name and not c.snapshot.pruned and not c.snapshot.error
        ]
        if not any(not x.ready_to_use or x.name in pruned for x in open_):
            return s_obj
        kube = self.ctx.kube_in(ns)
        changed = False
        for snap in open_:
            assert snap.name is not None
            if snap.name in pruned:
                snap.pruned, changed = True, True
                continue
            if snap.ready_to_use:
                continue
            obj = await kube.get_ext(VOLUMESNAPSHOTS, snap.name)
            if obj is None:
                snap.pruned, changed = True, True
            elif is_ready(obj) or snapshot_error(obj):
                snap.ready_to_use, snap.error, changed = is_ready(obj), snapshot_error(obj), True
        if not changed:
            return s_obj
        cks = [c.dump() for c in s.status.checkpoints]
        return await patch_status(kube, "sessions", s_obj, {"checkpoints": cks})

    # --- a lost volume --------------------------------------------------------------------------------
    async def workspace(self, ns: str, s_obj: Obj) -> Workspace:
        """What the session's next run must do about its workspace PVC before its pod can start."""
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        volume = workspace_name(s_obj)
        claim = await kube.get_core("persistentvolumeclaims", volume)
        if claim is not None:
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                return Workspace(wait=f"the workspace volume {volume} is being deleted")
            return Workspace()
        empty = workspace_pvc(s_obj, self.ctx.settings)
        if s.status.counters.sandboxes == 0 and not s.status.checkpoints:
            return Workspace(claim=empty)  # a new session's first volume
        names = _names(s.status.checkpoints)
        found: dict[str, Obj] = {}
        if names and await self.available():
            found = {
                o["metadata"]["name"]: o
                for o in await kube.list_ext(VOLUMESNAPSHOTS, label_selector=L.session_selector(s.name))
            }
        use, wait = restore_choice(names, found)
        if use is not None:
            return Workspace(
                claim=workspace_pvc(s_obj, self.ctx.settings, restore_from=found[use]), restored_from=use
            )
        if wait is not None:
            return Workspace(
                wait=f"restoring the lost workspace volume: waiting for VolumeSnapshot {wait} to be ready"
            )
        return Workspace(claim=empty, lost=True)


def _names(checkpoints: list[Checkpoint]) -> list[str]:
    return [c.snapshot.name for c in checkpoints if c.snapshot and c.snapshot.name]


def _order(s_obj: Obj | None, found: dict[str, Obj]) -> list[str]:
    """The session's snapshots oldest first: those its checkpoints no longer list (older), then theirs."""
    listed = _names(Session.model_validate(s_obj).status.checkpoints) if s_obj else []
    rest = sorted(
        (n for n in found if n not in listed), key=lambda n: found[n]["metadata"].get("creationTimestamp", "")
    )
    return rest + [n for n in listed if n in found]
