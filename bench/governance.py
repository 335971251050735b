"""Figures of Tower's signed events webhook (spec 002): verified events per second and latency, fresh and
duplicate, beside their floors.

Run: .venv/bin/python bench/governance.py [--events N] [--resumes N] [--skip-http] [--skip-resume] [--json]
[--keep-logs]

**the checks alone** (in this process): ``hangar.governance.webhook.receive`` on N signed ``run.stop``
bodies, each with a fresh id (signature, freshness, parsing, id check and the accept-once insert into a
real SQLite database), then the same N again (each a duplicate). Floor: the HMAC-SHA256 alone over the
same bytes (``signature.sign``), which any verifier must compute.

**over HTTP** (everything real: a local control plane, an api process with governance on reading its
signing secret from a Kubernetes Secret, its SQLite database): N signed deliveries of fresh ``run.stop``
events for a session hangar does not have (the route verifies, accepts the id, looks the session up and
audits), one after another, then the same N again (duplicates). Floor: ``GET /healthz`` on the same api,
the HTTP round trip any route costs.

**resume** (``bench/_resume.py``, everything real with the Claude Code CLI): Tower's decision → the
resumed turn running (the signed event, hangar's re-read, the resume, a slot, a new sandbox on the volume, the
driver's hello, the turn started), p50 and p99 over ``--resumes`` runs. Floor: a bare pod create → Running in
the same run; the ratio of the medians is the figure to compare on a shared machine.

Progress goes to stderr; the table (or, with --json, one JSON document) to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _resume import resume_latency
from _stack import bench_run, header, print_result
from _stats import log, summary

from hangar.devcluster.stack import Stack
from hangar.governance import signature, webhook
from hangar.store import open_database

SECRET = b"bench-webhook-secret"


def body(i: int, run: str) -> bytes:
    return json.dumps(
        {
            "id": f"ev-{run}-{i}",
            "kind": "run.stop",
            "run": {"session": "nobody", "stopped_by": "lee@acme.test", "reason": "bench"},
        }
    ).encode()


def timed(fn: Any, items: list[Any]) -> tuple[list[float], float]:
    """Per-item seconds and the whole run's seconds."""
    out = []
    start = time.perf_counter()
    for it in items:
        t = time.perf_counter()
        fn(it)
        out.append(time.perf_counter() - t)
    return out, time.perf_counter() - start


def in_process(n: int) -> dict[str, Any]:
    log(f"the checks alone: {n} fresh, {n} duplicate, beside the HMAC alone")
    run = str(int(time.time() * 1000))
    bodies = [body(i, run) for i in range(n)]
    now = time.time()
    headers = [
        {"X-AW-Signature": signature.header([SECRET], int(now), b), "X-AW-Event-Id": f"ev-{run}-{i}"}
        for i, b in enumerate(bodies)
    ]

    async def go() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as d:
            db = await open_database(f"sqlite:///{Path(d) / 'bench.db'}")

            async def accept(item: str) -> bool:
                return await db.accept_id("tower-event", item, webhook.KEEP_IDS_SECONDS)

            result: dict[str, Any] = {}
            for label, want in (("fresh", True), ("duplicate", False)):
                xs = []
                start = time.perf_counter()
                for h, b in zip(headers, bodies, strict=True):
                    t = time.perf_counter()
                    v = await webhook.receive(h, b, [SECRET], now, accept)
                    xs.append(time.perf_counter() - t)
                    assert v.accepted is want, v
                total = time.perf_counter() - start
                result[label] = {**summary(xs), "per_second": n / total}
            await db.close()
            return result

    out = asyncio.run(go())
    floor, total = timed(lambda b: signature.sign(SECRET, int(now), b), bodies)
    out["floor_hmac"] = {**summary(floor), "per_second": n / total}
    return out


