"""Side by side with agent-sandbox: create → ready for N agent-sandbox Sandboxes and N hangar sessions,
alternately, on the same control plane and the same local pod runner, as a ratio.

Run: .venv/bin/python bench/sandbox_compare.py [--n 15] [--pools] [--hangar-pool] [--with-volume] [--no-settle]
[--json] [--keep-logs]

- **hangar**: ``POST /api/sessions`` (no message) → the Session's ``status.sandbox.connected`` is true: the
  operator has made the run-key Secret, the workspace PVC and the pod, the runner has run it, and the driver
  in it has dialled the gateway and said a signed hello.
- **agent-sandbox**: a ``Sandbox`` (v1beta1) whose pod runs ``python3 -c 'import time; time.sleep(600)'`` →
  its ``Ready`` condition is true (the controller made the pod and its Service; the runner ran the pod).
- Both are seen by a watch on the object (``--ready poll``: polled on the apiserver every ``--poll`` seconds,
  default 0.02, as before), one sample at a time, hangar and agent-sandbox alternating so that a burst of load on the shared machine hits both alike. Each object is
  deleted, and gone with its pod, before the next sample. One warm-up of each is not counted.
- ``--pools``: the same again from warm pools. agent-sandbox: a ``SandboxTemplate`` and a ``SandboxWarmPool``
  of ``--pool-size`` (default 2), each sample a ``SandboxClaim`` → its ``Ready`` condition (the pool refills
  before the next sample). hangar: with ``--hangar-pool`` a second Environment keeps a warm pool
  (``spec.warmPool``) of the same size, full before each sample; without it ``--pools`` compares agent-sandbox's
  pool against hangar without one.
- ``--with-volume``: also hangar without a pool against a ``Sandbox`` whose pod mounts a claim made from a
  ``volumeClaimTemplates`` entry with the spec of hangar's workspace claim (size, access mode, storage class):
  both sides then wait for a volume to be provisioned and bound before their pod is placed.
- Where each side's time goes (the runs without pools): medians of when the bench's pod watch first saw the
  sample's pod created, bound to the node and Running, from the sample's first call, and the end (ready). Both
  sides' pods pass the same scheduler and runner; what lies between those stamps is each side's own.
- Before every sample of either side the machine settles (``bench/_settle.py``): this bench's own processes
  (control plane, stack, pods, agent-sandbox's controller) quiet, so no sample runs while the previous one's
  refill or pre-started CLI still starts. ``--no-settle``: back to back, as before 2026-12-02 07:00.

The agent-sandbox controller is built once from the Go module proxy (``sigs.k8s.io/agent-sandbox@v0.5.2``,
several minutes) and cached under ~/.cache/hangar (``bench/_agent_sandbox.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import _agent_sandbox
from _kube import NAMESPACE, TIMEOUT, Check, Cluster, bare_pod_spec, ready_condition
from _observe import PodTimes
from _settle import settle
from _stack import bench_run, claude_env, driver_mount_flag, header, print_result, use_driver_mount
from _stats import log, med, summary
from _watch import call

from hangar.config import Settings
from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step
from hangar_operator.sandbox_objects import workspace_pvc

ENVIRONMENT = "bench-compare"
POOL_ENVIRONMENT = "bench-compare-warm"  # the same Environment with spec.warmPool (--hangar-pool)
SB_GROUP, SB_VERSION = "agents.x-k8s.io", "v1beta1"
EXT_GROUP = "extensions.agents.x-k8s.io"
STAGES = ("to_pod_created", "to_bound", "to_running", "total")


def workspace_spec() -> dict[str, Any]:
    """The spec of the workspace claim hangar's operator makes for a session (the stack's defaults)."""
    session = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": "bench", "namespace": NAMESPACE, "uid": "bench"},
        "spec": {},
    }
    spec: dict[str, Any] = workspace_pvc(session, Settings())["spec"]
    return spec


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


ready = ready_condition


class Compare(Cluster):
    def __init__(self, stack: Stack, kubeconfig: Path, work: Path, poll: float, how: str = "watch") -> None:
        super().__init__(stack, kubeconfig)
        self.work = work
        self.poll = poll
        self.how = how  # how "ready" is seen, on both sides: "watch" or "poll" (every `poll` seconds)
        self.settle = True  # before each sample, this bench's processes quiet (_settle.py); --no-settle: off
        self.settled: list[float] = []
        self.pod_of: str | None = None  # the last sample's pod (None: a claim's, made before the sample)
        self.w0 = 0.0  # the last sample's first call, wall clock (the pod watch's stamps are wall clock)

    async def __aenter__(self) -> Compare:
        await super().__aenter__()
        self.pods = PodTimes(self.kapi)
        self.pods.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pods.stop()
        await super().__aexit__(*exc)

    async def environment(self, model: ScriptedModel, name: str = ENVIRONMENT, **spec: Any) -> None:
        await self.create_environment(name, claude_env(model), **spec)

    async def hangar_pool_full(self, size: int) -> None:
        def full(e: dict[str, Any]) -> bool:
            return int(((e.get("status") or {}).get("pool") or {}).get("ready") or 0) >= size

        await self._until("hangar.dev", "v1alpha1", "environments", POOL_ENVIRONMENT, full)

    async def hangar_claim(self, name: str, size: int) -> float:
        """A session from hangar's pool, the pool full first (as agent-sandbox's is before each claim)."""
        await self.hangar_pool_full(size)
        return await self.hangar(name, POOL_ENVIRONMENT)

    def pod_spec(self) -> dict[str, Any]:
        # Under the stack root, so stop_all() reaches a leftover process.
        return bare_pod_spec(self.work / "sandbox-pods", 600)

    # -- ready: watched (or polled) ----------------------------------------------------------------------

    async def _until(self, group: str, version: str, plural: str, name: str, check: Check) -> None:
        if self.how == "watch":
            await self.until_custom(group, version, plural, name, check)
            return
        t0 = time.monotonic()
        while not check(await self.get_custom(group, version, plural, name) or {}):
            if time.monotonic() - t0 > TIMEOUT:
                raise TimeoutError(f"{plural}/{name} not ready after {TIMEOUT}s")
            await asyncio.sleep(self.poll)

    async def _gone(self, group: str, version: str, plural: str, name: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if await self.get_custom(group, version, plural, name) is None:
                pods = await self.core.list_namespaced_pod(NAMESPACE)
                if not any(name in (p.metadata.name or "") for p in pods.items):
                    return
            await asyncio.sleep(0.1)
        log(f"warning: {plural}/{name} or its pod still there 60 s after the delete")

    # -- samples ---------------------------------------------------------------------------------------------

    async def hangar(self, name: str, environment: str = ENVIRONMENT) -> float:
        self.w0, t0 = time.time(), time.monotonic()
        r = await self.http.post(
            "/api/sessions", json={"name": name, "environment": environment, "harness": "claude"}
        )
        if r.status_code != 201:
            raise RuntimeError(f"POST /api/sessions: {r.status_code} {r.text}")

        def connected(s: dict[str, Any]) -> bool:
            sandbox = (s.get("status") or {}).get("sandbox") or {}
            self.pod_of = sandbox.get("pod") if environment == ENVIRONMENT else None
            return bool(sandbox.get("connected"))

        await self._until("hangar.dev", "v1alpha1", "sessions", name, connected)
        took = time.monotonic() - t0
        await self.http.delete(f"/api/sessions/{name}")
        await self._gone("hangar.dev", "v1alpha1", "sessions", name)
        return took

    async def sandbox(self, name: str, volume: bool = False) -> float:
        spec: dict[str, Any] = {"podTemplate": {"spec": self.pod_spec()}}
        if volume:
            # The workspace claim hangar makes for a session (its size, access mode and storage class), from
            # a volumeClaimTemplate: the controller makes the claim, then the pod, as hangar's operator does.
            spec["volumeClaimTemplates"] = [{"metadata": {"name": "workspace"}, "spec": workspace_spec()}]
            spec["podTemplate"]["spec"]["containers"][0]["volumeMounts"] = [
                {"name": "workspace", "mountPath": "/workspace"}
            ]
        body = {
            "apiVersion": f"{SB_GROUP}/{SB_VERSION}",
            "kind": "Sandbox",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.w0, t0 = time.time(), time.monotonic()
        self.pod_of = name  # agent-sandbox names a Sandbox's pod after it
        await call(
            self.custom.create_namespaced_custom_object, SB_GROUP, SB_VERSION, NAMESPACE, "sandboxes", body
        )

        await self._until(SB_GROUP, SB_VERSION, "sandboxes", name, ready)
        took = time.monotonic() - t0
        await self.custom.delete_namespaced_custom_object(SB_GROUP, SB_VERSION, NAMESPACE, "sandboxes", name)
        await self._gone(SB_GROUP, SB_VERSION, "sandboxes", name)
        return took

    async def warm_pool(self, size: int) -> None:
        template = {
            "apiVersion": f"{EXT_GROUP}/{SB_VERSION}",
            "kind": "SandboxTemplate",
            "metadata": {"name": "bench-template"},
            "spec": {"podTemplate": {"spec": self.pod_spec()}},
        }
        await self.custom.create_namespaced_custom_object(
            EXT_GROUP, SB_VERSION, NAMESPACE, "sandboxtemplates", template
        )
        pool = {
            "apiVersion": f"{EXT_GROUP}/{SB_VERSION}",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "bench-pool"},
            "spec": {"replicas": size, "sandboxTemplateRef": {"name": "bench-template"}},
        }
        await self.custom.create_namespaced_custom_object(
            EXT_GROUP, SB_VERSION, NAMESPACE, "sandboxwarmpools", pool
        )
        await self.pool_full(size)

    async def pool_full(self, size: int) -> None:
        def full(p: dict[str, Any]) -> bool:
            return int((p.get("status") or {}).get("readyReplicas") or 0) >= size

        await self._until(EXT_GROUP, SB_VERSION, "sandboxwarmpools", "bench-pool", full)

    async def claim(self, name: str, size: int) -> float:
        body = {
            "apiVersion": f"{EXT_GROUP}/{SB_VERSION}",
            "kind": "SandboxClaim",
            "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": "bench-pool"}},
        }
        t0 = time.monotonic()
        self.pod_of = None
        await call(
            self.custom.create_namespaced_custom_object,
            EXT_GROUP,
            SB_VERSION,
            NAMESPACE,
            "sandboxclaims",
            body,
        )

        await self._until(EXT_GROUP, SB_VERSION, "sandboxclaims", name, ready)
        took = time.monotonic() - t0
        await self.custom.delete_namespaced_custom_object(
            EXT_GROUP, SB_VERSION, NAMESPACE, "sandboxclaims", name
        )
        await self.pool_full(size)  # refilled before the next sample, as hangar's pool is
        return took

    async def interleaved(self, n: int, hangar_side: Any, peer_side: Any, label: str) -> dict[str, Any]:
        log(f"{label}: warm-up")
        await hangar_side(f"{label}-hw")
        await peer_side(f"{label}-sw")
        h: list[float] = []
        s: list[float] = []
        stages: dict[str, list[dict[str, float | None]]] = {"hangar": [], "agent_sandbox": []}
        for i in range(n):
            # Which side goes first alternates too: neither always follows the other's clean-up.
            sides = [("h", hangar_side), ("s", peer_side)]
            if i % 2:
                sides.reverse()
            for side, fn in sides:
                if self.settle:  # both sides alike: what the previous sample set off has finished
                    self.settled.append(await settle())
                took = await fn(f"{label}-{side}{i}")
                (h if side == "h" else s).append(took)
                if self.pod_of is not None:  # read after the sample is gone: every pod event has come
                    stages["hangar" if side == "h" else "agent_sandbox"].append(
                        {**self.pods.stages(self.pod_of, self.w0), "total": took}
                    )
            log(f"{label} {i + 1}/{n}: hangar {h[-1]:.3f} s, agent-sandbox {s[-1]:.3f} s")
        hs, ss = summary(h), summary(s)
        return {
            "hangar_s": hs,
            "agent_sandbox_s": ss,
            "ratio_p50": ratio(hs["p50"], ss["p50"]),
            "ratio_p99": ratio(hs["p99"], ss["p99"]),
            "samples": {"hangar": h, "agent_sandbox": s},
            # Medians, seconds from each sample's first call (None: no pod made in the sample, a claim's).
            "stages": {k: {st: med([x.get(st) for x in v]) for st in STAGES} for k, v in stages.items() if v},
        }


def table(out: dict[str, Any]) -> str:
    lines = [
        f"# hangar vs agent-sandbox {_agent_sandbox.VERSION}: create → ready ({out['machine']}; hangar's driver: "
        f"{out['args']['driver_mount']})",
        "",
        "| run | hangar p50 / p99 | agent-sandbox p50 / p99 | ratio p50 / p99 |",
        "|---|---|---|---|",
    ]
    for key, label in (
        ("cold", "no pools"),
        ("cold_volume", "no pools, agent-sandbox's Sandbox with hangar's workspace claim"),
        ("pools", "warm pools"),
    ):
        r = out.get(key)
        if not r:
            continue
        h, s = r["hangar_s"], r["agent_sandbox_s"]
        lines.append(
            f"| {label}{r.get('note', '')} | {h['p50']:.3f} / {h['p99']:.3f} s | {s['p50']:.3f} / {s['p99']:.3f} s"
            f" | **{r['ratio_p50']}x** / {r['ratio_p99']}x |"
        )
    for key, label in (("cold", "no pools"), ("cold_volume", "no pools, with hangar's workspace claim")):
        stages = (out.get(key) or {}).get("stages") or {}
        if len(stages) < 2:
            continue
        lines += [
            "",
            f"where the time goes, {label}:",
            "",
            "| median seconds from the first call | hangar | agent-sandbox |",
            "|---|---|---|",
        ]
        for st in STAGES:
            cells = [stages[k].get(st) for k in ("hangar", "agent_sandbox")]
            lines.append(f"| {st} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    st = out.get("settled")
    lines.append(
        "\nbefore each sample, both sides: "
        + (
            f"this bench's processes quiet (waited {st['p50']:.2f} s p50, {st['max']:.2f} s max)"
            if st
            else "nothing (--no-settle)"
        )
    )
    lines.append(f"load average at the end: {out.get('load_end')}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=15, help="samples of each side per run (default 15)")
    ap.add_argument("--pools", action="store_true", help="also compare from warm pools")
    ap.add_argument("--pool-size", type=int, default=2, help="warm pool size on both sides (default 2)")
    ap.add_argument(
        "--hangar-pool",
        action="store_true",
        help="with --pools: hangar's side from its own warm pool (Environment spec.warmPool)",
    )
    ap.add_argument(
        "--with-volume",
        action="store_true",
        help="also hangar without a pool against a Sandbox with a workspace claim like hangar's "
        "(volumeClaimTemplates): the same volume work on both sides",
    )
    ap.add_argument("--poll", type=float, default=0.02, help="seconds between polls, both sides")
    ap.add_argument(
        "--ready",
        choices=("watch", "poll"),
        default="watch",
        help="how ready is seen on both sides: a watch (default) or a poll every --poll s",
    )
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="samples back to back (before 2026-12-02 07:00): no wait for this bench's processes to be quiet",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-logs", action="store_true")
    driver_mount_flag(ap)
    a = ap.parse_args()
    use_driver_mount(a)
    if a.hangar_pool and not a.pools:
        print("--hangar-pool goes with --pools", file=sys.stderr)
        return 2
    _agent_sandbox.ensure()
    res = header(
        {
            "n": a.n,
            "pools": a.pools,
            "pool_size": a.pool_size,
            "poll": a.poll,
            "ready": a.ready,
            "settle": not a.no_settle,
            "with_volume": a.with_volume,
            "driver_mount": a.driver_mount or "init-copy",
        }
    )
    try:
        with bench_run(a.keep_logs) as br:
            cp, stack = br.start()
            asyncio.run(_agent_sandbox.install_crds(cp.kubeconfig))
            ctl = _agent_sandbox.start_controller(cp.kubeconfig, br.root / "agent-sandbox.log")
            model = br.model(ScriptedModel([Step(text="FINAL: ok", repeat=True, name="compare")]))
            try:

                async def run() -> None:
                    async with Compare(stack, cp.kubeconfig, br.root / "compare", a.poll, a.ready) as c:
                        c.settle = not a.no_settle
                        await c.wait_node()
                        await c.environment(model)
                        res["cold"] = await c.interleaved(a.n, c.hangar, c.sandbox, "cold")
                        if a.with_volume:

                            async def sandbox_with_volume(name: str) -> float:
                                return await c.sandbox(name, volume=True)

                            res["cold_volume"] = await c.interleaved(
                                a.n, c.hangar, sandbox_with_volume, "vol"
                            )
                        if a.pools:
                            await c.warm_pool(a.pool_size)

                            async def claim(name: str) -> float:
                                return await c.claim(name, a.pool_size)

                            async def hangar_claim(name: str) -> float:
                                return await c.hangar_claim(name, a.pool_size)

                            if a.hangar_pool:
                                await c.environment(model, POOL_ENVIRONMENT, warmPool={"size": a.pool_size})
                                res["pools"] = await c.interleaved(a.n, hangar_claim, claim, "pool")
                            else:
                                res["pools"] = await c.interleaved(a.n, c.hangar, claim, "pool")
                                res["pools"]["note"] = " (hangar without a pool)"
                        res["settled"] = summary(c.settled) if c.settled else None

                asyncio.run(run())
            finally:
                ctl.terminate()
                ctl.wait(10)
    except KeyboardInterrupt:
        log("interrupted: cleaned up")
        return 130
    res["load_end"] = round(os.getloadavg()[0], 2)
    return print_result(res, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
