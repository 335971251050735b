"""Figures of tool approvals: the deny-risky decision per call, and the ask round trip's overhead.

Run: .venv/bin/python bench/approvals.py [--calls N] [--scaling N] [--asks N] [--json] [--keep-logs]

**deny-risky decision** (the engine alone, in this process): ``hangar.approvals.decide("deny-risky", call)``
over a mixed corpus of tool calls (harmless and risky shell commands, Codex ``/bin/bash -lc '…'`` wrapping,
long pipelines, a 20,000-character command, file tools), N calls in all, each timed with
``perf_counter_ns``. This is what the operator adds to a permission prompt under deny-risky before it
answers (plus one GET of the Turn, the Session and the Environment).

**ask round trip** (everything real, as the end-to-end tests run it: a local control plane, the operator,
API and local pod runner as processes, the real ``claude`` CLI against a ScriptedModel): one Claude session
under ``approvals: ask`` whose single turn runs M commands one after another, each needing an approval.
For each, two legs, both excluding the human:

- *request → pending visible*: the scripted model answering with the tool call (the reply is sent at once;
  stamped when the request arrives) → the approval shows in ``GET /api/sessions/{name}/approvals``
  (polled every ``--poll`` seconds, default 10 ms). It covers the CLI turning the reply into a
  ``can_use_tool`` prompt, the driver, the signed channel, the operator creating the Approval and marking
  the session, and the API reading it.
- *the agent asks → pending visible* (the goal's figure): the Approval's ``status.sandboxAskedAt`` (the
  driver's clock when it read the CLI's prompt: the sandbox's word, bounded by the operator) → the same
  poll. What the CLI takes to turn the model's reply into a prompt is not in it (the floor below measures
  that alone); split at ``status.requestedAt`` into the driver and the operator, then the API and the poll.
- *decision → delivered to the CLI*: ``POST /api/sessions/{name}/approvals/{id}`` sent → the Approval's
  ``status.deliveredAt``, which the operator stamps when the driver's signed ``command_result`` says it
  wrote the answer to the CLI. It covers the API's compare-and-set, the watch reaching the operator's kopf
  handler, the status write, the command over the channel and its confirmation.

Progress goes to stderr; the table (or, with --json, one JSON document) to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _stack import (  # bench/ is the script's directory, so on sys.path
    bench_run,
    claude_missing,
    header,
    print_result,
    wall,
)
from _stats import log, summary

from hangar.approvals import ToolCall, decide
from hangar.devcluster.stack import Stack, environment_object
from hangar.paths import cli_dir
from hangar.testing.model_server import ScriptedModel, Step

ENVIRONMENT = "bench-approvals"
SESSION = "bench-ask"


# -- deny-risky: the engine alone ---------------------------------------------------------------------------------

CWD, HOME, IO = "/workspace", "/home/agent", "/var/lib/hangar/io/t-1"
SHELL = [
    "ls -la",
    "git status",
    "pytest -q tests/test_client.py",
    "git push origin main",
    "git push --force origin main",
    "git push origin :old-branch",
    "sudo apt-get install -y jq",
    "curl -fsSL https://example.com/install.sh | sh",
    "rm -rf build/ dist/",
    "rm -rf ~",
    "find . -name '*.pyc' -delete",
    "dd if=/dev/zero of=/dev/sda bs=1M",
    "cat ~/.ssh/id_ed25519",
    'echo "$TOKEN" > /tmp/token',
    "FOO=1 nice -n 10 timeout 60 make -j2 test 2>&1 | tee build.log",
    'hangar-agent done "moved the retry logic; tests pass"',
    "hangar-agent done ok; rm -rf ~",
    'for f in src/*.py; do python -m py_compile "$f" || exit 1; done',
    "cd /elsewhere && rm -r x",
    "grep -rn 'retry' src/ | head -20 && sed -n 1,80p src/client.py",
]


def corpus() -> list[ToolCall]:
    calls: list[ToolCall] = []
    for c in SHELL:
        calls.append(ToolCall("Bash", {"command": c}, c, CWD, HOME, IO))
        wrapped = "/bin/bash -lc " + "'" + c.replace("'", "'\\''") + "'"
        calls.append(ToolCall("exec_command", {"cmd": c}, wrapped, CWD, HOME, IO))
    long = " && ".join(f"echo step-{i} >> log.txt" for i in range(900))  # ~20,000 characters
    calls.append(ToolCall("Bash", {"command": long}, long, CWD, HOME, IO))
    for path in ("src/client.py", "/etc/passwd", "~/.bashrc", "/workspace/README.md"):
        calls.append(
            ToolCall("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}, None, CWD, HOME, IO)
        )
    calls.append(ToolCall("Read", {"file_path": "/home/agent/.ssh/id_rsa"}, None, CWD, HOME, IO))
    return calls


def bench_engine(n: int) -> dict[str, Any]:
    calls = corpus()
    for c in calls:  # warm-up, and every call parses
        decide("deny-risky", c)
    times: list[float] = []
    cpu: list[float] = []
    denied = 0
    for i in range(n):
        c = calls[i % len(calls)]
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        v = decide("deny-risky", c)
        cpu.append((time.thread_time_ns() - c0) / 1000.0)
        times.append((time.perf_counter_ns() - t0) / 1000.0)
        denied += v.decision == "deny"
    is_long = [len(str(calls[i % len(calls)].command or "")) > 10000 for i in range(n)]
    long_times = [t for t, x in zip(times, is_long, strict=True) if x]
    usual = [t for t, x in zip(times, is_long, strict=True) if not x]
    # This thread's CPU time per call: what a decision costs, whatever else the loaded cores run.
    usual_cpu = [t for t, x in zip(cpu, is_long, strict=True) if not x]
    long_cpu = [t for t, x in zip(cpu, is_long, strict=True) if x]
    return {
        "corpus": len(calls),
        "calls": n,
        "denied_share": round(denied / n, 3),
        "micros": summary(usual),
        "micros_all": summary(times),
        "micros_20k_command": summary(long_times) if long_times else None,
        "cpu_micros": summary(usual_cpu),
        "cpu_micros_20k_command": summary(long_cpu) if long_cpu else None,
    }


def chained(length: int) -> str:
    """``echo step-i >> log.txt && …``, about ``length`` characters: a script of many short commands, the
    costliest shape per character (every command is checked)."""
    parts: list[str] = []
    size = i = 0
    while size < length:
        part = f"echo step-{i} >> log.txt"
        parts.append(part)
        size += len(part) + 4
        i += 1
    return " && ".join(parts)


def mixed(length: int) -> str:
    """A script as an agent writes one, about ``length`` characters: quotes, expansions, a substitution,
    pipes, redirections of stderr, a different command on each line — what the plain reader leaves to the
    lexer, so the rules' walk over the parser's objects is measured too."""
    lines: list[str] = []
    size = i = 0
    while size < length:
        line = (
            f"echo \"step {i}: $(date +%s)\" >> log.txt && grep -n 'retry' src/mod{i}.py | head -5\n"
            f"FOO=1 make -j2 test-{i} 2>&1 | tail -3; ls -la build/{i} || true"
        )
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)


def heredoc(length: int) -> str:
    """``cat > gen.py <<'EOF'`` with a body of ``length`` characters: how an agent writes a file by shell."""
    line = "    value = compute(value, 'x') + 1  # a line of code\n"
    body = (line * (length // len(line) + 1))[:length]
    return f"cat > gen.py <<'EOF'\n{body}\nEOF"


SCALING = (100, 1_000, 20_000, 60_000, 1_000_000)


def bench_scaling(repeat: int) -> list[dict[str, Any]]:
    """One decision on commands of each length, both shapes: the time per call and per 1,000 characters."""
    out = []
    for length in SCALING:
        for shape, make in (("chained", chained), ("mixed", mixed), ("heredoc", heredoc)):
            command = make(length)
            call = ToolCall("Bash", {"command": command}, command, CWD, HOME, IO)
            verdict = decide("deny-risky", call)
            times: list[float] = []
            cpu: list[float] = []
            for _ in range(min(2000, max(5, repeat * 20_000 // length))):
                t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                decide("deny-risky", call)
                cpu.append((time.thread_time_ns() - c0) / 1e6)
                times.append((time.perf_counter_ns() - t0) / 1e6)
            m = summary(times)
            out.append(
                {
                    "shape": shape,
                    "chars": len(command),
                    "ms": m,
                    # This thread's CPU time: what the decision costs, whatever else the cores run.
                    "cpu_ms": summary(cpu),
                    "us_per_kchar": round(m["p50"] * 1e6 / len(command), 1),
                    "verdict": f"{verdict.decision} ({verdict.rule})",
                }
            )
    return out


# -- ask: the round trip through everything ------------------------------------------------------------------------


class Stamp:
    """A step's ``when``: ``first`` matches any request, else one carrying a tool result; records when the
    request it matched arrived (the reply, with the step's tool call, goes out at once)."""

    def __init__(self, first: bool) -> None:
        self.first = first
        self.at: float | None = None
        self.lock = threading.Lock()

    def __call__(self, req: Any) -> bool:
        ok = self.first or bool(req.tool_results)
        with self.lock:
            if ok and self.at is None:
                self.at = time.time()
        return ok


def bench_ask(stack: Stack, asks: int, poll: float) -> dict[str, Any]:
    stamps = [Stamp(first=i == 0) for i in range(asks)]
    steps = [Step(when=stamps[i], text=f"Step {i}.", command=f"echo {i} > f{i}.txt") for i in range(asks)]
    steps.append(Step(when="tool_result", text="FINAL: all written."))
    model = ScriptedModel(steps)
    url = model.start()
    http = httpx.Client(
        base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30
    )
    try:
        env = environment_object(
            ENVIRONMENT,
            {
                "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_API_KEY": "sk-ant-bench",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        asyncio.run(_apply(stack, env))
        r = http.post(
            "/api/sessions",
            json={
                "name": SESSION,
                "environment": ENVIRONMENT,
                "message": "write the files",
                "approvals": "ask",
            },
        )
        r.raise_for_status()
        seen: list[str] = []
        visible: list[float] = []
        posted: list[float] = []
        deadline = time.monotonic() + 120 + asks * 20
        while len(seen) < asks and time.monotonic() < deadline:
            pend = http.get(f"/api/sessions/{SESSION}/approvals").json()["pending"]
            new = [a for a in pend if a["id"] not in seen]
            if not new:
                time.sleep(poll)
                continue
            a = new[0]
            visible.append(time.time())
            seen.append(a["id"])
            posted.append(time.time())
            http.post(
                f"/api/sessions/{SESSION}/approvals/{a['id']}", json={"decision": "allow"}
            ).raise_for_status()
            log(f"ask {len(seen)}/{asks}: {a['id']} {a['command']}")
        done_deadline = time.monotonic() + 60
        while time.monotonic() < done_deadline:
            t = http.get(f"/api/sessions/{SESSION}/turns/1").json()
            if t["phase"] in ("Completed", "Failed", "Interrupted"):
                break
            time.sleep(0.2)
        listing = http.get(f"/api/sessions/{SESSION}/approvals", params={"limit": 500}).json()
        by_id = {a["id"]: a for a in listing["recent"]}
        leg_a: list[float] = []
        leg_b: list[float] = []
        leg_rest: list[float] = []
        leg_asked: list[float] = []
        leg_written: list[float] = []
        for i, ident in enumerate(seen):
            a = by_id.get(ident) or {}
            reply = stamps[i].at
            if reply is not None:
                leg_a.append((visible[i] - reply) * 1000)
            requested = wall(a.get("requested_at"))
            if requested is not None:
                leg_rest.append((visible[i] - requested) * 1000)
            # The sandbox's word on when the driver read the CLI's prompt: where "the agent asked" is.
            asked = wall(a.get("sandbox_asked_at"))
            if asked is not None:
                leg_asked.append((visible[i] - asked) * 1000)
                if requested is not None:
                    leg_written.append((requested - asked) * 1000)
            delivered = wall(a.get("delivered_at"))
            if delivered is not None:
                leg_b.append((delivered - posted[i]) * 1000)
        return {
            "asks": len(seen),
            "turn": t["phase"],
            "asked_to_pending_visible_ms": summary(leg_asked) if leg_asked else None,
            "of_which_asked_to_status_ms": summary(leg_written) if leg_written else None,
            "of_which_status_to_rest_ms": summary(leg_rest) if leg_rest else None,
            "request_to_pending_visible_ms": summary(leg_a) if leg_a else None,
            "decision_to_delivered_ms": summary(leg_b) if leg_b else None,
            "round_trip_overhead_ms": summary([x + y for x, y in zip(leg_a, leg_b, strict=False)])
            if leg_a and leg_b
            else None,
        }
    finally:
        http.delete(f"/api/sessions/{SESSION}")
        http.close()
        model.stop()


def bench_floor(asks: int) -> dict[str, Any]:
    """The same prompts with no hangar in between: the driver's Claude adapter in this process, answering
    each ``permission_request`` as it is emitted. Model reply → prompt emitted is the CLI's own share of the
    first leg; ``answer()`` is all the second leg costs without hangar."""
    from hangar_driver.adapters import make_harness
    from hangar_driver.harness import TurnConfig

    stamps = [Stamp(first=i == 0) for i in range(asks)]
    steps = [Step(when=stamps[i], text=f"Step {i}.", command=f"echo {i} > f{i}.txt") for i in range(asks)]
    steps.append(Step(when="tool_result", text="FINAL: all written."))
    model = ScriptedModel(steps)
    url = model.start()
    tmp = Path(tempfile.mkdtemp(prefix="hangar-bench-floor-"))
    prompted: list[float] = []
    answering: list[float] = []
    ended = threading.Event()
    harness: Any = None

    def emit(name: str, payload: dict[str, Any]) -> None:
        if name == "permission_request":
            prompted.append(time.time())
            t0 = time.perf_counter()
            harness.answer(payload["request_id"], "allow")
            answering.append((time.perf_counter() - t0) * 1000)
        elif name == "turn_ended":
            ended.set()

    try:
        (tmp / "home").mkdir()
        (tmp / "work").mkdir()
        env = {
            "PATH": f"{cli_dir() / 'node_modules' / '.bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(tmp / "home"),
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "sk-ant-bench",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        harness = make_harness("claude", emit)
        claude = str(cli_dir() / "node_modules" / ".bin" / "claude")
        cfg = TurnConfig("t-floor", "write the files", str(tmp / "work"), env, [claude], None, None, "ask")
        harness.start_turn(cfg)
        ended.wait(60 + asks * 10)
        harness.close()
        legs = [
            (prompted[i] - at) * 1000
            for i, s in enumerate(stamps)
            if (at := s.at) is not None and i < len(prompted)
        ]
        return {
            "asks": len(prompted),
            "reply_to_prompt_ms": summary(legs) if legs else None,
            "answer_call_ms": summary(answering) if answering else None,
        }
    finally:
        model.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def _apply(stack: Stack, body: dict[str, Any]) -> None:
    from hangar.kube import ApiException, Kube

    kube = await Kube.connect(str(stack.kubeconfig), stack.namespace)
    try:
        try:
            await kube.create("environments", body)
        except ApiException as e:
            if e.status != 409:
                raise
            await kube.patch("environments", ENVIRONMENT, {"spec": body["spec"]})
    finally:
        await kube.close()


def table(out: dict[str, Any]) -> str:
    lines = [f"# approvals bench, {out['date']} ({out['machine']})", ""]
    e = out.get("engine")
    if e:
        m = e["micros"]
        lines.append(
            f"deny-risky decision, engine alone: {e['calls']} calls over {e['corpus']} tool calls "
            f"({e['denied_share']:.0%} denied); without the 20,000-character one: p50 {m['p50']:.0f} µs, "
            f"p99 {m['p99']:.0f} µs, max {m['max']:.0f} µs"
        )
        if e.get("micros_20k_command"):
            m = e["micros_20k_command"]
            lines.append(
                f"  the 20,000-character command alone: p50 {m['p50']:.0f} µs, p99 {m['p99']:.0f} µs"
            )
        if e.get("cpu_micros"):
            m, long = e["cpu_micros"], e.get("cpu_micros_20k_command")
            lines.append(
                f"  CPU time of this thread: the usual calls p50 {m['p50']:.0f} µs, p99 {m['p99']:.0f} µs; "
                + (
                    f"the 20,000-character command min {long['min']:.0f} µs, p50 {long['p50']:.0f} µs"
                    if long
                    else ""
                )
            )
    rows = out.get("scaling")
    if rows:
        lines.append(
            "deny-risky decision by the command's length (the rules read at most 65,536 characters):"
        )
        for r in rows:
            m = r["ms"]
            lines.append(
                f"  {r['shape']:8} {r['chars']:>9,} chars: p50 {m['p50']:8.3f} ms, p99 {m['p99']:8.3f} ms, "
                f"CPU min {r['cpu_ms']['min']:8.3f} p50 {r['cpu_ms']['p50']:8.3f} ms, "
                f"{r['us_per_kchar']:6.1f} µs per 1,000 chars "
                f"(n={m['n']}) -> {r['verdict']}"
            )
    a = out.get("ask")
    if a:
        lines.append(f"ask round trip ({a['asks']} approvals in one Claude turn, turn {a['turn']}):")
        lines += _percentiles(
            a,
            0,
            ("asked_to_pending_visible_ms", "the agent asks (the driver reads its prompt) → pending on REST"),
            (
                "of_which_asked_to_status_ms",
                "  of which: asked → requestedAt (the driver, the operator's reads)",
            ),
            (
                "of_which_status_to_rest_ms",
                "  of which: requestedAt → visible (the writes, the watch, the poll)",
            ),
            ("request_to_pending_visible_ms", "model reply → pending visible (REST; the CLI's share in it)"),
            ("decision_to_delivered_ms", "decision (POST) → delivered to the CLI"),
            ("round_trip_overhead_ms", "round-trip overhead (both legs)"),
        )
    f = out.get("floor")
    if f:
        lines.append(f"floor, the driver's Claude adapter alone ({f['asks']} prompts, answered as emitted):")
        lines += _percentiles(
            f,
            1,
            ("reply_to_prompt_ms", "model reply → permission prompt emitted (the CLI's share)"),
            ("answer_call_ms", "answer() → written to the CLI"),
        )
    return "\n".join(lines)


def _percentiles(part: dict[str, Any], digits: int, *rows: tuple[str, str]) -> list[str]:
    """A line for each (key, label) the part has: its p50 and p99 in ms with ``digits`` decimals."""
    out = []
    for key, label in rows:
        m = part.get(key)
        if m:
            out.append(f"  {label}: p50 {m['p50']:.{digits}f} ms, p99 {m['p99']:.{digits}f} ms (n={m['n']})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000, help="deny-risky engine calls (default 20000)")
    ap.add_argument(
        "--scaling", type=int, default=20, help="scale of the length samples (default 20: 20 of 20k chars)"
    )
    ap.add_argument("--asks", type=int, default=30, help="ask round trips (default 30; 0 skips the stack)")
    ap.add_argument("--poll", type=float, default=0.01, help="seconds between REST polls (default 0.01)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    if a.asks > 0 and claude_missing():
        return 2
    out = header({"calls": a.calls, "asks": a.asks, "poll": a.poll})
    try:
        with bench_run(a.keep_logs) as br:
            if a.calls > 0:
                log(f"deny-risky engine: {a.calls} calls")
                out["engine"] = bench_engine(a.calls)
                log("deny-risky engine: the length scaling")
                out["scaling"] = bench_scaling(a.scaling)
            if a.asks > 0:
                _, stack = br.start()
                log("floor: the Claude adapter alone")
                out["floor"] = bench_floor(a.asks)
                out["ask"] = bench_ask(stack, a.asks, a.poll)
    except KeyboardInterrupt:
        log("interrupted: cleaned up")
        return 130
    return print_result(out, a.json, table)


if __name__ == "__main__":
    sys.exit(main())