def over_http(n: int, keep_logs: bool) -> dict[str, Any]:
    with bench_run(keep_logs) as r:
        from hangar.devcluster import binaries
        from hangar.devcluster.controlplane import ControlPlane
        from hangar.devcluster.stack import install_crds

        log("control plane and an api with governance on")
        r.cp = ControlPlane(binaries.ensure(), r.cp_dir).start()
        asyncio.run(install_crds(str(r.cp.kubeconfig)))
        kubeconfig = str(r.cp.kubeconfig)
        secret = SECRET.decode()
        r.stack = Stack(
            r.root,
            r.cp.kubeconfig,
            extra_env={"HANGAR_GOVERNANCE": "enforce", "HANGAR_GOVERNANCE_WEBHOOK_SECRET": "tower-webhook"},
        )
        import subprocess

        subprocess.run(
            [
                str(binaries.ensure().dir / "kubectl"),
                "--kubeconfig",
                kubeconfig,
                "create",
                "secret",
                "generic",
                "tower-webhook",
                f"--from-literal=webhook-secret={secret}",
            ],
            check=True,
            capture_output=True,
        )
        r.stack.start_api()
        url = r.stack.api_url
        run = str(int(time.time() * 1000))
        bodies = [body(i, run) for i in range(n)]
        result: dict[str, Any] = {}
        with httpx.Client(base_url=url, timeout=30) as c:
            for _ in range(20):  # warm up the route and the Secret's cache
                c.get("/healthz")

            def deliver(i: int) -> None:
                b = bodies[i]
                h = {
                    "X-AW-Signature": signature.header([SECRET], int(time.time()), b),
                    "X-AW-Event-Id": f"ev-{run}-{i}",
                }
                r = c.post("/api/governance/events", content=b, headers=h)
                assert r.status_code == 200, r.text

            for label in ("fresh", "duplicate"):
                log(f"over HTTP: {n} {label}")
                xs, total = timed(deliver, list(range(n)))
                result[label] = {**summary(xs), "per_second": n / total}
            xs, total = timed(lambda _: c.get("/healthz"), list(range(n)))
            result["floor_healthz"] = {**summary(xs), "per_second": n / total}
        return result


def table(out: dict[str, Any]) -> str:
    lines = [f"# {out['date']} — {out['machine']}", ""]
    for part, title in (("in_process", "the checks alone"), ("http", "over HTTP")):
        if part not in out:
            continue
        lines.append(f"{title}:")
        for label, s in out[part].items():
            lines.append(
                f"  {label:14} {s['per_second']:9.0f}/s  p50 {s['p50'] * 1e3:7.3f} ms  p99 {s['p99'] * 1e3:7.3f} ms"
            )
        lines.append("")
    res = out.get("resume")
    if res and "skipped" in res:
        lines.append(f"resume: skipped ({res['skipped']})")
    elif res:
        r, f = res["resume"], res["floor_pod"]
        lines.append(f"resume ({r['n']} runs):")
        lines.append(f"  Tower decision → resumed turn running  p50 {r['p50']:6.2f} s  p99 {r['p99']:6.2f} s")
        lines.append(f"  bare pod create → Running (floor)      p50 {f['p50']:6.2f} s  p99 {f['p99']:6.2f} s")
        lines.append(f"  ratio of the medians                   {r['p50'] / f['p50']:6.1f}x")
        for k, v in res["where_p50"].items():
            lines.append(f"  p50 decision → {k:18} {v:6.2f} s")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--resumes", type=int, default=5, help="decision → resumed turn samples")
    ap.add_argument("--skip-http", action="store_true", help="not the events over HTTP")
    ap.add_argument("--skip-resume", action="store_true", help="not the decision → resumed turn")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    out = header({"events": a.events, "resumes": a.resumes})
    out["in_process"] = in_process(a.events)
    if not a.skip_http:
        out["http"] = over_http(a.events, a.keep_logs)
    if not a.skip_resume:
        out["resume"] = resume_latency(a.resumes, a.keep_logs)
    return print_result(out, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
