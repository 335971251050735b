"""What a bench observes on the way, besides its figures: when model requests arrived, the CPU each process
spent and the apiserver's requests in a window, the sandbox driver's process, and when each pod was first seen
created, bound and Running."""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import _watch
from _apiserver import requests
from _kube import NAMESPACE
from kubernetes_asyncio import client

from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack

# -- model request stamps ------------------------------------------------------------------------------------------


class Stamps:
    """Wall-clock arrival times of model requests (the only step's ``when`` records them; it always matches)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[float] = []

    def __call__(self, req: Any) -> bool:
        with self.lock:
            self.items.append(time.time())
        return True

    def between(self, a: float, b: float) -> list[float]:
        with self.lock:
            return [t for t in self.items if a <= t <= b]


# -- CPU time per process: who burns the two cores during a sample -------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> tuple[float, float]:
    """(own, reaped children) CPU seconds of a process, from /proc/<pid>/stat; (0, 0) when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICK, (cutime + cstime) / TICK


class CpuMeter:
    """CPU seconds each named process spent between two snapshots. ``name+children`` counts what it reaped:
    for the sandbox driver that is the agent CLI it ran; for this bench, the floor CLI runs."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def snapshot(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, pid in self.pids.items():
            own, children = cpu_of(pid)
            out[name] = own
            if name == "sandbox driver":
                out["claude CLI (reaped by the driver)"] = children
            elif name == "bench":
                out["claude CLI (floor, reaped by the bench)"] = children
        return out

    @staticmethod
    def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: b[k] - a.get(k, 0.0) for k in b}


def find_driver(session: str) -> int | None:
    """The sandbox driver process of ``session`` (the local runner runs it as a process on this machine)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if b"hangar_driver" not in (d / "cmdline").read_bytes():
                continue
            if f"HANGAR_SESSION={session}".encode() in (d / "environ").read_bytes().split(b"\0"):
                return int(d.name)
        except OSError:
            continue
    return None


# -- pod watch: when each pod was first seen created, bound to the node, Running -----------------------------------


class PodTimes:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.seen: dict[str, dict[str, float]] = {}
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        # JSON only (``_watch``): it runs on the loop that times the samples, and hangar's samples make more pod
        # events than the floors' (a pool's refill, a claimed pod's relabel).
        await _watch.forever(self._seen, client.CoreV1Api(self.api).list_namespaced_pod, NAMESPACE)

    async def _seen(self, kind: str, pod: dict[str, Any]) -> None:
        now = time.time()
        d = self.seen.setdefault(pod["metadata"]["name"] + "/" + pod["metadata"]["uid"], {})
        d.setdefault("created", now)
        if pod.get("spec", {}).get("nodeName"):
            d.setdefault("bound", now)
        if (pod.get("status") or {}).get("phase") == "Running":
            d.setdefault("running", now)

    def of(self, name: str) -> dict[str, float]:
        for k, v in self.seen.items():
            if k.startswith(name + "/"):
                return v
        return {}

    def stages(self, name: str | None, w0: float) -> dict[str, float | None]:
        """Seconds from ``w0`` (wall clock) until pod ``name`` was seen created, bound and Running (None: not
        seen, or no pod), as every bench's samples report them."""
        pt = self.of(name) if name else {}
        at = {"to_pod_created": "created", "to_bound": "bound", "to_running": "running"}
        return {key: (pt[k] - w0) if k in pt else None for key, k in at.items()}


def cpu_meter(stack: Stack, cp: ControlPlane) -> CpuMeter:
    pids = {p.name: p.popen.pid for p in cp.processes}
    pids.update({f"hangar {n}": p.pid for n, p in stack.procs.items()})
    pids["bench"] = os.getpid()
    return CpuMeter(pids)


class Costs:
    """What a sample's timed window cost the machine: CPU seconds per process (``CpuMeter``) and the
    apiserver's requests by "verb resource" (its ``apiserver_request_total``), between ``mark()`` before the
    window and ``since()`` after it. The scrapes of /metrics lie outside the window; their own requests have
    no resource and are left out."""

    def __init__(self, cpu: CpuMeter, cp: ControlPlane) -> None:
        self.cpu = cpu
        self.cp = cp

    async def mark(self) -> tuple[dict[str, float], dict[str, float]]:
        reqs = await requests(self.cp)
        return self.cpu.snapshot(), reqs

    async def since(self, mark: tuple[dict[str, float], dict[str, float]]) -> dict[str, Any]:
        cpu = self.cpu.delta(mark[0], self.cpu.snapshot())
        after = await requests(self.cp)
        reqs = {k: v - mark[1].get(k, 0.0) for k, v in after.items() if not k.endswith(" ")}
        return {"cpu": cpu, "requests": {k: v for k, v in reqs.items() if v}}


def costs_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Over samples that carry ``costs``: CPU seconds per process summed, requests a sample (mean) by kind."""
    costed = [x["costs"] for x in samples if x.get("costs")]
    if not costed:
        return {}
    cpu: dict[str, float] = {}
    reqs: dict[str, float] = {}
    for c in costed:
        for k, v in c["cpu"].items():
            cpu[k] = cpu.get(k, 0.0) + v
        for k, v in c["requests"].items():
            reqs[k] = reqs.get(k, 0.0) + v / len(costed)
    return {"n": len(costed), "cpu_s": cpu, "requests_per_sample": reqs}


def cpu_medians(samples: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for s in samples for k in s})
    return {k: statistics.median([s.get(k, 0.0) for s in samples]) for k in keys}
