"""Tower's decision → the resumed turn running, beside a bare pod create → Running in the same run (the resume
part of ``bench/governance.py``).

Everything real: a local control plane with hangar's CRDs, the operator, the api and the local pod runner as
processes with Tower enforcing (suspend after 1 s), a Tower simulator (its decisions API, its signing outbox
delivering to the api's webhook), a ScriptedModel and the real Claude Code CLI.

Each sample: a session under ``governed`` whose first turn asks for a force-push; it waits on Tower, is
suspended (checkpoint, pod released), and then, timed from the moment the simulator is told to allow it, the
signed ``approval.decided`` goes out, hangar re-reads the decision, resumes the session, takes a slot, starts a
new sandbox on the workspace volume, its driver connects and turn 2 is ``Running`` (polled through the REST
API every 20 ms). Floor: a bare pod (``python3 -c 'import time; time.sleep(60)'``, no volumes) create →
``status.phase == Running`` on the same control plane and node, polled on the apiserver every 20 ms. Floor
and resume samples alternate, so a burst of load from elsewhere hits both alike.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import httpx
from _kube import bare_pod
from _stack import bench_run, claude_missing, kubectl, wall
from _stats import log, summary

from hangar.devcluster import binaries, scripted_envs
from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step
from hangar.testing.tower import TowerSimulator

SECRET = b"bench-resume-webhook-secret"
CREDENTIAL = "bench-resume-credential"
ENVIRONMENT = "bench-gov"
PUSH = "git push --force origin main || echo ran >> ran.txt"
POLL = 0.02
TIMEOUT = 240.0


def _until(check: Any, what: str, timeout: float = TIMEOUT, poll: float = POLL) -> Any:
    t0 = time.monotonic()
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(poll)


class Resumes:
    def __init__(self, stack: Stack, kubectl: list[str], tower: TowerSimulator, model: ScriptedModel) -> None:
        self.stack, self.kubectl, self.tower, self.model = stack, kubectl, tower, model
        self.http = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30
        )
        self.work = (
            stack.root / "floor-pods"
        )  # under the stack root, so stop_all() reaches a leftover process
        self.work.mkdir(parents=True, exist_ok=True)

    def session(self, name: str) -> dict[str, Any]:
        r = self.http.get(f"/api/sessions/{name}")
        return dict(r.json()) if r.status_code == 200 else {}

    def turn_phase(self, name: str, n: int) -> str:
        r = self.http.get(f"/api/sessions/{name}/turns/{n}")
        return str(r.json().get("phase")) if r.status_code == 200 else ""

    def sample(self, i: int) -> dict[str, Any]:
        name = f"bench-resume-{i}"
        self.model.add(
            Step(when=f"FIRST{i}", text="Pushing.", command=PUSH),
            Step(when="tool_result:Paused for approval", text="FINAL: waiting for the approval.", delay=5),
        )
        body = {
            "name": name,
            "environment": ENVIRONMENT,
            "harness": "claude",
            "message": f"FIRST{i}: push the branch",
            "approvals": "governed",
        }
        r = self.http.post("/api/sessions", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"POST /api/sessions: {r.status_code} {r.text}")
        s = _until(lambda: (x := self.session(name)).get("phase") == "Suspended" and x, f"{name} suspended")
        receipt = s["suspended"]["tower"]
        self.model.add(
            Step(when="was approved by", text="Pushing again.", command=PUSH),
            Step(when="tool_result", text="FINAL: pushed."),
        )
        w0 = time.time()
        t0 = time.monotonic()
        delivery = self.tower.decide(receipt, "allowed", by="bench@acme.test")
        _until(lambda: self.turn_phase(name, 2) in ("Running", "Completed"), f"{name} turn 2 running")
        total = time.monotonic() - t0
        if not delivery.done.wait(30) or delivery.final != 200:
            raise RuntimeError(f"the decision's delivery: {delivery.attempts}")
        _until(lambda: self.turn_phase(name, 2) == "Completed", f"{name} turn 2 completed")
        stamps = self.stamps(name, w0)
        self.delete(name)
        return {"total": total, **stamps}

    def stamps(self, name: str, w0: float) -> dict[str, float]:
        """Where the time went: the session's activity events after the decision, seconds from it."""
        r = self.http.get(f"/api/sessions/{name}/events", params={"limit": 1000})
        out: dict[str, float] = {}
        for e in r.json().get("events", []) if r.status_code == 200 else []:
            at = wall(e.get("at"))
            if at is not None and at >= w0 and e["kind"] in ("resumed", "sandbox_starting", "turn_started"):
                out.setdefault(e["kind"], at - w0)
        return out

    def delete(self, name: str) -> None:
        self.http.delete(f"/api/sessions/{name}")
        _until(lambda: self.http.get(f"/api/sessions/{name}").status_code == 404, f"{name} deleted", 60, 0.1)
        self.run("delete", "pods", "-l", f"hangar.dev/session={name}", "--wait=true", "--timeout=60s")

    def run(self, *args: str, input: str | None = None) -> str:
        out = subprocess.run([*self.kubectl, *args], input=input, capture_output=True, text=True, check=True)
        return out.stdout

    def floor(self, i: int) -> dict[str, Any]:
        name = f"bench-floor-{i}"
        pod = bare_pod(name, self.work)
        t0 = time.monotonic()
        self.run("create", "-f", "-", input=json.dumps(pod))
        phase = "jsonpath={.status.phase}"
        _until(lambda: self.run("get", "pod", name, "-o", phase) == "Running", f"{name} Running")
        total = time.monotonic() - t0
        self.run("delete", "pod", name, "--wait=true", "--grace-period=0", "--timeout=60s")
        return {"total": total}


