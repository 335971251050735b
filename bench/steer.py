"""Steer latency: a steer accepted by the API → written to the agent CLI's stdin, beside writing it directly.

Run: .venv/bin/python bench/steer.py [--steers N] [--gap S] [--json] [--keep-logs]

It starts everything it measures on this machine, the way the end-to-end tests do (tests/e2e/conftest.py): a local
control plane with hangar's CRDs, a Stack (operator, API and the local pod runner as processes) and a
ScriptedModel whose first answer is a long shell command (``python3 -c 'import time; time.sleep(H)'``), so
that every steer arrives while a tool runs: Claude Code then takes the line at once (hangar's adapter writes a
steer to stdin only while a tool is in flight; while only text streams it holds it, see
``sandbox-image/hangar_driver/claude.py``). Everything it started is stopped on exit, Ctrl-C and SIGTERM too.

**hangar** (one Claude session, one turn): N steers ``POST /api/sessions/{name}/steer``, one after another,
``--gap`` seconds apart (so each is measured alone, not queued behind the others). Each is timed from
``accepted_at`` (the API's clock once the Turn's spec holds the steer: what "accepted" means) to
``writtenAt`` (the driver's clock once the adapter wrote the line to the CLI's stdin, reported in the signed
``steer`` event and recorded in the Turn's status). Both clocks are this machine's. On the way: the operator's
"steered: …" activity event (``at``), recorded right after it sent the command to the driver.

**floor**: the same, without hangar between the caller and the CLI: the driver's Claude adapter
(``hangar_driver.claude``) run in this process against the same CLI and scripted model, a long tool running,
``ClaudeHarness.steer()`` called N times ``--gap`` apart, each timed from the call to the adapter's own
``written_at``. That is what writing the line to the CLI directly costs.

Both sides then let the tool finish and check that every steer was delivered in that turn (and that the
model's next request carried all of them).

Progress goes to stderr; the table (or, with --json, one JSON document) to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from _stack import (  # bench/ is the script's directory, so on sys.path
    SYSTEM_PATH,
    bench_run,
    claude_env,
    claude_missing,
    header,
    kube_apply,
    print_result,
    wall,
)
from _stats import log, summary

from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack, environment_object
from hangar.models.limits import STEERS_MAX
from hangar.paths import cli_dir
from hangar.testing.model_server import Request, ScriptedModel, Step
from hangar_driver.adapters import make_harness
from hangar_driver.harness import TurnConfig

MODEL = "claude-sonnet-4-5"
ENVIRONMENT = "bench-steer"
SESSION = "bench-steer"
TIMEOUT = 180.0


def script(hold: float) -> list[Step]:
    def first(req: Request) -> bool:
        return not req.tool_results and "BENCH-STEER" not in req.user_text

    return [
        Step(
            when=first,
            text="Running the long job.",
            command=f"python3 -c 'import time; time.sleep({hold})'",
            repeat=True,
        ),
        Step(when="tool_result", text="FINAL: done with the long job.", repeat=True),
        Step(text="FINAL: ok", repeat=True),
    ]


# -- hangar ------------------------------------------------------------------------------------------------------


def hangar_side(stack: Stack, cp: ControlPlane, model: ScriptedModel, n: int, gap: float) -> dict[str, Any]:
    kube_apply(cp, environment_object(ENVIRONMENT, claude_env(model)))
    http = httpx.Client(
        base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30
    )
    try:
        r = http.post(
            "/api/sessions",
            json={
                "name": SESSION,
                "environment": ENVIRONMENT,
                "harness": "claude",
                "model": MODEL,
                "message": "run the long job",
            },
        )
        r.raise_for_status()
        deadline = time.monotonic() + TIMEOUT
        while not any(
            e["kind"] == "tool_use" for e in http.get(f"/api/sessions/{SESSION}/events").json()["events"]
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("the long tool did not start")
            time.sleep(0.1)
        time.sleep(0.5)
        log(f"hangar: the tool runs; {n} steers, {gap} s apart")
        sent: list[dict[str, Any]] = []
        for i in range(n):
            c0 = time.time()
            r = http.post(f"/api/sessions/{SESSION}/steer", json={"message": f"BENCH-STEER {i}"})
            c1 = time.time()
            if r.status_code != 202:
                raise RuntimeError(f"steer {i}: {r.status_code} {r.text}")
            b = r.json()
            sent.append(
                {"id": b["steer"]["id"], "client_sent": c0, "client_answer": c1, "accepted": b["accepted_at"]}
            )
            time.sleep(gap)
        while True:
            t = http.get(f"/api/sessions/{SESSION}/turns/1").json()
            if t["phase"] in ("Completed", "Failed", "Interrupted"):
                break
            if time.monotonic() > deadline + n * gap:
                raise TimeoutError("turn 1 did not end")
            time.sleep(0.2)
        if t["phase"] != "Completed":
            raise RuntimeError(f"turn 1 {t['phase']}: {t['reason']}")
        states = {s["id"]: s for s in t["steers"]}
        events = http.get(f"/api/sessions/{SESSION}/events", params={"limit": 1000}).json()["events"]
        steered = {
            e["steer"]: wall(e["at"]) for e in events if e["kind"] == "progress" and e.get("event") == "steer"
        }
        samples = []
        for s in sent:
            st = states[s["id"]]
            if st["status"] != "delivered" or not st["written_at"]:
                raise RuntimeError(f"steer {s['id']} not delivered in the turn: {st}")
            written = wall(st["written_at"])
            assert written is not None
            samples.append(
                {
                    "total": written - s["accepted"],
                    "post": s["client_answer"] - s["client_sent"],
                    "to_operator_sent": (steered[s["id"]] - s["accepted"]) if steered.get(s["id"]) else None,
                }
            )
        return {"samples": samples}
    finally:
        http.close()


# -- floor -------------------------------------------------------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self.cond = threading.Condition()

    def __call__(self, name: str, payload: dict[str, Any]) -> None:
        with self.cond:
            self.items.append((name, payload))
            self.cond.notify_all()

    def wait(self, name: str, timeout: float) -> dict[str, Any]:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(n == name for n, _ in self.items), timeout)
            if not ok:
                raise TimeoutError(f"no {name} event")
            return next(p for n, p in self.items if n == name)

    def all(self, name: str) -> list[dict[str, Any]]:
        with self.cond:
            return [p for n, p in self.items if n == name]


def floor_side(work: Path, model: ScriptedModel, n: int, gap: float) -> dict[str, Any]:
    claude = cli_dir() / "node_modules" / ".bin" / "claude"
    home, cwd = work / "floor-home", work / "floor-work"
    home.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    events = Events()
    harness = make_harness("claude", events)
    env = {
        "PATH": f"{claude.parent}:{SYSTEM_PATH}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **claude_env(model),
    }
    turn = "floor-" + uuid.uuid4().hex[:6]
    try:
        harness.start_turn(TurnConfig(turn, "run the long job", str(cwd), env, [str(claude)], MODEL))
        events.wait("tool_use", TIMEOUT)
        time.sleep(0.5)
        log(f"floor: the tool runs; {n} steers, {gap} s apart")
        called: dict[str, float] = {}
        for i in range(n):
            sid = f"f{i}"
            called[sid] = time.time()
            harness.steer(sid, f"BENCH-STEER floor {i}")
            time.sleep(gap)
        with events.cond:
            events.cond.wait_for(lambda: any(n_ == "turn_ended" for n_, _ in events.items), TIMEOUT)
        delivered = {p["steer_id"]: p for p in events.all("steer")}
        samples = []
        for sid, t0 in called.items():
            p = delivered.get(sid)
            if p is None or p["status"] != "delivered" or not p.get("written_at"):
                raise RuntimeError(f"floor steer {sid} not delivered: {p}")
            samples.append({"total": float(p["written_at"]) - t0})
        return {"samples": samples}
    finally:
        harness.close()


# -- report ------------------------------------------------------------------------------------------------------


def report(res: dict[str, Any]) -> dict[str, Any]:
    h = [s["total"] for s in res["hangar"]["samples"]]
    f = [s["total"] for s in res["floor"]["samples"]]
    hs, fs = summary(h), summary(f)
    post = [s["post"] for s in res["hangar"]["samples"]]
    op = [s["to_operator_sent"] for s in res["hangar"]["samples"] if s["to_operator_sent"] is not None]
    return {
        "date": res["date"],
        "machine": res["machine"],
        "args": res["args"],
        "figures": {
            "hangar": hs,
            "floor": fs,
            "ratio_p50": hs["p50"] / fs["p50"],
            "ratio_p99": hs["p99"] / fs["p99"],
        },
        "breakdown": {
            "client: POST /steer round trip (p50)": statistics.median(post),
            "accepted → operator sent it to the driver ('steered' event, p50)": statistics.median(op)
            if op
            else None,
            "accepted → written to the CLI's stdin (p50)": hs["p50"],
        },
    }


def table(out: dict[str, Any]) -> str:
    h, f = out["figures"]["hangar"], out["figures"]["floor"]
    ms = 1000.0
    lines = [
        f"hangar bench/steer.py — {out['date']} — {out['machine']}",
        "",
        f"{'figure (ms)':52} {'p50':>9} {'p99':>9}",
        f"{'hangar: accepted by the API → written to stdin':52} {h['p50'] * ms:9.2f} {h['p99'] * ms:9.2f}",
        f"{'floor: ClaudeHarness.steer() → written to stdin':52} {f['p50'] * ms:9.3f} {f['p99'] * ms:9.3f}",
        f"{'ratio':52} {out['figures']['ratio_p50']:8.0f}x {out['figures']['ratio_p99']:8.0f}x",
        f"(n = {h['n']} / {f['n']}; p99 is nearest-rank)",
        "",
        "where the time goes (ms):",
    ]
    for label, v in out["breakdown"].items():
        lines.append(f"  {label:70} {'-' if v is None else f'{v * ms:8.2f}'}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--steers",
        type=int,
        default=STEERS_MAX,
        help=f"steers per side (default {STEERS_MAX}, a turn's most)",
    )
    ap.add_argument("--gap", type=float, default=0.25, help="seconds between two steers (default 0.25)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--keep-logs", action="store_true", help="keep the control-plane and stack logs")
    a = ap.parse_args()
    if claude_missing():
        return 2
    if a.steers > STEERS_MAX:
        print(f"--steers: a turn takes at most {STEERS_MAX} steers (docs/limits.md)", file=sys.stderr)
        return 2
    # The tool outlives the steers (Claude's Bash tool stops at 120 s), each steer's POST included: up to
    # ~0.5 s on 2 cores that other test runs keep busy (a steer sent after the tool ended is queued, and the
    # run fails).
    hold = min(110.0, a.steers * (a.gap + 0.5) + 10)
    if a.steers * a.gap + 8 > 110:
        print("--steers times --gap must stay under 100 s (one tool call holds them all)", file=sys.stderr)
        return 2
    res = header({"steers": a.steers, "gap": a.gap})
    try:
        with bench_run(a.keep_logs) as br:
            model = br.model(ScriptedModel(script(hold)))
            log("floor: the Claude adapter in this process")
            res["floor"] = floor_side(br.root / "bench", model, a.steers, a.gap)
            cp, stack = br.start()
            res["hangar"] = hangar_side(stack, cp, model, a.steers, a.gap)
    except KeyboardInterrupt:
        log("interrupted: cleaned up")
        return 130
    out = report(res)
    if a.json:
        out["samples"] = {"hangar": res["hangar"]["samples"], "floor": res["floor"]["samples"]}
    return print_result(out, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
