"""A session without a pool beside its floor, and nothing else: the cold path's A/B bench.

Run: .venv/bin/python bench/cold.py [--sessions N] [--costs] [--message TEXT] [--driver-mount M] [--json]
[--ready watch|poll] [--keep-logs]

``bench/warm_pool.py``'s cold and dial samples alone, interleaved (dial i, cold i; one warm-up of each, not
counted): there, each cold sample follows a warm one, whose claim wakes the pool's refill and whose session
pre-starts a CLI (~0.5 s of CPU) beside the cold sample, which on a loaded machine hides a change to the
cold path in noise. The issue's goal: cold / dial ≤ 1.3x.

- **cold**: ``POST /api/sessions`` to an Environment without a pool → ``sandbox.connected``.
- **dial**: a Secret, a PVC and a pod made as hangar makes a sandbox's, whose python dials the bench
  (``bench/_dial_floor.py``): the first create → the line arrives.

``--message TEXT``: each session is created with a first message (``POST /api/sessions`` with ``message``,
as ``hangar session new NAME "TEXT"`` does), timed to ``sandbox.connected`` as without one; its turn runs
after the window (the settle before the next sample waits for it).

``--costs``: each sample also records what its timed window cost the machine — CPU seconds per process and the
apiserver's requests by verb and resource (its /metrics, read before and after the window) — printed summed
(CPU) and a sample (requests) for each side: where a cold sample's extra work goes.

To compare two commits, run it on each (``git archive`` one into a directory and run its copy with
``PYTHONPATH`` on its packages), alternating, and compare the ratios.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from _observe import costs_summary
from _sessions_report import connect_flags  # bench/ is on sys.path
from _stack import claude_missing, header, print_result
from _stats import log, med, summary
from sessions import with_bench
from warm_pool import COLD, PoolBench


class ColdBench(PoolBench):
    env_name = COLD
    pool_size = 0  # no warm pool here: the settle before each sample waits for this bench's processes only

    async def run_cold(self, n: int) -> dict[str, list[dict[str, Any]]]:
        log("warm-up (not counted)")
        for k in ("dial", "cold"):
            await self.sample(k, -1)
        out: dict[str, list[dict[str, Any]]] = {"dial": [], "cold": []}
        for i in range(n):
            for k in ("dial", "cold"):
                out[k].append(await self.sample(k, i))
            log(f"{i + 1}/{n}: dial {out['dial'][-1]['total']:.3f} s   cold {out['cold'][-1]['total']:.3f} s")
        return out


def report(res: dict[str, Any]) -> dict[str, Any]:
    samples = res["samples"]
    c, d = (summary([x["total"] for x in samples[k]]) for k in ("cold", "dial"))
    costs = {k: costs_summary(samples[k]) for k in ("cold", "dial")}
    return {
        "date": res["date"],
        "machine": res["machine"],
        "driver_mount": res["args"]["driver_mount"],
        "figures": {"cold": c, "dial": d},
        "ratios": {"cold / dial": {"p50": c["p50"] / d["p50"], "p99": c["p99"] / d["p99"]}},
        # Where each side's time goes, medians from its first create / POST: the pod seen created, bound and
        # Running by the bench's pod watch, and the end (hangar: sandbox.connected; the floor: its dial).
        "stages": {k: {st: med([x.get(st) for x in samples[k]]) for st in STAGES} for k in ("cold", "dial")},
        **({"costs": costs} if all(costs.values()) else {}),
    }


STAGES = ("to_pod_created", "to_bound", "to_running", "total")


def table(out: dict[str, Any]) -> str:
    lines = [f"hangar bench/cold.py — {out['date']} — {out['machine']} — driver: {out['driver_mount']}", ""]
    labels = {"cold": "session without a pool → sandbox.connected", "dial": "pod like hangar's → dialled"}
    lines.append(f"{'figure (seconds)':48} {'n':>3} {'p50':>7} {'p99':>7}")
    for k, f in out["figures"].items():
        lines.append(f"{labels[k]:48} {f['n']:3d} {f['p50']:7.3f} {f['p99']:7.3f}")
    r = out["ratios"]["cold / dial"]
    lines += ["", f"{'cold / dial':48}     {r['p50']:6.2f}x {r['p99']:6.2f}x"]
    lines.append("(p99 is nearest-rank: below 100 samples it is the maximum)")
    lines += ["", f"{'stage, median seconds from the first call':48} {'cold':>7} {'dial':>7}"]
    for st in STAGES:
        cold, dial = (out["stages"][k][st] for k in ("cold", "dial"))
        lines.append(f"{st:48} {_s(cold)} {_s(dial)}")
    if "costs" in out:
        lines += _costs_lines(out["costs"])
    return "\n".join(lines)


def _costs_lines(costs: dict[str, Any]) -> list[str]:
    c, d = costs["cold"], costs["dial"]
    lines = ["", f"{'CPU seconds in the timed windows, summed':48} {'cold':>7} {'dial':>7}"]
    procs = sorted(
        set(c["cpu_s"]) | set(d["cpu_s"]), key=lambda k: -(c["cpu_s"].get(k, 0) + d["cpu_s"].get(k, 0))
    )
    for k in procs:
        a, b = c["cpu_s"].get(k, 0.0), d["cpu_s"].get(k, 0.0)
        if a or b:
            lines.append(f"{k[:48]:48} {a:7.2f} {b:7.2f}")
    lines.append(f"{'every process':48} {sum(c['cpu_s'].values()):7.2f} {sum(d['cpu_s'].values()):7.2f}")
    cr, dr = c["requests_per_sample"], d["requests_per_sample"]
    lines += ["", f"{'apiserver requests a sample':48} {'cold':>7} {'dial':>7}"]
    for k in sorted(set(cr) | set(dr), key=lambda k: -(cr.get(k, 0) + dr.get(k, 0))):
        lines.append(f"{k[:48]:48} {cr.get(k, 0.0):7.2f} {dr.get(k, 0.0):7.2f}")
    lines.append(f"{'in all':48} {sum(cr.values()):7.2f} {sum(dr.values()):7.2f}")
    return lines


def _s(x: float | None) -> str:
    return f"{x:7.3f}" if x is not None else f"{'-':>7}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=15, help="samples of each kind (default 15)")
    ap.add_argument(
        "--costs",
        action="store_true",
        help="also each sample's CPU per process and apiserver requests in its timed window",
    )
    ap.add_argument("--message", help="create each session with this first message (spec.prompt)")
    connect_flags(ap)
    a = ap.parse_args()
    if claude_missing():
        return 2
    mount = a.driver_mount or "init-copy"
    res = header(
        {
            "sessions": a.sessions,
            "poll": a.poll,
            "ready": a.ready,
            "costs": a.costs,
            "driver_mount": mount,
            "message": a.message,
        }
    )

    async def measure(b: ColdBench) -> None:
        b.message = a.message
        await b.environment(COLD)
        res["samples"] = await b.run_cold(a.sessions)

    if not with_bench(a, ColdBench, measure):
        return 130
    out = report(res)
    if a.json:
        out["samples"] = res["samples"]
        out["args"] = res["args"]
    return print_result(out, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
