"""Service pods on the local pod runner: hangar's own pod (the helm chart's Deployment) run the way a kubelet
would run it, so a chart installed on the local control plane is really exercised.

A pod whose every image is hangar's (``ghcr.io/hangar-dev/hangar``, any tag or digest) is a *service pod*.
Its image is not pulled: it maps to this machine's installation of hangar (:class:`LocalImage`: the
interpreter's ``bin`` directory first on PATH, ``hangar`` its entrypoint). Unlike sandbox pods (one
container, container paths rewritten to local ones), a service pod gets:

* every container, each a process in a mount namespace of its own (:mod:`.podns`) where the pod's volumes
  are bind-mounted at their container paths, run as the pod's ``runAsUser``/``runAsGroup``/``fsGroup``;
  init containers first, each to completion;
* the ServiceAccount token a kubelet mounts: the admission plugin's projected ``kube-api-access-…`` volume
  is filled from the TokenRequest API (bound to the pod, refreshed at 80% of its life), with the cluster's
  CA (ConfigMap ``kube-root-ca.crt``) and the namespace; ``KUBERNETES_SERVICE_HOST``/``_PORT`` point at the
  apiserver, so the processes authenticate as the pod's ServiceAccount and its RBAC is what they may do;
* probes (``httpGet``, ``tcpSocket``): startup gates the others, readiness sets the container's and the
  pod's Ready, liveness kills and restarts the container (restartPolicy Always, back-off 1 s doubling to
  30 s), with ``Unhealthy``/``Killing``/``BackOff`` Events as a kubelet posts them.

Processes share this machine's network: the chart's ports must be free ones (tests pass free ports as values).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..paths import repo_root
from .podrunner import DEFAULT_PATH, PodRunner, exited, now
from .servicepod_probes import check_probe
from .servicepod_volumes import fill_projected, group_owned, refresh_tokens

log = logging.getLogger("hangar.podrunner.service")

HANGAR_IMAGE = "ghcr.io/hangar-dev/hangar"
BACKOFF_MAX = 30.0


@dataclass(frozen=True)
class LocalImage:
    """What an image's config would give a container: PATH, entrypoint, default command, user."""

    path: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: int = 0
    # Host paths the image is made of, made reachable for a non-root user (podns's ``expose``).
    expose: tuple[str, ...] = ()


def local_hangar_image() -> LocalImage:
    """hangar's image, as this machine's installation (the venv hangar runs from); user 10001 as in
    images/hangar/Containerfile."""
    return LocalImage(
        path=f"{Path(sys.executable).parent}:{DEFAULT_PATH}",
        cmd=("hangar", "--help"),
        user=10001,
        expose=tuple(sorted({sys.base_prefix, sys.prefix, str(repo_root())})),
    )


