"""Warm sandbox pools: a session's connect latency from a warm pool, beside a bare pod and a cold session.

Run: .venv/bin/python bench/warm_pool.py [--sessions N] [--size N] [--no-cold] [--no-dial] [--no-settle] [--json]
[--ready watch|poll] [--poll S] [--keep-logs]

The same machinery as ``bench/sessions.py`` (a local control plane, a Stack, the scripted model; every
sample's end seen by a watch, or with ``--ready poll`` polled every ``--poll`` seconds). Four kinds of sample,
interleaved (bare pod i, dial i, warm i, cold i) so load from elsewhere hits all alike; one warm-up of each
first, not counted:

- **warm**: ``POST /api/sessions`` to an Environment with ``spec.warmPool: {size: N}`` → ``sandbox.connected``.
  Before each sample the bench waits until the pool has a ready member (status.pool.ready ≥ 1), so it
  measures a claim, not a refill.
- **cold**: the same to an Environment without a pool (today's path: Secret, PVC, pod, driver start).
- **floor**: a bare pod (``python3 -c 'import time; time.sleep(60)'``, no volumes), create → Running.
- **dial**: the floor of a cold session (``bench/_dial_floor.py``): a Secret, a PVC and a pod made as hangar
  makes a sandbox's (the same volumes, the init copy of the driver, the same storage class), whose
  ``python3 -c`` dials a listener of this bench and sends one line; create of the Secret → the line arrives.

Each session is deleted (and its pod gone) before the next sample. Then, before every sample of every kind
alike, the machine settles (``bench/_settle.py``): the warm pool is full again (its refill done, not only one
member ready) and this bench's own processes (control plane, stack, pods) are quiet, so no sample runs while
the previous one's refill or pre-started CLI still starts. ``--no-settle``: back to back, as before
2026-12-02 07:00. The issue's goals: warm / floor ≤ 1.0x, cold / dial ≤ 1.3x.

Turning a pool on from another benchmark is one Environment field: ``spec.warmPool: {size: N}`` (optional
``maxAgeSeconds``, ``harness``); wait for ``status.pool.ready`` before timing a claim.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _kube import NAMESPACE
from _settle import settle
from _stack import claude_missing, header, print_result  # bench/ is on sys.path
from _stats import log, med, summary
from sessions import Bench, connect_flags, with_bench

WARM, COLD = "bench-warm", "bench-cold"


class PoolBench(Bench):
    env_name = WARM
    connected_at_claim = 0  # warm sessions whose claim saw the driver back and wrote connected itself
    pool_size = 2
    settle = True  # before each sample: the pool full and this bench's processes quiet (_settle.py)
    settled: list[float] = []  # seconds waited for the CPU to settle, each sample

    async def delete_session(self, name: str, pod: str | None) -> None:
        await super().delete_session(name, pod)
        if self.env_name == WARM:
            # Read once the session is gone: the claim posts its Events after its status write, and a read
            # right after the write was seen could come before them.
            evs = await self.core.list_namespaced_event(
                NAMESPACE, field_selector=f"involvedObject.name={name},reason=SandboxConnected"
            )
            self.connected_at_claim += any("warm sandbox" in (e.message or "") for e in evs.items)

    async def create_session(self, name: str, model: str | None = None, message: str | None = None) -> float:
        body: dict[str, Any] = {"name": name, "environment": self.env_name, "harness": "claude"}
        if message:
            body["message"] = message
        t0 = time.monotonic()
        r = await self.http.post("/api/sessions", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"POST /api/sessions: {r.status_code} {r.text}")
        return t0

    async def pool_ready(self, at_least: int = 1) -> None:
        def ready(env: dict[str, Any]) -> bool:
            return int(((env.get("status") or {}).get("pool") or {}).get("ready") or 0) >= at_least

        await self.until_custom("hangar.dev", "v1alpha1", "environments", WARM, ready)

    async def sample(self, kind: str, i: int) -> dict[str, Any]:
        if self.settle:  # every kind alike: the previous sample's refill and CLI start done
            if self.pool_size:  # bench/cold.py has no pool
                await self.pool_ready(self.pool_size)
            self.settled.append(await settle())
        if kind == "floor":
            return await self.floor_pod(i)
        if kind == "dial":
            return await self.floor_dial(i)
        self.env_name = WARM if kind == "warm" else COLD
        if kind == "warm":
            await self.pool_ready()
        return await self.connect_sample(i if kind == "warm" else 1000 + i)

    async def run(self, n: int, cold: bool, dial: bool = True) -> dict[str, list[dict[str, Any]]]:
        kinds = ["floor"] + (["dial"] if dial else []) + ["warm"] + (["cold"] if cold else [])
        log("warm-up (not counted)")
        for k in kinds:
            await self.sample(k, -1 - kinds.index(k))
        out: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for i in range(n):
            line = []
            for k in kinds:
                s = await self.sample(k, i)
                out[k].append(s)
                line.append(f"{k} {s['total']:.3f} s")
            log(f"{i + 1}/{n}: " + "   ".join(line))
        return out


def report(res: dict[str, Any]) -> dict[str, Any]:
    samples = res["samples"]
    figures = {k: summary([x["total"] for x in v]) for k, v in samples.items()}
    floor = figures["floor"]
    ratios = {
        f"{k} / floor": {"p50": f["p50"] / floor["p50"], "p99": f["p99"] / floor["p99"]}
        for k, f in figures.items()
        if k not in ("floor", "dial")
    }
    if "cold" in figures and "dial" in figures:  # the goal of a session without a pool: ≤ 1.3x
        c, d = figures["cold"], figures["dial"]
        ratios["cold / dial"] = {"p50": c["p50"] / d["p50"], "p99": c["p99"] / d["p99"]}
    W = samples["warm"]
    breakdown = {
        "warm: POST /api/sessions returned": med([x["post"] for x in W]),
        "warm: claimed, driver back: status write begun (startedAt)": med(
            [x["to_status_started"] for x in W]
        ),
        "warm: driver_connected recorded by the operator": med([x["to_driver_connected_event"] for x in W]),
        "warm: session sandbox.connected (poll)": med([x["total"] for x in W]),
        "floor: bare pod Running (watch)": med([x["to_running"] for x in samples["floor"]]),
        "floor: bare pod Running (poll)": med([x["total"] for x in samples["floor"]]),
    }
    if "dial" in samples:
        breakdown["dial: Secret, PVC and pod created"] = med(
            [x["to_objects_created"] for x in samples["dial"]]
        )
    return {
        "date": res["date"],
        "machine": res["machine"],
        "figures": figures,
        "connected_at_claim": res.get("connected_at_claim"),
        "settle": res.get("settle"),
        "ratios": ratios,
        "breakdown": breakdown,
    }


def table(out: dict[str, Any]) -> str:
    lines = [f"hangar bench/warm_pool.py — {out['date']} — {out['machine']}", ""]
    labels = {
        "floor": "bare pod create → Running",
        "warm": "session from a warm pool → sandbox.connected",
        "cold": "session without a pool → sandbox.connected",
        "dial": "pod like hangar's → dialled the bench",
    }
    lines.append(f"{'figure (seconds)':48} {'n':>3} {'p50':>7} {'p99':>7}")
    for k, f in out["figures"].items():
        lines.append(f"{labels[k]:48} {f['n']:3d} {f['p50']:7.3f} {f['p99']:7.3f}")
    lines.append("")
    for k, r in out["ratios"].items():
        lines.append(f"{k:48}     {r['p50']:6.2f}x {r['p99']:6.2f}x")
    lines += ["", "where the time goes (medians, seconds since the request was sent):"]
    for label, v in out["breakdown"].items():
        lines.append(f"  {label:58} {'-' if v is None else f'{v:8.3f}'}")
    lines.append(
        f"warm sessions whose claim saw the driver back (one status write): {out['connected_at_claim']} "
        "(the warm-up included)"
    )
    st = out.get("settle")
    lines.append(
        "before each sample: "
        + (
            f"the pool full and the bench's processes quiet (waited {st['p50']:.2f} s p50, {st['p99']:.2f} s max)"
            if st
            else "nothing (--no-settle: back to back)"
        )
    )
    lines.append("(p99 is nearest-rank: below 100 samples it is the maximum)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=15, help="samples of each kind (default 15)")
    ap.add_argument("--size", type=int, default=2, help="the warm pool's size (default 2)")
    ap.add_argument("--no-cold", action="store_true", help="skip the sessions without a pool")
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="samples back to back (before 2026-12-02 07:00): no wait for the pool's refill and quiet CPU",
    )
    connect_flags(ap)
    a = ap.parse_args()
    if claude_missing():
        return 2
    res = header(
        {
            "sessions": a.sessions,
            "size": a.size,
            "cold": not a.no_cold,
            "dial": not a.no_dial,
            "poll": a.poll,
            "ready": a.ready,
            "settle": not a.no_settle,
        }
    )

    async def measure(b: PoolBench) -> None:
        b.pool_size, b.settle, b.settled = a.size, not a.no_settle, []
        await b.environment(WARM, warmPool={"size": a.size, "maxAgeSeconds": 3600})
        await b.environment(COLD)
        res["samples"] = await b.run(a.sessions, not a.no_cold, not a.no_dial)
        res["connected_at_claim"] = b.connected_at_claim
        res["settle"] = summary(b.settled) if b.settled else None

    if not with_bench(a, PoolBench, measure):
        return 130
    out = report(res)
    if a.json:
        out["samples"] = res["samples"]
        out["args"] = res["args"]
    return print_result(out, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
