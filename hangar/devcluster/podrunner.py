"""The local pod runner: a development runtime that plays kubelet for one Node.

It registers a Node, keeps its Lease fresh, and runs each pod scheduled to it as local processes: the
container's command with the pod's environment (values, Secret and ConfigMap references, field refs), its
volumes as local directories (a PVC is a directory that outlives the pod, a Secret volume is its files),
and ``cp`` init containers emulated. It reports pod status as a kubelet would, and stops a pod's processes
when the pod is deleted. Images are not pulled: container paths of hangar's sandbox image are mapped to
local directories (``image_paths``), and an image volume's reference to a local directory that plays the
image's root (``image_volumes``). Production sandboxes are real pods; this runner is labelled as a
development runtime on its Node and in every pod's status.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from .snapshots import SnapshotEmulator

log = logging.getLogger("hangar.podrunner")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Watch events as decoded JSON: only ``raw_object`` is read, and building the typed models besides (the
# default) was a fifth of the runner's CPU, on the way of every pod's start.
RAW = "object"
VOLUME_WAIT = 10.0  # seconds a pod's start waits for a Secret or ConfigMap its volumes name
T = TypeVar("T")
RUNTIME_NOTE = "run by hangar's local pod runner (development runtime, not a kubelet)"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def exited(popen: subprocess.Popen[bytes]) -> int:
    """The process's exit code, awaited without holding a thread. (``asyncio.to_thread(popen.wait)`` per
    running pod used up the default executor — 6 threads on 2 cores — and then everything else that needs it,
    aiohttp's name resolution included, hung: the 7th pod's volume was never provisioned.)"""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): poll
        while popen.poll() is None:
            await asyncio.sleep(0.1)
        return popen.returncode
    try:
        done: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(fd, readable)
        try:
            if popen.poll() is None:
                await done
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)
    return popen.wait()


@dataclass
class PodProcess:
    key: str
    uid: str
    popen: subprocess.Popen[bytes] | None = None
    started: str = ""
    stopping: bool = False
    waiter: asyncio.Task[None] | None = None


@dataclass
class PodRunner:
    api: client.ApiClient
    root: Path
    node: str = "hangar-local"
    image_paths: dict[str, Path] = field(default_factory=dict)
    image_volumes: dict[str, Path] = field(default_factory=dict)  # image reference → its root, read-only
    namespace: str | None = None
    pods: dict[str, PodProcess] = field(default_factory=dict)
    clone_retries: set[str] = field(default_factory=set)  # PVC uids whose clone source is awaited
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @functools.cached_property
    def snapshots(self) -> SnapshotEmulator:  # VolumeSnapshots, emulated as clones are (snapshots.py)
        return SnapshotEmulator(self.api, self.root)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    # --- node ---------------------------------------------------------------------------------------------
    async def register_node(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node,
                "labels": {
                    "kubernetes.io/hostname": self.node,
                    "kubernetes.io/os": "linux",
                    "hangar.dev/runtime": "local-dev",
                },
                "annotations": {"hangar.dev/runtime": RUNTIME_NOTE},
            },
            "spec": {},
        }
        try:
            await self.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
        await self._node_status()

    async def _node_status(self) -> None:
        status = {
            "status": {
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"},
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "LocalRunnerReady",
                        "message": RUNTIME_NOTE,
                        "lastHeartbeatTime": now(),
                        "lastTransitionTime": now(),
                    },
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.node},
                ],
                "nodeInfo": {
                    "kubeletVersion": "hangar-local",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "containerRuntimeVersion": "local://processes",
                    "kernelVersion": os.uname().release,
                    "osImage": "local",
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            }
        }
        await self.core.patch_node_status(self.node, status)

    async def heartbeat(self) -> None:
        coord = client.CoordinationV1Api(self.api)
        while True:
            body = {
                "metadata": {"name": self.node, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": self.node,
                    "leaseDurationSeconds": 40,
                    "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                },
            }
            try:
                try:
                    await coord.patch_namespaced_lease(self.node, "kube-node-lease", body)
                except ApiException as e:
                    if e.status != 404:
                        raise
                    await coord.create_namespaced_lease("kube-node-lease", body)
                await self._node_status()
            except Exception as e:  # keep beating; the apiserver may be restarting
                log.warning("node heartbeat failed: %s", e)
            await asyncio.sleep(10)

    # --- pods ---------------------------------------------------------------------------------------------
    async def run(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        await self.register_node()
        beat = asyncio.create_task(self.heartbeat())
        volumes = asyncio.create_task(self._provision())
        snapshots = asyncio.create_task(self.snapshots.run())
        try:
            await self._fail_orphans()
            await self._watch()
        finally:
            beat.cancel()
            volumes.cancel()
            snapshots.cancel()
            await self.stop_all()

    # --- volumes: a tiny provisioner, so PVCs bind and the scheduler places pods that use them ----------
    def _pvc_dir(self, ns: str, claim: str) -> Path:
        return self.root / "pvc" / ns / claim

    async def _provision(self) -> None:
        while True:
            w = watch.Watch(return_type=RAW)
            try:
                async with w.stream(
                    self.core.list_persistent_volume_claim_for_all_namespaces, timeout_seconds=300
                ) as stream:
                    async for ev in stream:
                        pvc = ev["raw_object"]
                        if ev["type"] == "DELETED":
                            await self._release_volume(pvc)
                        elif (pvc.get("status") or {}).get("phase") == "Pending" and not pvc["spec"].get(
                            "volumeName"
                        ):
                            await self._bind_volume(pvc)
            except (TimeoutError, ApiException, OSError) as e:
                log.warning("PVC watch broke (%s); re-watching", e)
                await asyncio.sleep(1)

    async def _bind_volume(self, pvc: dict[str, Any]) -> None:
        meta = pvc["metadata"]
        path = self._pvc_dir(meta["namespace"], meta["name"])
        source = pvc["spec"].get("dataSource") or {}
        if source.get("kind") == "PersistentVolumeClaim" and not source.get("apiGroup"):
            if not await self._clone(pvc, source["name"], path):
                return  # stays Pending; retried
        elif source.get("kind") == "VolumeSnapshot":
            why = await self.snapshots.restore(pvc, source["name"], path)
            if why:
                await self._pvc_event(pvc, "ProvisioningFailed", f"cannot restore: {why}; retrying")
                self._retry_bind(meta["namespace"], meta["name"], meta["uid"])
                return
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o755)
        size = ((pvc["spec"].get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": f"local-{meta['uid']}",
                "labels": {"hangar.dev/runtime": "local-dev"},
                "annotations": {"hangar.dev/runtime": RUNTIME_NOTE},
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": pvc["spec"].get("storageClassName") or "",
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
                "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.node]}
                                ]
                            }
                        ]
                    }
                },
            },
        }
        try:
            await self.core.create_persistent_volume(pv)
        except ApiException as e:
            if e.status != 409:
                raise

    async def _clone(self, pvc: dict[str, Any], source: str, path: Path) -> bool:
        """Volume cloning, as a CSI driver does it: the new volume starts as a copy of the source claim's
        (``cp -a`` keeps owners and modes: the agent's files are uid 1001's). False while the source claim
        is missing or unbound: an Event says why and the claim is tried again in a few seconds."""
        meta = pvc["metadata"]
        ns = meta["namespace"]
        try:
            await self.core.read_persistent_volume(f"local-{meta['uid']}")
            return True  # provisioned (and copied) already: copying again would undo the pod's work
        except ApiException as e:
            if e.status != 404:
                raise
        src_dir = self._pvc_dir(ns, source)
        try:
            src = await self.core.read_namespaced_persistent_volume_claim(source, ns)
            why = (
                ""
                if src.spec.volume_name and src_dir.is_dir()
                else f"source claim {source!r} is not bound yet"
            )
        except ApiException as e:
            if e.status != 404:
                raise
            why = f"source claim {source!r} does not exist"
        if why:
            log.warning("PVC %s/%s waits: %s", ns, meta["name"], why)
            await self._pvc_event(pvc, "ProvisioningFailed", f"cannot clone: {why}; retrying")
            self._retry_bind(ns, meta["name"], meta["uid"])
            return False
        shutil.rmtree(path, ignore_errors=True)  # a copy cut short by a restart starts over
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = await asyncio.create_subprocess_exec(
            "cp", "-a", str(src_dir), str(path), stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            why = f"copying {source!r} failed: {err.decode(errors='replace')[-500:]}"
            log.warning("PVC %s/%s: %s", ns, meta["name"], why)
            await self._pvc_event(pvc, "ProvisioningFailed", why)
            self._retry_bind(ns, meta["name"], meta["uid"])
            return False
        log.info("PVC %s/%s cloned from %s", ns, meta["name"], source)
        return True

    def _retry_bind(self, ns: str, name: str, uid: str) -> None:
        if uid in self.clone_retries:
            return
        self.clone_retries.add(uid)

        async def retry() -> None:
            await asyncio.sleep(3)
            self.clone_retries.discard(uid)
            try:
                pvc = await self.core.read_namespaced_persistent_volume_claim(name, ns)
                if pvc.metadata.uid == uid and pvc.status.phase == "Pending" and not pvc.spec.volume_name:
                    await self._bind_volume(self.api.sanitize_for_serialization(pvc))
            except (ApiException, OSError) as e:
                if not isinstance(e, ApiException) or e.status != 404:  # 404: the claim was deleted
                    log.warning("retrying PVC %s/%s failed: %s", ns, name, e)

        task = asyncio.create_task(retry())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _pvc_event(self, pvc: dict[str, Any], reason: str, message: str) -> None:
        meta = pvc["metadata"]
        body = {
            # One event per claim and reason (the retries would flood the list otherwise).
            "metadata": {
                "name": f"{meta['name']}.{meta['uid'][:8]}.{reason.lower()}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "hangar-local-runner"},
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "count": 1,
        }
        try:
            await self.core.create_namespaced_event(meta["namespace"], body)
        except ApiException as e:
            if e.status != 409:
                log.warning("could not record an event for PVC %s: %s", meta["name"], e)

    async def _release_volume(self, pvc: dict[str, Any]) -> None:
        meta = pvc["metadata"]
        try:
            await self.core.delete_persistent_volume(f"local-{meta['uid']}")
        except ApiException as e:
            if e.status != 404:
                raise
        shutil.rmtree(self._pvc_dir(meta["namespace"], meta["name"]), ignore_errors=True)

    async def _fail_orphans(self) -> None:
        """Pods this node ran before a restart have no process any more: they failed."""
        pods = await self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}")
        for pod in pods.items:
            if pod.status and pod.status.phase == "Running":
                await self._set_status(
                    pod.metadata.namespace,
                    pod.metadata.name,
                    "Failed",
                    exit_code=137,
                    reason="RunnerRestarted",
                    message="the local pod runner restarted",
                )

    async def _watch(self) -> None:
        while True:
            w = watch.Watch(return_type=RAW)
            try:
                async with w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=f"spec.nodeName={self.node}",
                    timeout_seconds=300,
                ) as stream:
                    async for ev in stream:
                        await self._on_pod(ev["type"], ev["raw_object"])
            except (TimeoutError, ApiException, OSError) as e:
                log.warning("pod watch broke (%s); re-watching", e)
                await asyncio.sleep(1)

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if self.namespace and meta["namespace"] != self.namespace:
            return
        key = f"{meta['namespace']}/{meta['name']}"
        proc = self.pods.get(key)
        if proc is not None and proc.uid != meta["uid"]:
            self._stop(proc)
            self.pods.pop(key, None)
            proc = None
        if kind == "DELETED":
            if proc:
                self.pods.pop(key, None)
            self._stop(proc, cleanup=meta["uid"])
            return
        if meta.get("deletionTimestamp"):
            if proc and not proc.stopping:
                self._stop(proc)
            try:
                await self.core.delete_namespaced_pod(
                    meta["name"],
                    meta["namespace"],
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                    ),
                )
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
            return
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if proc is None and phase == "Pending":
            # Each pod starts (and stops) on its own task, as a kubelet's pod workers do: a pod that waits for
            # its Secret, or one slow to stop, holds up no other pod's start and no other event.
            proc = self.pods[key] = PodProcess(key, meta["uid"])
            self._in_task(self._start_pod(proc, pod))

    def _in_task(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("pod work failed")

        task = asyncio.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _stop(self, proc: PodProcess | None, cleanup: str = "") -> None:
        """Stop a pod's processes on a task of its own (``cleanup``: then remove the pod's directory). Marked
        stopping now, so a start still on its way does not run it."""
        if proc is not None:
            proc.stopping = True

        async def stop() -> None:
            if proc is not None:
                await self._kill(proc)
            if cleanup:
                self._cleanup(cleanup)

        self._in_task(stop())

    async def _start_pod(self, proc: PodProcess, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            await self._start(pod, proc)
        except Exception as e:
            if proc.stopping:  # deleted while it started: nothing to report
                self._cleanup(meta["uid"])
                return
            log.exception("could not start pod %s", proc.key)
            await self._set_status(
                meta["namespace"],
                meta["name"],
                "Failed",
                exit_code=128,
                reason="StartError",
                message=str(e)[:500],
            )

    def _pod_dir(self, uid: str) -> Path:
        return self.root / "pods" / uid

    def _cleanup(self, uid: str) -> None:
        shutil.rmtree(self._pod_dir(uid), ignore_errors=True)

    async def _volumes(self, pod: dict[str, Any], proc: PodProcess | None = None) -> dict[str, Path]:
        ns = pod["metadata"]["namespace"]
        out: dict[str, Path] = {}
        for vol in pod["spec"].get("volumes") or []:
            name = vol["name"]
            if "image" in vol:  # read-only: used as it is, never made or changed
                ref = vol["image"].get("reference", "")
                if ref not in self.image_volumes:
                    raise ValueError(
                        f"image volume {name}: no local copy of {ref} on the local runner (--image)"
                    )
                out[name] = self.image_volumes[ref]
                continue
            if "persistentVolumeClaim" in vol:
                path = self.root / "pvc" / ns / vol["persistentVolumeClaim"]["claimName"]
            elif "hostPath" in vol:
                path = Path(vol["hostPath"]["path"])
            else:
                path = self._pod_dir(pod["metadata"]["uid"]) / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o755)
            if "secret" in vol:
                secret = await self._awaited(
                    self.core.read_namespaced_secret, vol["secret"]["secretName"], ns, proc
                )
                mode = vol["secret"].get("defaultMode", 0o644)
                for k, v in (secret.data or {}).items():
                    f = path / k
                    f.write_bytes(base64.b64decode(v))
                    os.chmod(f, mode)
            elif "configMap" in vol:
                cm = await self._awaited(
                    self.core.read_namespaced_config_map, vol["configMap"]["name"], ns, proc
                )
                for k, v in (cm.data or {}).items():
                    (path / k).write_text(v)
            out[name] = path
        return out

    async def _awaited(
        self, read: Callable[[str, str], Awaitable[T]], name: str, ns: str, proc: PodProcess | None
    ) -> T:
        """A volume's Secret or ConfigMap, waited for while it does not exist yet, as a kubelet retries a
        mount (hangar makes a sandbox's run-key Secret beside its pod), on the pod's own task: up to
        ``VOLUME_WAIT`` seconds (then the pod fails to start; a kubelet would keep it ContainerCreating),
        or until the pod is deleted."""
        deadline = time.monotonic() + VOLUME_WAIT
        waited = False
        while True:
            try:
                return await read(name, ns)
            except ApiException as e:
                if e.status != 404 or time.monotonic() > deadline or (proc and proc.stopping):
                    raise
            if not waited:
                log.info("waiting for %s/%s, which a pod's volume names", ns, name)
                waited = True
            await asyncio.sleep(0.02)

    def _translate(self, mounts: dict[str, Path], value: str) -> str:
        """Rewrites container paths (mounts first, then image paths) to local ones, longest prefix first."""
        table = {**{k: v for k, v in self.image_paths.items()}, **mounts}
        for prefix in sorted(table, key=len, reverse=True):
            if value == prefix or value.startswith(prefix + "/"):
                return str(table[prefix]) + value[len(prefix) :]
        if ":" in value and "/" in value and "://" not in value:  # PATH-like lists
            return ":".join(self._translate(mounts, part) for part in value.split(":"))
        return value

    async def _env(self, pod: dict[str, Any], c: dict[str, Any], mounts: dict[str, Path]) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": pod["metadata"]["name"], "HOME": "/root"}
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "secretRef" in src:
                s = await self.core.read_namespaced_secret(src["secretRef"]["name"], ns)
                env.update({prefix + k: base64.b64decode(v).decode() for k, v in (s.data or {}).items()})
            elif "configMapRef" in src:
                cm = await self.core.read_namespaced_config_map(src["configMapRef"]["name"], ns)
                env.update({prefix + k: v for k, v in (cm.data or {}).items()})
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = self._translate(mounts, e["value"])
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "secretKeyRef" in vf:
                    s = await self.core.read_namespaced_secret(vf["secretKeyRef"]["name"], ns)
                    env[e["name"]] = base64.b64decode((s.data or {})[vf["secretKeyRef"]["key"]]).decode()
                elif "fieldRef" in vf:
                    fp = vf["fieldRef"]["fieldPath"]
                    env[e["name"]] = {
                        "metadata.name": pod["metadata"]["name"],
                        "metadata.namespace": ns,
                        "status.podIP": "127.0.0.1",
                        "spec.nodeName": self.node,
                    }.get(fp, "")
        return env

    def _mounts(self, c: dict[str, Any], vols: dict[str, Path]) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for m in c.get("volumeMounts") or []:
            local = vols[m["name"]]
            if m.get("subPath"):
                local = local / m["subPath"]
                # A read-only one that is there (an image volume's) stays as it is.
                if not (m.get("readOnly") and local.is_dir()):
                    local.mkdir(parents=True, exist_ok=True)
                    os.chmod(local, 0o755)
            out[m["mountPath"]] = local
        return out

    async def _start(self, pod: dict[str, Any], proc: PodProcess) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        key = proc.key
        vols = await self._volumes(pod, proc)
        for ic in spec.get("initContainers") or []:
            self._emulate_init(ic, self._mounts(ic, vols))
        c = spec["containers"][0]
        mounts = self._mounts(c, vols)
        env = await self._env(pod, c, mounts)
        argv = [self._translate(mounts, a) for a in (c.get("command") or []) + (c.get("args") or [])]
        if not argv:
            raise ValueError("a container without a command cannot run on the local runner (no image)")
        exe = shutil.which(argv[0], path=env["PATH"]) or argv[0]
        cwd = self._translate(mounts, c.get("workingDir") or "/")
        Path(cwd).mkdir(parents=True, exist_ok=True)
        logdir = self._pod_dir(meta["uid"])
        logdir.mkdir(parents=True, exist_ok=True)
        # Deleted while its volumes were made: never run (nothing awaits from here to Popen).
        if proc.stopping:
            self._cleanup(meta["uid"])
            return
        with (logdir / f"{c['name']}.log").open("ab") as fh:
            popen = subprocess.Popen(
                [exe, *argv[1:]],
                env=env,
                cwd=cwd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc.popen = popen
        proc.started = now()
        await self._set_status(
            meta["namespace"],
            meta["name"],
            "Running",
            container=c["name"],
            started=proc.started,
            inits=[i["name"] for i in spec.get("initContainers") or []],
        )
        proc.waiter = asyncio.create_task(self._wait(meta["namespace"], meta["name"], c["name"], proc))
        log.info("pod %s running as pid %s", key, popen.pid)

    def _emulate_init(self, ic: dict[str, Any], mounts: dict[str, Path]) -> None:
        cmd = ic.get("command") or []
        if len(cmd) == 4 and cmd[0] == "cp" and cmd[1] == "-a":
            src = self._translate(mounts, cmd[2].rstrip("."))
            dst = self._translate(mounts, cmd[3])
            shutil.copytree(src, dst, dirs_exist_ok=True)  # all of it, bytecode too, as `cp -a` does
            for dirpath, dirnames, filenames in os.walk(dst):
                for n in dirnames:
                    os.chmod(os.path.join(dirpath, n), 0o755)
                for n in filenames:
                    p = os.path.join(dirpath, n)
                    os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
            return
        raise ValueError(f"init container {ic['name']}: only 'cp -a SRC/. DST/' runs on the local runner")

    async def _wait(self, ns: str, name: str, cname: str, proc: PodProcess) -> None:
        assert proc.popen is not None
        code = await exited(proc.popen)
        if proc.stopping:
            return
        phase = "Succeeded" if code == 0 else "Failed"
        await self._set_status(
            ns,
            name,
            phase,
            container=cname,
            started=proc.started,
            exit_code=code if code >= 0 else 128 - code,
            reason="Completed" if code == 0 else "Error",
        )

    async def _kill(self, proc: PodProcess, grace: float = 5.0) -> None:
        proc.stopping = True
        p = proc.popen
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(int(grace / 0.1)):
            if p.poll() is not None:
                return
            await asyncio.sleep(0.1)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    async def stop_all(self) -> None:
        await asyncio.gather(*(self._kill(p, grace=2) for p in self.pods.values()), return_exceptions=True)

    async def _set_status(
        self,
        ns: str,
        name: str,
        phase: str,
        *,
        container: str = "sandbox",
        started: str = "",
        exit_code: int | None = None,
        reason: str = "",
        message: str = "",
        inits: list[str] | None = None,
    ) -> None:
        if phase == "Running":
            state: dict[str, Any] = {"running": {"startedAt": started}}
        elif phase in ("Succeeded", "Failed"):
            state = {
                "terminated": {
                    "exitCode": exit_code or 0,
                    "reason": reason,
                    "message": message,
                    "startedAt": started or now(),
                    "finishedAt": now(),
                }
            }
        else:
            state = {"waiting": {"reason": reason}}
        ready = "True" if phase == "Running" else "False"
        status: dict[str, Any] = {
            "phase": phase,
            "message": message or RUNTIME_NOTE,
            "reason": reason if phase != "Running" else None,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": started or now(),
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
                {"type": "Ready", "status": ready, "lastTransitionTime": now()},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now()},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()},
            ],
            "containerStatuses": [
                {
                    "name": container,
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": "local",
                    "imageID": "local",
                    "started": phase == "Running",
                    "state": state,
                }
            ],
        }
        if inits:
            status["initContainerStatuses"] = [
                {
                    "name": n,
                    "ready": True,
                    "restartCount": 0,
                    "image": "local",
                    "imageID": "local",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now(),
                            "finishedAt": now(),
                        }
                    },
                }
                for n in inits
            ]
        try:
            await self.core.patch_namespaced_pod_status(name, ns, {"status": status})
        except ApiException as e:
            if e.status != 404:
                raise