def image_repository(image: str) -> str:
    """``repo[:tag][@digest]`` -> ``repo`` (a registry's ``host:port`` stays)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return name


@dataclass
class Container:
    name: str
    spec: dict[str, Any]
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started: bool = False
    ready: bool = False
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    killed_for: str = ""  # why the runner stopped it (a liveness failure), for the terminated state


@dataclass
class ServicePod:
    pod: dict[str, Any]
    containers: dict[str, Container] = field(default_factory=dict)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    stopping: bool = False

    @property
    def ns(self) -> str:
        return str(self.pod["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _terminated(code: int, reason: str = "", started: str = "") -> dict[str, Any]:
    code = code if code >= 0 else 128 - code
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": started or now(),
            "finishedAt": now(),
        }
    }


@dataclass
class ServicePodRunner(PodRunner):
    """The local pod runner, plus service pods (see the module's docstring); other pods run as before."""

    images: dict[str, LocalImage] = field(default_factory=lambda: {HANGAR_IMAGE: local_hangar_image()})
    service: dict[str, ServicePod] = field(default_factory=dict)

    def local_image(self, image: str) -> LocalImage | None:
        return self.images.get(image_repository(image))

    def is_service(self, pod: dict[str, Any]) -> bool:
        spec = pod["spec"]
        cs = (spec.get("initContainers") or []) + (spec.get("containers") or [])
        return bool(cs) and all(self.local_image(c.get("image", "")) for c in cs)

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        sp = self.service.get(key)
        if sp is None and (kind == "DELETED" or not self.is_service(pod)):
            await super()._on_pod(kind, pod)
            return
        if sp is not None and sp.uid != meta["uid"]:
            await self._stop_service(self.service.pop(key), grace=2)
            sp = None
        if kind == "DELETED":
            if sp is not None:
                await self._stop_service(self.service.pop(key), grace=2)
            self._cleanup(meta["uid"])
            return
        if meta.get("deletionTimestamp"):
            if sp is not None and not sp.stopping:
                grace = float(meta.get("deletionGracePeriodSeconds") or 30)
                sp.stopping = True
                task = asyncio.create_task(self._terminate(sp, grace))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif sp is None:
                await self._force_delete(pod)
            return
        if sp is None and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            sp = self.service[key] = ServicePod(pod)
            sp.spawn(self._run_service(sp))

    async def _terminate(self, sp: ServicePod, grace: float) -> None:
        """A deleted pod: its containers get SIGTERM and ``grace`` seconds, then the object goes."""
        await self._stop_service(sp, grace)
        self.service.pop(f"{sp.ns}/{sp.name}", None)
        await self._force_delete(sp.pod)

    async def _force_delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
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

    async def _stop_service(self, sp: ServicePod, grace: float) -> None:
        sp.stopping = True
        for t in list(sp.tasks):
            if t is not asyncio.current_task():
                t.cancel()
        await asyncio.gather(*(self._kill_container(c, grace) for c in sp.containers.values()))

    async def stop_all(self) -> None:
        await asyncio.gather(*(self._stop_service(sp, 2) for sp in self.service.values()))
        await super().stop_all()

    # --- start --------------------------------------------------------------------------------------------
    async def _run_service(self, sp: ServicePod) -> None:
        spec = sp.pod["spec"]
        try:
            vols = await self._volumes(sp.pod)
            projected = await fill_projected(self.core, sp.pod, vols)
            group_owned(sp.pod, vols)
            if projected:
                sp.spawn(refresh_tokens(self.core, sp.pod, projected))
            for ic in spec.get("initContainers") or []:
                if ic.get("restartPolicy") == "Always":
                    raise ValueError(
                        f"init container {ic['name']}: native sidecars don't run on the local runner"
                    )
                c = Container(ic["name"], ic)
                code = await exited(await self._spawn(sp, c, vols))
                if code != 0:
                    await self._status(
                        sp, phase="Failed", reason="Init:Error", message=f"{ic['name']} exited {code}"
                    )
                    return
            for cs in spec["containers"]:
                sp.containers[cs["name"]] = Container(cs["name"], cs)
            for c in sp.containers.values():
                sp.spawn(self._supervise(sp, c, vols))
        except Exception as e:
            log.exception("could not start service pod %s/%s", sp.ns, sp.name)
            await self._status(sp, phase="Failed", reason="StartError", message=str(e)[:500])

    def _user(self, sp: ServicePod, c: dict[str, Any]) -> tuple[int, int, list[int]]:
        psc = sp.pod["spec"].get("securityContext") or {}
        csc = c.get("securityContext") or {}
        image = self.local_image(c["image"])
        uid = csc.get("runAsUser", psc.get("runAsUser", image.user if image else 0))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", 0))
        if (csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True) and uid == 0:
            raise ValueError(f"container {c['name']} has runAsNonRoot and would run as root")
        groups = [
            gid,
            *([psc["fsGroup"]] if "fsGroup" in psc else []),
            *(psc.get("supplementalGroups") or []),
        ]
        return int(uid), int(gid), sorted({int(g) for g in groups})

    async def _spawn(self, sp: ServicePod, c: Container, vols: dict[str, Path]) -> subprocess.Popen[bytes]:
        spec = c.spec
        image = self.local_image(spec["image"])
        assert image is not None
        env = {"PATH": image.path, "HOME": "/"}
        env.update(await self._env(sp.pod, spec, {}))
        if not any(e["name"] == "PATH" for e in spec.get("env") or []):
            env["PATH"] = image.path
        host, port = self._apiserver()
        env.update(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port)
        argv = [
            *(spec.get("command") or image.entrypoint),
            *(spec.get("args") or ([] if spec.get("command") else image.cmd)),
        ]
        uid, gid, groups = self._user(sp, spec)
        mounts = []
        for m in spec.get("volumeMounts") or []:
            src = vols[m["name"]] / m["subPath"] if m.get("subPath") else vols[m["name"]]
            src.mkdir(parents=True, exist_ok=True)
            if m.get("subPath"):
                os.chown(src, 0, groups[-1] if len(groups) > 1 else gid)
                os.chmod(src, 0o2775)
            mounts.append({"source": str(src), "target": m["mountPath"], "readOnly": bool(m.get("readOnly"))})
        d = self._pod_dir(sp.uid)
        d.mkdir(parents=True, exist_ok=True)
        spec_file = d / f"{c.name}.spec.json"
        spec_file.write_text(
            json.dumps(
                {
                    "argv": argv,
                    "env": env,
                    "cwd": spec.get("workingDir") or "/",
                    "uid": uid,
                    "gid": gid,
                    "groups": groups,
                    "mounts": mounts,
                    "expose": list(image.expose),
                }
            )
        )
        os.chmod(spec_file, 0o600)  # it holds the pod's environment, secrets included
        with (d / f"{c.name}.log").open("ab") as fh:
            popen = subprocess.Popen(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    sys.executable,
                    "-m",
                    "hangar.devcluster.podns",
                    str(spec_file),
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        c.popen = popen
        log.info("pod %s/%s container %s running as pid %s", sp.ns, sp.name, c.name, popen.pid)
        return popen

    def _apiserver(self) -> tuple[str, str]:
        host = str(self.api.configuration.host).split("://", 1)[-1]
        name, _, port = host.rpartition(":")
        return (name, port) if name else (host, "443")

    # --- run, probe, restart ------------------------------------------------------------------------------
    async def _supervise(self, sp: ServicePod, c: Container, vols: dict[str, Path]) -> None:
        while not sp.stopping:
            started = now()
            try:
                popen = await self._spawn(sp, c, vols)
            except Exception as e:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)[:300]}}
                await self._status(sp)
                await self._event(sp, "Warning", "Failed", f"Error: {e}")
                await asyncio.sleep(self._backoff(c))
                continue
            c.state, c.started, c.ready, c.killed_for = {"running": {"startedAt": started}}, False, False, ""
            await self._status(sp)
            probes = asyncio.create_task(self._probe(sp, c))
            try:
                code = await exited(popen)
            finally:
                probes.cancel()
            if sp.stopping:
                return
            c.restarts += 1
            c.ready = c.started = False
            c.last_state = _terminated(code, c.killed_for, started)
            wait = self._backoff(c)
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {wait:.0f}s restarting {c.name}",
                }
            }
            await self._status(sp)
            await self._event(
                sp, "Warning", "BackOff", f"Back-off restarting container {c.name} (exit {code})", c
            )
            await asyncio.sleep(wait)

    @staticmethod
    def _backoff(c: Container) -> float:
        return min(BACKOFF_MAX, 2.0 ** max(0, c.restarts - 1))

    async def _probe(self, sp: ServicePod, c: Container) -> None:
        spec = c.spec
        startup = spec.get("startupProbe")
        if startup and not await self._until(sp, c, startup, "Startup", want=True):
            return
        c.started = True
        readiness, liveness = spec.get("readinessProbe"), spec.get("livenessProbe")
        if not readiness:
            c.ready = True
        await self._status(sp)
        tasks: list[asyncio.Task[Any]] = []
        if readiness:
            tasks.append(asyncio.create_task(self._readiness(sp, c, readiness)))
        if liveness:
            tasks.append(asyncio.create_task(self._until(sp, c, liveness, "Liveness", want=False)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def _until(
        self, sp: ServicePod, c: Container, probe: dict[str, Any], kind: str, want: bool
    ) -> bool:
        """Startup (``want``: until it passes) or liveness (until it fails): ``failureThreshold`` failures in
        a row kill the container for a restart (False)."""
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        fails = 0
        while True:
            ok, why = await self._check(c, probe)
            if ok and want:
                return True
            fails = 0 if ok else fails + 1
            if not ok:
                await self._event(sp, "Warning", "Unhealthy", f"{kind} probe failed: {why}", c)
            if fails >= int(probe.get("failureThreshold", 3)):
                msg = f"Container {c.name} failed {kind.lower()} probe, will be restarted"
                await self._event(sp, "Normal", "Killing", msg, c)
                c.killed_for = f"{kind}ProbeFailed"
                grace = probe.get(
                    "terminationGracePeriodSeconds", sp.pod["spec"].get("terminationGracePeriodSeconds", 30)
                )
                await self._kill_container(c, float(grace))
                return False
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    async def _readiness(self, sp: ServicePod, c: Container, probe: dict[str, Any]) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        oks = fails = 0
        while True:
            ok, why = await self._check(c, probe)
            oks, fails = (oks + 1, 0) if ok else (0, fails + 1)
            if not ok and c.ready and fails >= int(probe.get("failureThreshold", 3)):
                c.ready = False
                await self._event(sp, "Warning", "Unhealthy", f"Readiness probe failed: {why}", c)
                await self._status(sp)
            elif ok and not c.ready and oks >= int(probe.get("successThreshold", 1)):
                c.ready = True
                await self._status(sp)
            await asyncio.sleep(float(probe.get("periodSeconds", 10)))

    async def _check(self, c: Container, probe: dict[str, Any]) -> tuple[bool, str]:
        return await check_probe(c.name, c.spec, probe)

    async def _kill_container(self, c: Container, grace: float) -> None:
        p = c.popen
        if p is None or p.poll() is not None:
            return
        # Process group: the container's children (kopf's workers, uvicorn) go with it.
        for sig, wait in ((15, grace), (9, 5.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            for _ in range(max(1, int(wait / 0.1))):
                if p.poll() is not None:
                    return
                await asyncio.sleep(0.1)

    # --- report -------------------------------------------------------------------------------------------
    async def _status(
        self, sp: ServicePod, phase: str = "Running", reason: str = "", message: str = ""
    ) -> None:
        ready = bool(sp.containers) and all(c.ready for c in sp.containers.values())
        cond = "True" if ready else "False"
        status: dict[str, Any] = {
            "phase": phase,
            "reason": reason or None,
            "message": message or None,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": sp.pod.get("status", {}).get("startTime") or now(),
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True" if sp.containers else "False"},
                {"type": "ContainersReady", "status": cond},
                {"type": "Ready", "status": cond},
            ],
            "containerStatuses": [
                {
                    "name": c.name,
                    "ready": c.ready,
                    "started": c.started,
                    "restartCount": c.restarts,
                    "image": c.spec["image"],
                    "imageID": "local",
                    "state": c.state,
                    "lastState": c.last_state,
                }
                for c in sp.containers.values()
            ],
        }
        try:
            await self.core.patch_namespaced_pod_status(sp.name, sp.ns, {"status": status})
        except ApiException as e:
            if e.status != 404:
                log.warning("status of %s/%s: %s", sp.ns, sp.name, e)

    async def _event(
        self, sp: ServicePod, kind: str, reason: str, message: str, c: Container | None = None
    ) -> None:
        involved: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": sp.name,
            "namespace": sp.ns,
            "uid": sp.uid,
        }
        if c is not None:
            involved["fieldPath"] = f"spec.containers{{{c.name}}}"
        body = {
            "metadata": {"generateName": f"{sp.name}.", "namespace": sp.ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "hangar-local-runner", "host": self.node},
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "count": 1,
        }
        try:
            await self.core.create_namespaced_event(sp.ns, body)
        except ApiException as e:
            log.warning("event for %s/%s: %s", sp.ns, sp.name, e)