def resume_latency(n: int, keep_logs: bool) -> dict[str, Any]:
    if claude_missing():
        return {"skipped": "the claude CLI is not installed"}
    tower = TowerSimulator(credential=CREDENTIAL, secrets=[SECRET], retry_delays=(0.3,), max_attempts=40)
    tower.start()
    try:
        with bench_run(keep_logs) as r:
            log("resume: control plane, then a stack with Tower enforcing")
            bins = binaries.ensure()
            r.cp = ControlPlane(bins, r.cp_dir).start(crds=True)
            kctl = kubectl(r.cp)
            secret = f"--from-literal=webhook-secret={SECRET.decode()}"
            subprocess.run(
                [*kctl, "create", "secret", "generic", "tower-webhook", secret],
                check=True,
                capture_output=True,
            )
            model = r.model(ScriptedModel())
            r.stack = Stack(
                r.root,
                r.cp.kubeconfig,
                extra_env={
                    "HANGAR_GOVERNANCE": "enforce",
                    "HANGAR_GOVERNANCE_WEBHOOK_SECRET": "tower-webhook",
                    "HANGAR_GOVERNANCE_URL": tower.url,
                    "HANGAR_GOVERNANCE_CREDENTIAL": CREDENTIAL,
                    "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS": "1",
                },
            )
            r.stack.start_operator()
            r.stack.start_api()
            r.stack.start_runner()
            tower.webhook_url = r.stack.api_url + "/api/governance/events"
            env = scripted_envs.environment(ENVIRONMENT, model.base_url, ("claude",))
            subprocess.run(
                [*kctl, "apply", "-f", "-"],
                input=json.dumps(env),
                text=True,
                check=True,
                capture_output=True,
            )
            bench = Resumes(r.stack, kctl, tower, model)
            log("resume: one warm-up of each side, not counted")
            bench.floor(-1)
            bench.sample(-1)
            floors, resumes = [], []
            for i in range(n):
                floors.append(bench.floor(i))
                resumes.append(bench.sample(i))
                log(
                    f"resume {i + 1}/{n}: decision → turn running {resumes[-1]['total']:.2f} s, "
                    f"bare pod {floors[-1]['total']:.2f} s"
                )
            where = {
                k: summary([x[k] for x in resumes if k in x])["p50"]
                for k in ("resumed", "sandbox_starting", "turn_started")
                if any(k in x for x in resumes)
            }
            return {
                "resume": summary([x["total"] for x in resumes]),
                "floor_pod": summary([x["total"] for x in floors]),
                "where_p50": where,
                "samples": {"resume": resumes, "floor_pod": floors},
            }
    finally:
        tower.stop()
