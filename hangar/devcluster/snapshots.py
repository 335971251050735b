"""Volume snapshots for the local pod runner: the CSI snapshot API (``snapshot.storage.k8s.io/v1``) emulated
the way the runner emulates volume clones, so the operator's workspace snapshots and restores run locally.

- The CRDs: VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass, as the upstream
  external-snapshotter v1 schemas (written minimally: the fields a snapshot and a restore use), each made
  only where the cluster lacks it; and a default class ``hangar-local``.
- A VolumeSnapshot that appears is cut at once: its source claim's directory is copied (``cp -a`` keeps the
  agent's owners and modes) beside the runner's volumes, a VolumeSnapshotContent is bound to it, and its
  status says ``readyToUse: true`` with the claim's size as ``restoreSize``. A source claim that is not
  bound yet is said in ``status.error`` and tried again. Deleting the snapshot deletes the copy.
- A claim whose ``dataSource`` is a VolumeSnapshot starts as a copy of it (:meth:`restore`, which the runner's
  volume provisioner calls).

Production clusters run a CSI driver and the snapshot controller instead.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("hangar.podrunner.snapshots")

GROUP = "snapshot.storage.k8s.io"
VERSION = "v1"
DRIVER = "hangar.dev/local-runner"
DEFAULT_CLASS = "hangar-local"
RETRY_SECONDS = 3.0
MERGE = "application/merge-patch+json"

_ERROR = {
    "type": "object",
    "description": "The last error cutting the snapshot, if any",
    "properties": {"message": {"type": "string"}, "time": {"type": "string", "format": "date-time"}},
}


def _crd(kind: str, plural: str, short: list[str], scope: str, version: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "annotations": {
                "api-approved.kubernetes.io": "https://github.com/kubernetes-csi/external-snapshotter/pull/814"
            },
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
            },
            "scope": scope,
            "versions": [{"name": VERSION, "served": True, "storage": True, **version}],
        },
    }


def _schema(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """An object's schema: the fields every object has, and what is this kind's own."""
    own = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    return {"openAPIV3Schema": {"type": "object", "required": required, "properties": {**own, **properties}}}


def _col(name: str, type_: str, path: str) -> dict[str, str]:
    return {"name": name, "type": type_, "jsonPath": path}


VOLUME_SNAPSHOT = _crd(
    "VolumeSnapshot",
    "volumesnapshots",
    ["vs"],
    "Namespaced",
    {
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            _col("ReadyToUse", "boolean", ".status.readyToUse"),
            _col("SourcePVC", "string", ".spec.source.persistentVolumeClaimName"),
            _col("RestoreSize", "string", ".status.restoreSize"),
            _col("SnapshotClass", "string", ".spec.volumeSnapshotClassName"),
            _col("SnapshotContent", "string", ".status.boundVolumeSnapshotContentName"),
            _col("Age", "date", ".metadata.creationTimestamp"),
        ],
        "schema": _schema(
            ["spec"],
            {
                "spec": {
                    "type": "object",
                    "required": ["source"],
                    "properties": {
                        "source": {
                            "type": "object",
                            "oneOf": [
                                {"required": ["persistentVolumeClaimName"]},
                                {"required": ["volumeSnapshotContentName"]},
                            ],
                            "properties": {
                                "persistentVolumeClaimName": {"type": "string"},
                                "volumeSnapshotContentName": {"type": "string"},
                            },
                        },
                        "volumeSnapshotClassName": {"type": "string"},
                    },
                },
                "status": {
                    "type": "object",
                    "properties": {
                        "boundVolumeSnapshotContentName": {"type": "string"},
                        "creationTime": {"type": "string", "format": "date-time"},
                        "error": _ERROR,
                        "readyToUse": {"type": "boolean"},
                        "restoreSize": {
                            "anyOf": [{"type": "integer"}, {"type": "string"}],
                            "x-kubernetes-int-or-string": True,
                        },
                    },
                },
            },
        ),
    },
)

VOLUME_SNAPSHOT_CONTENT = _crd(
    "VolumeSnapshotContent",
    "volumesnapshotcontents",
    ["vsc", "vscs"],
    "Cluster",
    {
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            _col("ReadyToUse", "boolean", ".status.readyToUse"),
            _col("RestoreSize", "integer", ".status.restoreSize"),
            _col("DeletionPolicy", "string", ".spec.deletionPolicy"),
            _col("Driver", "string", ".spec.driver"),
            _col("VolumeSnapshot", "string", ".spec.volumeSnapshotRef.name"),
            _col("Age", "date", ".metadata.creationTimestamp"),
        ],
        "schema": _schema(
            ["spec"],
            {
                "spec": {
                    "type": "object",
                    "required": ["deletionPolicy", "driver", "source", "volumeSnapshotRef"],
                    "properties": {
                        "deletionPolicy": {"type": "string", "enum": ["Delete", "Retain"]},
                        "driver": {"type": "string"},
                        "source": {
                            "type": "object",
                            "oneOf": [{"required": ["snapshotHandle"]}, {"required": ["volumeHandle"]}],
                            "properties": {
                                "snapshotHandle": {"type": "string"},
                                "volumeHandle": {"type": "string"},
                            },
                        },
                        "sourceVolumeMode": {"type": "string"},
                        "volumeSnapshotClassName": {"type": "string"},
                        "volumeSnapshotRef": {
                            "type": "object",
                            "x-kubernetes-map-type": "atomic",
                            "properties": {
                                k: {"type": "string"}
                                for k in (
                                    "apiVersion",
                                    "fieldPath",
                                    "kind",
                                    "name",
                                    "namespace",
                                    "resourceVersion",
                                    "uid",
                                )
                            },
                        },
                    },
                },
                "status": {
                    "type": "object",
                    "properties": {
                        "creationTime": {"type": "integer", "format": "int64"},
                        "error": _ERROR,
                        "readyToUse": {"type": "boolean"},
                        "restoreSize": {"type": "integer", "format": "int64", "minimum": 0},
                        "snapshotHandle": {"type": "string"},
                    },
                },
            },
        ),
    },
)

VOLUME_SNAPSHOT_CLASS = _crd(
    "VolumeSnapshotClass",
    "volumesnapshotclasses",
    ["vsclass", "vsclasses"],
    "Cluster",
    {
        "additionalPrinterColumns": [
            _col("Driver", "string", ".driver"),
            _col("DeletionPolicy", "string", ".deletionPolicy"),
            _col("Age", "date", ".metadata.creationTimestamp"),
        ],
        "schema": _schema(
            ["deletionPolicy", "driver"],
            {
                "deletionPolicy": {"type": "string", "enum": ["Delete", "Retain"]},
                "driver": {"type": "string"},
                "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        ),
    },
)

CRDS = (VOLUME_SNAPSHOT, VOLUME_SNAPSHOT_CONTENT, VOLUME_SNAPSHOT_CLASS)


async def install_snapshot_api(api: client.ApiClient, timeout: float = 60) -> None:
    """The snapshot CRDs and a default class, each only where the cluster lacks it (a cluster with its own
    snapshot controller keeps its own)."""
    ext = client.ApiextensionsV1Api(api)
    for body in CRDS:
        try:
            await ext.create_custom_resource_definition(body)
        except ApiException as e:
            if e.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for body in CRDS:
        while True:
            crd = await ext.read_custom_resource_definition(body["metadata"]["name"])
            if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {body['metadata']['name']} not established")
            await asyncio.sleep(0.1)
    cls = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VolumeSnapshotClass",
        "metadata": {
            "name": DEFAULT_CLASS,
            "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"},
        },
        "driver": DRIVER,
        "deletionPolicy": "Delete",
    }
    try:
        await client.CustomObjectsApi(api).create_cluster_custom_object(
            GROUP, VERSION, "volumesnapshotclasses", cls
        )
    except ApiException as e:
        if e.status != 409:
            raise


async def install_at(kubeconfig: str) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        await install_snapshot_api(api)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SnapshotEmulator:
    """Cuts VolumeSnapshots of the runner's volumes (directories under ``root/pvc``) into ``root/snapshots``."""

    def __init__(self, api: client.ApiClient, root: Path) -> None:
        self.api = api
        self.root = root
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.retrying: set[str] = set()  # snapshot uids tried again shortly
        self.tasks: set[asyncio.Task[None]] = set()

    def copy_of(self, uid: str) -> Path:
        return self.root / "snapshots" / uid

    async def run(self) -> None:
        await install_snapshot_api(self.api)
        while True:
            w = watch.Watch()
            try:
                async with w.stream(
                    self.custom.list_cluster_custom_object,
                    GROUP,
                    VERSION,
                    "volumesnapshots",
                    timeout_seconds=300,
                ) as stream:
                    async for ev in stream:
                        vs = ev["raw_object"]
                        if ev["type"] == "DELETED":
                            await self._deleted(vs)
                        elif not (vs.get("status") or {}).get("readyToUse") and (
                            vs["metadata"]["uid"] not in self.retrying  # its error's retry is on its way
                        ):
                            await self._cut(vs)
            except (TimeoutError, ApiException, OSError) as e:
                log.warning("VolumeSnapshot watch broke (%s); re-watching", e)
                await asyncio.sleep(1)

    async def _cut(self, vs: dict[str, Any]) -> None:
        meta, spec = vs["metadata"], vs.get("spec") or {}
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        if meta.get("deletionTimestamp"):
            return
        claim = (spec.get("source") or {}).get("persistentVolumeClaimName")
        if not claim:
            return await self._failed(
                vs, "only snapshots of a claim are emulated (no pre-provisioned content)"
            )
        src = self.root / "pvc" / ns / claim
        try:
            pvc = await self.core.read_namespaced_persistent_volume_claim(claim, ns)
        except ApiException as e:
            if e.status != 404:
                raise
            return await self._failed(vs, f"source claim {claim!r} does not exist", retry=True)
        if not pvc.spec.volume_name or not src.is_dir():
            return await self._failed(vs, f"source claim {claim!r} is not bound yet", retry=True)
        dst = self.copy_of(uid)
        shutil.rmtree(dst, ignore_errors=True)  # a copy cut short by a restart starts over
        dst.parent.mkdir(parents=True, exist_ok=True)
        proc = await asyncio.create_subprocess_exec(
            "cp", "-a", str(src), str(dst), stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            why = f"copying claim {claim!r} failed: {err.decode(errors='replace')[-500:]}"
            return await self._failed(vs, why, retry=True)
        size = ((pvc.status.capacity or {}) if pvc.status else {}).get("storage") or (
            (pvc.spec.resources.requests or {}).get("storage") if pvc.spec.resources else None
        )
        content = f"snapcontent-{uid}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content},
            "spec": {
                "deletionPolicy": "Delete",
                "driver": DRIVER,
                "source": {"volumeHandle": str(src)},
                "volumeSnapshotClassName": spec.get("volumeSnapshotClassName") or DEFAULT_CLASS,
                "volumeSnapshotRef": {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "VolumeSnapshot",
                    "name": name,
                    "namespace": ns,
                    "uid": uid,
                },
            },
        }
        try:
            await self.custom.create_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", body)
        except ApiException as e:
            if e.status != 409:
                raise
        await self.custom.patch_cluster_custom_object_status(
            GROUP,
            VERSION,
            "volumesnapshotcontents",
            content,
            {"status": {"readyToUse": True, "snapshotHandle": str(dst), "creationTime": time.time_ns()}},
            _content_type=MERGE,
        )
        status: dict[str, Any] = {
            "boundVolumeSnapshotContentName": content,
            "creationTime": _now(),
            "readyToUse": True,
            "error": None,
        }
        if size:
            status["restoreSize"] = size
        await self._status(ns, name, status)
        log.info("VolumeSnapshot %s/%s cut from claim %s", ns, name, claim)

    async def _failed(self, vs: dict[str, Any], why: str, retry: bool = False) -> None:
        meta = vs["metadata"]
        log.warning("VolumeSnapshot %s/%s: %s", meta["namespace"], meta["name"], why)
        await self._status(
            meta["namespace"], meta["name"], {"readyToUse": False, "error": {"message": why, "time": _now()}}
        )
        if retry and meta["uid"] not in self.retrying:
            self.retrying.add(meta["uid"])
            task = asyncio.create_task(self._again(meta["namespace"], meta["name"], meta["uid"]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _again(self, ns: str, name: str, uid: str) -> None:
        await asyncio.sleep(RETRY_SECONDS)
        self.retrying.discard(uid)
        try:
            vs = await self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "volumesnapshots", name)
        except ApiException as e:
            if e.status != 404:
                log.warning("retrying VolumeSnapshot %s/%s failed: %s", ns, name, e)
            return
        if vs["metadata"]["uid"] == uid and not (vs.get("status") or {}).get("readyToUse"):
            await self._cut(vs)

    async def _status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        try:
            await self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, "volumesnapshots", name, {"status": status}, _content_type=MERGE
            )
        except ApiException as e:
            if e.status != 404:
                raise

    async def _deleted(self, vs: dict[str, Any]) -> None:
        uid = vs["metadata"]["uid"]
        shutil.rmtree(self.copy_of(uid), ignore_errors=True)
        try:
            await self.custom.delete_cluster_custom_object(
                GROUP, VERSION, "volumesnapshotcontents", f"snapcontent-{uid}"
            )
        except ApiException as e:
            if e.status != 404:
                raise

    async def restore(self, pvc: dict[str, Any], snapshot: str, path: Path) -> str:
        """A new claim starts as a copy of ``snapshot``: "" when done (or done before), else why it waits."""
        meta = pvc["metadata"]
        try:
            await self.core.read_persistent_volume(f"local-{meta['uid']}")
            return ""  # provisioned (and copied) already: copying again would undo the pod's work
        except ApiException as e:
            if e.status != 404:
                raise
        try:
            vs = await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], "volumesnapshots", snapshot
            )
        except ApiException as e:
            if e.status != 404:
                raise
            return f"VolumeSnapshot {snapshot!r} does not exist"
        copy = self.copy_of(vs["metadata"]["uid"])
        if not (vs.get("status") or {}).get("readyToUse") or not copy.is_dir():
            return f"VolumeSnapshot {snapshot!r} is not ready to use"
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = await asyncio.create_subprocess_exec(
            "cp", "-a", str(copy), str(path), stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            return f"copying VolumeSnapshot {snapshot!r} failed: {err.decode(errors='replace')[-500:]}"
        log.info("PVC %s/%s restored from VolumeSnapshot %s", meta["namespace"], meta["name"], snapshot)
        return ""
