"""Figures of sessions: sandbox connect latency and turn time, each beside the floor it is compared to.

Run: .venv/bin/python bench/sessions.py [--sessions N] [--turns N] [--json] [--poll S] [--keep-logs]

It starts everything it measures on this machine, the way the end-to-end tests do (tests/e2e/conftest.py): a local
control plane (etcd, kube-apiserver, controller-manager, scheduler) with hangar's CRDs, a Stack (operator, API
and the local pod runner as processes) and a ScriptedModel that answers every model request with
``FINAL: ok``. The bench Environment gives the agent the same quiet environment as the floor CLI
(CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, DISABLE_TELEMETRY, DISABLE_AUTOUPDATER, DISABLE_ERROR_REPORTING), so
both sides run the CLI alike. Everything it started is stopped on exit, Ctrl-C and SIGTERM included.

**Connect latency** (N sessions, one after another, each deleted before the next so HANGAR_MAX_SANDBOXES never
matters; one warm-up of each side first, not counted): ``POST /api/sessions`` (no message) → the session's
``sandbox.connected`` is true, seen by a watch on the Session (``--ready poll``: polled through the REST API
every ``--poll`` seconds, as before). Two floors on the same control plane and node: a bare pod
(``python3 -c 'import time; time.sleep(60)'``, no volumes), create → ``status.phase == Running``, seen the same
way (a watch, or a poll of the apiserver); and a pod like hangar's sandbox (``bench/_dial_floor.py``: the same
Secret, PVC, volumes and init copy of the driver) whose ``python3 -c`` dials a listener of this bench, create
of the Secret → the listener has its line (``--no-dial`` leaves it out).

**Turn time** (M turns in one Claude session): ``POST /api/sessions/{name}/messages`` → the turn's phase is
Completed, polled through the REST API every 20 ms. Floor: the same ``claude`` CLI run directly with the flags
hangar's driver uses (sandbox-image/hangar_driver/claude.py), one user message on stdin, spawn → the
``result`` line (``--resume`` of its own previous conversation from the second run on, as hangar does, so both
conversations grow alike).

Floor and hangar samples are interleaved (floor i, then hangar i) so a burst of load from elsewhere on the
machine hits both sides alike. Every figure is printed beside its floor with the ratio: on a shared, noisy
machine the ratio is the figure to compare, not the seconds.

Besides the figures it prints where the time goes (medians of stamps taken on the way: the pod watch, status
timestamps the operator writes, activity events, model request arrivals) and the CPU seconds each process
spent per sample (from /proc; the 20 ms polling is part of it, so ``--poll`` shows what observing costs).

Progress goes to stderr; the table (or, with --json, one JSON document with every sample) to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self, TypeVar

from _dial_floor import DialListener, dial_sample
from _kube import NAMESPACE, TIMEOUT, Cluster, bare_pod
from _observe import Costs, CpuMeter, PodTimes, Stamps, cpu_meter, find_driver
from _sessions_report import POLL, connect_flags, report, table  # connect_flags: warm_pool.py's too
from _stack import (  # bench/ is the script's directory, so on sys.path
    API_KEY,
    SYSTEM_PATH,
    bench_run,
    claude_env,
    claude_missing,
    header,
    print_result,
    use_driver_mount,
    wall,
)
from _stats import log
from _watch import call

from hangar.devcluster.stack import Stack
from hangar.paths import cli_dir
from hangar.testing.model_server import ScriptedModel, Step
from hangar_driver.claude import live_command
from hangar_driver.claude_turn import user_line
from hangar_driver.harness import TurnConfig

MODEL = "claude-sonnet-4-5"
ENVIRONMENT = "bench-claude"


# -- the bench -----------------------------------------------------------------------------------------------------


class Bench(Cluster):
    def __init__(
        self,
        stack: Stack,
        kubeconfig: Path,
        model: ScriptedModel,
        stamps: Stamps,
        work: Path,
        poll: float = POLL,
        cpu: CpuMeter | None = None,
        ready: str = "watch",
    ) -> None:
        super().__init__(stack, kubeconfig)
        self.poll = poll
        self.ready = ready  # how both sides' "ready" is seen: "watch" or "poll" (every `poll` seconds)
        self.cpu = cpu or CpuMeter({})
        self.model = model
        self.stamps = stamps
        self.work = work
        self.children: list[Any] = []  # floor CLI runs, killed on the way out
        self.dial = DialListener()
        self.costs: Costs | None = None  # set: each connect and dial sample records what its window cost
        self.message: str | None = None  # set: connect samples' sessions are created with it (spec.prompt)

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        self.pods = PodTimes(self.kapi)
        self.pods.start()
        await self.dial.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for p in self.children:
            _kill_group(p)
        await self.dial.stop()
        await self.pods.stop()
        await super().__aexit__(*exc)

    # -- setup -----------------------------------------------------------------------------------------------

    async def environment(self, name: str = ENVIRONMENT, **spec: Any) -> None:
        await self.create_environment(name, claude_env(self.model), **spec)

    # -- hangar side -----------------------------------------------------------------------------------------

    async def create_session(self, name: str, model: str | None = None, message: str | None = None) -> float:
        body: dict[str, Any] = {"name": name, "environment": ENVIRONMENT, "harness": "claude"}
        if model:
            body["model"] = model
        if message:
            body["message"] = message
        t0 = time.monotonic()
        r = await self.http.post("/api/sessions", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"POST /api/sessions: {r.status_code} {r.text}")
        return t0

    async def wait_connected(self, name: str, t0: float) -> dict[str, Any]:
        """The session once its sandbox is connected (its status.sandbox; watched, or polled on the API)."""
        if self.ready == "watch":

            def connected(obj: dict[str, Any]) -> bool:
                st = obj.get("status") or {}
                if st.get("phase") == "Failed":
                    raise RuntimeError(f"session {name} failed: {st.get('message')}")
                return bool((st.get("sandbox") or {}).get("connected"))

            left = max(1.0, TIMEOUT - (time.monotonic() - t0))
            obj = await self.until_custom("hangar.dev", "v1alpha1", "sessions", name, connected, left)
            return dict(obj["status"])
        while True:
            r = await self.http.get(f"/api/sessions/{name}")
            if r.status_code == 200:
                s = r.json()
                if (s.get("sandbox") or {}).get("connected"):
                    return dict(s)
                if s.get("phase") == "Failed":
                    raise RuntimeError(f"session {name} failed: {s.get('message')}")
            if time.monotonic() - t0 > TIMEOUT:
                raise TimeoutError(f"session {name} not connected after {TIMEOUT}s: {r.text[:2000]}")
            await asyncio.sleep(self.poll)

    async def delete_session(self, name: str, pod: str | None) -> None:
        r = await self.http.delete(f"/api/sessions/{name}")
        if r.status_code not in (202, 404):
            raise RuntimeError(f"DELETE /api/sessions/{name}: {r.status_code} {r.text}")
        # Gone for good (finalizers, the garbage collector, the runner stopping the pod) before the next sample.
        await self.wait_gone(
            f"session {name} or its pod {pod}",
            lambda: self.custom.get_namespaced_custom_object(
                "hangar.dev", "v1alpha1", NAMESPACE, "sessions", name
            ),
            *([self.pod_gone(pod)] if pod else []),
        )

    async def event_times(self, name: str, turn: str | None = None) -> dict[str, float]:
        """When the operator recorded each activity event (its `at`), first of each kind; read after timing."""
        r = await self.http.get(f"/api/sessions/{name}/events", params={"limit": 1000})
        out: dict[str, float] = {}
        if r.status_code != 200:
            return out
        for e in r.json()["events"]:
            if turn is not None and e.get("turn") != turn:
                continue
            at = wall(e.get("at"))
            if at is not None:
                out.setdefault(e["kind"], at)
            if e["kind"] == "turn_started" and e.get("prestarted"):
                out.setdefault("prestarted", 1.0)  # its CLI was started ahead of it (live.py)
        return out

    async def connect_sample(self, i: int) -> dict[str, Any]:
        name = f"bench-c{i}"
        mark = await self.costs.mark() if self.costs else None
        c0 = self.cpu.snapshot()
        w0 = time.time()
        t0 = await self.create_session(name, message=self.message)
        t_post = time.monotonic()
        s = await self.wait_connected(name, t0)
        total = time.monotonic() - t0
        cpu = self.cpu.delta(c0, self.cpu.snapshot())
        costs = await self.costs.since(mark) if self.costs and mark else None
        pod = s["sandbox"].get("pod")
        started = wall(s["sandbox"].get("started_at") or s["sandbox"].get("startedAt"))
        ev = await self.event_times(name)
        sample = {
            "total": total,
            "post": t_post - t0,  # the REST call itself
            **self.pods.stages(pod, w0),
            "to_status_started": (started - w0) if started else None,
            "to_driver_connected_event": (ev["driver_connected"] - w0) if "driver_connected" in ev else None,
            "cpu": cpu,
            **({"costs": costs} if costs else {}),
        }
        await self.delete_session(name, pod)
        return sample

    async def send(self, name: str, message: str) -> tuple[float, int]:
        t0 = time.monotonic()
        r = await self.http.post(f"/api/sessions/{name}/messages", json={"message": message})
        if r.status_code != 202:
            raise RuntimeError(f"POST messages: {r.status_code} {r.text}")
        return t0, int(r.json()["turn"]["index"])

    async def turn_sample(self, name: str, k: int) -> dict[str, Any]:
        c0 = self.cpu.snapshot()
        w0 = time.time()
        t0, n = await self.send(name, f"bench turn {k}: answer briefly")
        while True:
            r = await self.http.get(f"/api/sessions/{name}/turns/{n}")
            if r.status_code == 200:
                t = r.json()
                if t["phase"] in ("Completed", "Failed", "Interrupted", "NeedsInput"):
                    break
            if time.monotonic() - t0 > TIMEOUT:
                raise TimeoutError(f"turn {n} of {name} not done after {TIMEOUT}s: {r.text[:2000]}")
            await asyncio.sleep(self.poll)
        total = time.monotonic() - t0
        cpu = self.cpu.delta(c0, self.cpu.snapshot())
        w1 = time.time()
        if t["phase"] != "Completed":
            raise RuntimeError(f"turn {n} of {name} ended {t['phase']}: {t.get('reason')} {t.get('summary')}")
        reqs = self.stamps.between(w0, w1)
        started, finished = wall(t.get("started_at")), wall(t.get("finished_at"))
        ev = await self.event_times(name, t["name"])

        def since(kind: str) -> float | None:
            return (ev[kind] - w0) if kind in ev else None

        return {
            "total": total,
            "to_turn_started": (started - w0) if started else None,
            "to_driver_turn_started_event": since("turn_started"),
            "to_first_model_request": (reqs[0] - w0) if reqs else None,
            "to_last_model_request": (reqs[-1] - w0) if reqs else None,
            "to_first_text_event": since("text"),
            "to_turn_ended_event": since("turn_ended"),
            "to_turn_finished": (finished - w0) if finished else None,
            "model_requests": len(reqs),
            "prestarted": "prestarted" in ev,
            "cpu": cpu,
        }

    # -- floors ----------------------------------------------------------------------------------------------

    async def floor_pod(self, i: int) -> dict[str, Any]:
        name = f"bench-floor-{i}"
        # Its cwd is under the stack root, so stop_all() reaches a leftover process.
        body = bare_pod(name, self.work / "floor-pods")
        c0 = self.cpu.snapshot()
        w0 = time.time()
        t0 = time.monotonic()
        await call(self.core.create_namespaced_pod, NAMESPACE, body)  # JSON only, as every side's watch
        if self.ready == "watch":
            await self.until_pod_running(name)
        else:
            while True:
                pod = await self.core.read_namespaced_pod(name, NAMESPACE)
                if pod.status and pod.status.phase == "Running":
                    break
                if pod.status and pod.status.phase in ("Failed", "Succeeded"):
                    raise RuntimeError(f"floor pod {name} ended {pod.status.phase}: {pod.status.message}")
                if time.monotonic() - t0 > TIMEOUT:
                    raise TimeoutError(f"floor pod {name} not Running after {TIMEOUT}s")
                await asyncio.sleep(self.poll)
        total = time.monotonic() - t0
        cpu = self.cpu.delta(c0, self.cpu.snapshot())
        sample = {"total": total, "cpu": cpu, **self.pods.stages(name, w0)}
        await self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        await self.wait_gone(f"floor pod {name}", self.pod_gone(name))
        return sample

    async def floor_dial(self, i: int) -> dict[str, Any]:
        """A pod made like hangar's sandbox whose python dials the bench (``bench/_dial_floor.py``)."""
        mark = await self.costs.mark() if self.costs else None
        c0 = self.cpu.snapshot()
        costs = self.costs

        async def at_end() -> dict[str, Any]:  # the line arrived: the window's end, before the clean-up
            cpu = self.cpu.delta(c0, self.cpu.snapshot())
            return {"cpu": cpu, **({"costs": await costs.since(mark)} if costs and mark else {})}

        sample = await dial_sample(self, self.dial, f"bench-dial-{i}", at_end)
        sample.update(self.pods.stages(sample.pop("pod"), sample.pop("w0")))
        return sample

    async def floor_cli(self, k: int, home: Path, work: Path, conversation: str | None) -> dict[str, Any]:
        claude = cli_dir() / "node_modules" / ".bin" / "claude"
        base = {
            "PATH": f"{claude.parent}:{SYSTEM_PATH}",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": self.model.anthropic_base_url,
            "ANTHROPIC_API_KEY": API_KEY,
        }
        # Exactly the command the driver's Claude adapter runs for a turn under approvals "auto".
        argv, added = live_command(
            TurnConfig("floor", "", str(work), base, [str(claude)], MODEL, conversation)
        )
        env = {**base, **added}
        # The user line the driver writes, with a uuid of our own.
        line = user_line(f"bench turn {k}: answer briefly", f"00000000-0000-4000-8000-{k:012d}")
        c0 = self.cpu.snapshot()
        w0 = time.time()
        t0 = time.monotonic()
        p = await asyncio.create_subprocess_exec(
            *argv,
            cwd=str(work),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.children.append(p)
        assert p.stdin and p.stdout and p.stderr
        p.stdin.write((json.dumps(line) + "\n").encode())
        await p.stdin.drain()
        result: dict[str, Any] | None = None
        session_id = conversation
        err_task = asyncio.create_task(p.stderr.read())
        try:
            async with asyncio.timeout(TIMEOUT):
                while True:
                    raw = await p.stdout.readline()
                    if not raw:
                        break
                    try:
                        obj = json.loads(raw)
                    except ValueError:
                        continue
                    if obj.get("type") == "system" and obj.get("subtype") == "init":
                        session_id = obj.get("session_id") or session_id
                    if obj.get("type") == "result":
                        result = obj
                        break
                t_result = time.monotonic() - t0
                # As hangar's adapter does once the result is in: close stdin and wait for the exit.
                p.stdin.close()
                await p.stdout.read()
                code = await p.wait()
                t_exit = time.monotonic() - t0
        finally:
            if p.returncode is None:
                _kill_group(p)
                await p.wait()
            self.children.remove(p)
        cpu = self.cpu.delta(c0, self.cpu.snapshot())
        stderr = (await err_task).decode(errors="replace")
        if result is None or result.get("is_error"):
            raise RuntimeError(
                f"floor claude run {k}: exit {p.returncode}, result {result}, stderr {stderr[-2000:]}"
            )
        reqs = self.stamps.between(w0, time.time())
        return {
            "total": t_result,
            "to_exit": t_exit,
            "exit_code": code,
            "to_first_model_request": (reqs[0] - w0) if reqs else None,
            "to_last_model_request": (reqs[-1] - w0) if reqs else None,
            "model_requests": len(reqs),
            "cpu": cpu,
            "conversation": session_id,
        }

    # -- the two measurements --------------------------------------------------------------------------------

    async def connect(self, n: int, dial: bool = True) -> dict[str, Any]:
        # One warm-up of each (first pod on the node, first driver start, cold caches), not counted.
        log("connect: warm-up (not counted)")
        await self.floor_pod(-1)
        if dial:
            await self.floor_dial(-1)
        await self.connect_sample(-1)
        hangar, floor, dialled = [], [], []
        for i in range(n):
            f = await self.floor_pod(i)
            d = await self.floor_dial(i) if dial else None
            h = await self.connect_sample(i)
            floor.append(f)
            hangar.append(h)
            line = f"connect {i + 1}/{n}: hangar {h['total']:.3f} s   bare pod {f['total']:.3f} s"
            if d is not None:
                dialled.append(d)
                line += f"   pod like hangar's dialling {d['total']:.3f} s"
            log(line)
        return {"hangar": hangar, "floor": floor, **({"dial": dialled} if dial else {})}

    async def turns(self, m: int) -> dict[str, Any]:
        name = "bench-turns"
        t0 = await self.create_session(name, model=MODEL)
        await self.wait_connected(name, t0)
        driver = find_driver(name)
        if driver is not None:
            self.cpu.pids["sandbox driver"] = driver
        home = self.work / "floor-home"
        cwd = self.work / "floor-work"
        home.mkdir(parents=True, exist_ok=True)
        cwd.mkdir(parents=True, exist_ok=True)
        conversation: str | None = None
        hangar, floor = [], []
        for k in range(1, m + 1):
            f = await self.floor_cli(k, home, cwd, conversation)
            conversation = f.pop("conversation")
            h = await self.turn_sample(name, k)
            floor.append(f)
            hangar.append(h)
            log(
                f"turn {k}/{m}: hangar {h['total']:.3f} s   claude direct {f['total']:.3f} s "
                f"(exit {f['to_exit']:.3f} s)   model requests {h['model_requests']}/{f['model_requests']}"
                f"{'   CLI pre-started' if h['prestarted'] else ''}"
            )
        self.cpu.pids.pop("sandbox driver", None)
        await self.delete_session(name, None)
        return {"hangar": hangar, "floor": floor}


def _kill_group(p: Any) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- main ----------------------------------------------------------------------------------------------------------


B = TypeVar("B", bound=Bench)


def with_bench(a: argparse.Namespace, kind: type[B], measure: Callable[[B], Awaitable[None]]) -> bool:
    """``measure`` on a bench of ``kind`` over a started stack (its node Ready), all stopped after; False when
    interrupted (Ctrl-C or SIGTERM). ``a.costs`` (when the bench has the flag): each connect and dial sample
    records its window's CPU per process and apiserver requests."""
    use_driver_mount(a)
    try:
        with bench_run(a.keep_logs) as br:
            cp, stack = br.start()
            stamps = Stamps()
            model = br.model(ScriptedModel([Step(when=stamps, text="FINAL: ok", repeat=True, name="bench")]))

            async def run() -> None:
                work = br.root / "bench"
                cpu = cpu_meter(stack, cp)
                async with kind(stack, cp.kubeconfig, model, stamps, work, a.poll, cpu, a.ready) as b:
                    if getattr(a, "costs", False):
                        b.costs = Costs(cpu, cp)
                    await b.wait_node()
                    await measure(b)

            asyncio.run(run())
    except KeyboardInterrupt:
        log("interrupted: cleaned up")
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20, help="connect-latency samples (default 20)")
    ap.add_argument("--turns", type=int, default=10, help="turn-time samples (default 10)")
    connect_flags(ap)
    a = ap.parse_args()
    if claude_missing():
        return 2
    res = header(
        {"sessions": a.sessions, "turns": a.turns, "poll": a.poll, "ready": a.ready, "dial": not a.no_dial}
    )

    async def measure(b: Bench) -> None:
        await b.environment()
        if a.sessions > 0:
            res["connect"] = await b.connect(a.sessions, not a.no_dial)
        if a.turns > 0:
            res["turns"] = await b.turns(a.turns)

    if not with_bench(a, Bench, measure):
        return 130
    return print_result(report(res, samples=a.json), a.json, table)


if __name__ == "__main__":
    sys.exit(main())
