"""The MCP server under load: many ``wait_for_turn`` waiters on one API process, and a burst of changes under
a subscription.

Run: .venv/bin/python bench/mcp_load.py [--waiters 1000] [--changes 1000] [--json] [--keep-logs]

It starts everything it measures, the way the end-to-end tests do (a local control plane with hangar's CRDs,
a Stack: operator, one API process and the local pod runner, and a ScriptedModel), and stops it all on exit,
Ctrl-C and SIGTERM too.

**Waiters.** One Claude session whose turn runs a long command. While it runs, ``--waiters`` concurrent
2026-07-28 ``tools/call wait_for_turn`` requests (raw HTTP, one connection each) wait on it; the turn then ends.
Each waiter is timed from the turn's ``finishedAt`` (the operator's clock) to the moment its whole answer has
been read (this machine's clock, the same). The API process's resident memory is sampled before the waiters
and while they all wait. **Floor**: one REST client polling ``GET /api/sessions/{name}/turns/1`` every 20 ms
over the same window, timed from ``finishedAt`` to the first answer that says ``Completed``: what seeing the
turn end costs without any waiter.

**Burst.** One subscriber in each era (``subscriptions/listen``, and ``resources/subscribe`` on a handshake
session) on ``hangar://sessions/{name}``; then ``--changes`` changes of the Session (annotation patches, one
after another, as fast as the apiserver takes them). Counted: the notifications each subscriber received,
their smallest gap (the rule: at least 250 ms), and how long after the last change the last notification
came (it must come: the last change is never lost). **Floor**: one notification per change.

Progress goes to stderr; the table (or, with --json, one JSON document) to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from _mcp import META, MODERN
from _mcp import headers as mcp_headers
from _stack import bench_run, claude_env, claude_missing, header, kube_apply, print_result, wall
from _stats import log, summary
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ResourceUpdatedNotification

from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack, environment_object
from hangar.kube import Kube
from hangar.testing.model_server import ScriptedModel, Step

ENVIRONMENT = "bench-mcp"
SESSION = "bench-mcp"
URI = f"hangar://sessions/{SESSION}"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def call_body(n: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {
            "name": "wait_for_turn",
            "arguments": {"ref": SESSION, "timeout_seconds": 600},
            "_meta": META,
        },
    }


def answer_of(text: str) -> dict[str, Any]:
    """The JSON-RPC answer in a JSON body or in the last data line of an SSE body."""
    if text.lstrip().startswith("{"):
        return dict(json.loads(text))
    datas = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return dict(json.loads(datas[-1]))


async def waiters_side(stack: Stack, n: int) -> dict[str, Any]:
    api_pid = stack.procs["api"].pid
    headers = {
        "Authorization": f"Bearer {stack.token_for('mcp-client')}",
        **mcp_headers("tools/call", "wait_for_turn"),
    }
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)
    before = rss_mb(api_pid)
    done_at: list[float] = []
    failures: list[str] = []
    floor_seen: list[float] = []
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=stack.api_url, headers=headers, limits=limits, timeout=900) as http:

        async def waiter(i: int) -> None:
            try:
                r = await http.post("/mcp", json=call_body(i))
                got = answer_of(r.text)
                out = got.get("result", {}).get("structuredContent") or {}
                if out.get("done") and out.get("phase") == "Completed":
                    done_at.append(time.time())
                else:
                    failures.append(json.dumps(got)[:300])
            except Exception as e:  # counted, not fatal: the figure says how many came back
                failures.append(repr(e))

        async def floor() -> None:
            admin = {"Authorization": f"Bearer {stack.token}"}
            async with httpx.AsyncClient(base_url=stack.api_url, headers=admin, timeout=30) as rest:
                while not stop.is_set():
                    t = (await rest.get(f"/api/sessions/{SESSION}/turns/1")).json()
                    if t.get("phase") == "Completed":
                        floor_seen.append(time.time())
                        return
                    await asyncio.sleep(0.02)

        start = time.monotonic()
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(waiter(i)))
            if i % 50 == 49:
                await asyncio.sleep(0.05)  # a ramp, not one SYN flood
        log(f"waiters: {n} sent in {time.monotonic() - start:.1f}s")
        floor_task = asyncio.create_task(floor())
        peak = before
        while not all(t.done() for t in tasks):
            peak = max(peak, rss_mb(api_pid))
            await asyncio.sleep(0.5)
        stop.set()
        await floor_task
    return {
        "rss_before_mb": before,
        "rss_peak_mb": peak,
        "done_at": done_at,
        "failures": failures,
        "floor": floor_seen,
    }


async def burst_side(stack: Stack, cp: ControlPlane, changes: int) -> dict[str, Any]:
    heard: dict[str, list[float]] = {"2026-07-28": [], "2025-11-25": []}

    def http() -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {stack.token_for('mcp-client')}"},
            timeout=httpx2.Timeout(30, read=300),
        )

    async def on_legacy(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            heard["2025-11-25"].append(time.monotonic())

    h1, h2 = http(), http()
    async with (
        h1,
        h2,
        Client(streamable_http_client(f"{stack.api_url}/mcp", http_client=h1), mode=MODERN) as modern,
        Client(
            streamable_http_client(f"{stack.api_url}/mcp", http_client=h2),
            mode="legacy",
            message_handler=on_legacy,
        ) as legacy,
        modern.listen(resource_subscriptions=[URI]) as sub,
    ):

        async def drain() -> None:
            async for _ in sub:
                heard["2026-07-28"].append(time.monotonic())

        drainer = asyncio.create_task(drain())
        await legacy.subscribe_resource(URI)
        await asyncio.sleep(2)  # the watches' first listing, and its notification, pass
        for times in heard.values():
            times.clear()
        kube = await Kube.connect(str(cp.kubeconfig), stack.namespace)
        try:
            first = time.monotonic()
            for i in range(changes):
                await kube.patch("sessions", SESSION, {"metadata": {"annotations": {"bench/n": str(i)}}})
            last = time.monotonic()
        finally:
            await kube.close()
        await asyncio.sleep(2)
        drainer.cancel()
    out: dict[str, Any] = {"changes": changes, "burst_s": last - first}
    for era, times in heard.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        out[era] = {
            "notifications": len(times),
            "min_gap_ms": min(gaps) * 1000 if gaps else None,
            "last_after_last_change_ms": (times[-1] - last) * 1000 if times else None,
            "allowed_at_most": int((times[-1] - first) / 0.25) + 1 if times else 0,
        }
    return out


def run(stack: Stack, cp: ControlPlane, model: ScriptedModel, waiters: int, changes: int) -> dict[str, Any]:
    admin = httpx.Client(
        base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=60
    )
    kube_apply(cp, environment_object(ENVIRONMENT, claude_env(model)))
    r = admin.post("/api/sessions", json={"name": SESSION, "environment": ENVIRONMENT, "message": "hold"})
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 180
    while (admin.get(f"/api/sessions/{SESSION}/turns/1").json() or {}).get("phase") != "Running":
        assert time.monotonic() < deadline, "the turn never ran"
        time.sleep(0.2)
    log("waiters: the turn runs")
    res = asyncio.run(waiters_side(stack, waiters))
    turn = admin.get(f"/api/sessions/{SESSION}/turns/1").json()
    ended = wall(turn.get("finished_at"))
    assert ended is not None, turn
    res["latency"] = [t - ended for t in res.pop("done_at")]
    res["floor_latency"] = [t - ended for t in res.pop("floor")]
    log(f"waiters: {len(res['latency'])} answered, {len(res['failures'])} failed")
    log("burst: subscribing in both eras")
    res["burst"] = asyncio.run(burst_side(stack, cp, changes))
    return res


def report(res: dict[str, Any], waiters: int) -> dict[str, Any]:
    lat, floor = res["latency"], res["floor_latency"]
    hs = summary(lat) if lat else None
    fs = summary(floor) if floor else None
    return {
        "date": res["date"],
        "machine": res["machine"],
        "args": res["args"],
        "waiters": {
            "answered": len(lat),
            "failed": len(res["failures"]),
            "first_failures": res["failures"][:3],
            "turn_end_to_answer": hs,
            "floor_rest_poll": fs,
            "ratio_p99": hs["p99"] / fs["p99"] if hs and fs and fs["p99"] > 0 else None,
            "rss_before_mb": res["rss_before_mb"],
            "rss_peak_mb": res["rss_peak_mb"],
            "kb_per_waiter": (res["rss_peak_mb"] - res["rss_before_mb"]) * 1024 / max(1, waiters),
        },
        "burst": res["burst"],
    }


def table(out: dict[str, Any]) -> str:
    w, b = out["waiters"], out["burst"]
    ms = 1000.0
    h, f = w["turn_end_to_answer"], w["floor_rest_poll"]
    lines = [
        f"hangar bench/mcp_load.py — {out['date']} — {out['machine']}",
        "",
        f"waiters: {w['answered']} answered, {w['failed']} failed",
        f"{'figure (ms)':56} {'p50':>9} {'p99':>9}",
    ]
    if h:
        lines.append(
            f"{'hangar: turn finishedAt → wait_for_turn answer read':56} {h['p50'] * ms:9.1f} {h['p99'] * ms:9.1f}"
        )
    if f:
        lines.append(
            f"{'floor: finishedAt → one REST poller (20 ms) sees it':56} {f['p50'] * ms:9.1f} {f['p99'] * ms:9.1f}"
        )
    if w["ratio_p99"]:
        lines.append(f"{'ratio (p99)':56} {w['ratio_p99']:8.1f}x")
    lines += [
        f"API memory: {w['rss_before_mb']:.0f} MB before, {w['rss_peak_mb']:.0f} MB with the waiters "
        f"({w['kb_per_waiter']:.0f} KB per waiter)",
        "",
        f"burst: {b['changes']} changes in {b['burst_s']:.2f} s (floor: {b['changes']} notifications)",
    ]
    for era in ("2026-07-28", "2025-11-25"):
        e = b[era]
        lines.append(
            f"  {era}: {e['notifications']} notifications (at most {e['allowed_at_most']} allowed), "
            f"smallest gap {e['min_gap_ms'] or 0:.0f} ms, last {e['last_after_last_change_ms'] or 0:.0f} ms "
            "after the last change"
        )
    if w["first_failures"]:
        lines += ["", "first failures:", *(f"  {x}" for x in w["first_failures"])]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waiters", type=int, default=1000, help="concurrent wait_for_turn calls (default 1000)")
    ap.add_argument("--changes", type=int, default=1000, help="changes in the burst (default 1000)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--keep-logs", action="store_true", help="keep the control-plane and stack logs")
    a = ap.parse_args()
    if claude_missing():
        return 2
    # The turn outlives sending every waiter (a ramp of 50 per 50 ms) and their settling in.
    hold = min(100, 20 + a.waiters * 0.004 + 15)
    res = header({"waiters": a.waiters, "changes": a.changes})
    try:
        with bench_run(a.keep_logs) as br:
            model = br.model(
                ScriptedModel(
                    [
                        Step(text="Holding.", command=f"python3 -c 'import time; time.sleep({hold:.0f})'"),
                        Step(when="tool_result", text="FINAL: held."),
                    ]
                )
            )
            cp, stack = br.start()
            res.update(run(stack, cp, model, a.waiters, a.changes))
    except KeyboardInterrupt:
        log("interrupted: cleaned up")
        return 130
    out = report(res, a.waiters)
    return print_result(out, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
