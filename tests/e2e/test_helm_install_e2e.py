"""The chart installed for real: `helm install` onto a control plane of its own (RBAC on), the local pod runner
runs the hangar pod (operator and api as the chart's ServiceAccount, with the chart's env, volumes and
probes), a session's turn runs the real Claude Code against the scripted model, then `helm upgrade` (a values
change, and a wedged operator restarted by its liveness probe) and `helm uninstall` (the PVC and the CRDs stay).

It has a control plane of its own: the session-wide one's runner would compete for this release's pods and
volumes, and helm must install the CRDs itself here.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hangar.devcluster import binaries
from hangar.devcluster.controlplane import ControlPlane, free_port, stop_process
from hangar.devcluster.stack import environment_object, sandbox_image_copy
from hangar.paths import cli_dir
from hangar.testing.model_server import ScriptedModel, Step

from ..unit.test_helm_chart import CHART, _helm_env, helm_binary
from .conftest import Cluster
from .helpers import clis_installed, wait

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the local runner runs service pods in mount namespaces (root)"
    ),
]

NS = "hangar"


@dataclass
class Release:
    cluster: Cluster
    cp: ControlPlane
    root: Path
    ports: dict[str, int]

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**_helm_env(), "KUBECONFIG": str(self.cp.kubeconfig)}
        r = subprocess.run(
            [str(helm_binary()), *args], capture_output=True, text=True, env=env, timeout=240, check=False
        )
        if check and r.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{r.stderr}\n{self.logs()}")
        return r

    def values(self) -> list[str]:
        p = self.ports
        return [
            # The hangar pod shares this machine's network (local runner): free ports, and sandboxes dial
            # the gateway on loopback (no cluster DNS for the Service's name).
            *("--set", f"api.port={p['api']}", "--set", f"operator.metricsPort={p['metrics']}"),
            *("--set", f"gateway.port={p['gateway']}", "--set", f"gateway.address=127.0.0.1:{p['gateway']}"),
            *("--set", "terminationGracePeriodSeconds=5"),
        ]

    def get(self, *args: str) -> Any:
        return json.loads(self.cluster.kubectl("get", "-n", NS, "-o", "json", *args).stdout)

    def pod(self) -> dict[str, Any]:
        items = self.get("pods", "-l", "app.kubernetes.io/component=control-plane")["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return live[0] if len(live) == 1 else {}

    def ready_pod(self, not_uid: str = "") -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            p = self.pod()
            if not p or p["metadata"]["uid"] == not_uid:
                return None
            conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions") or []}
            return p if conds.get("Ready") == "True" else None

        return dict(wait(ready, 120, "the hangar pod ready", self.logs))

    def logs(self) -> str:
        out = []
        for f in sorted(self.root.rglob("*.log")):
            out.append(f"--- {f.relative_to(self.root)}\n{f.read_text(errors='replace')[-2500:]}")
        return "\n".join(out)[-12000:]

    def token(self) -> str:
        data = self.get("secret", "hangar-auth")["data"]
        return base64.b64decode(data["admin-token"]).decode()

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.ports['api']}",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=30,
        )


@pytest.fixture(scope="module")
def release() -> Iterator[Release]:
    bins = binaries.ensure()
    root = Path(tempfile.mkdtemp(prefix="hangar-chart-e2e-", dir="/tmp"))
    os.chmod(root, 0o755)  # the pods' users (10001, the agent's 1001) pass through to their volumes
    cp = ControlPlane(bins, root / "cp", components=("kube-controller-manager", "kube-scheduler")).start()
    runner_log = (root / "runner.log").open("ab")
    runner = subprocess.Popen(
        [
            *(sys.executable, "-m", "hangar.cli.main", "dev", "runner", "--root", str(root / "runner")),
            *("--kubeconfig", str(cp.kubeconfig)),
            *(
                "--map",
                f"/opt/hangar/lib={sandbox_image_copy(root)}",
                "--map",
                f"/opt/hangar/clis={cli_dir()}",
            ),
        ],
        stdout=runner_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ports = {"api": free_port(), "metrics": free_port(), "gateway": free_port()}
    try:
        yield Release(Cluster(cp.kubeconfig, bins.dir, cp), cp, root, ports)
    finally:
        stop_process(runner.pid, runner, grace=15)
        runner_log.close()
        cp.stop()
        if os.environ.get("HANGAR_KEEP_LOGS"):
            print(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _container_pid(port_var: str, port: int) -> int:
    """The pid of the container process whose environment has ``port_var=port``."""
    needle = f"{port_var}={port}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) == int(d.name) and needle in (d / "environ").read_bytes().split(b"\0"):
                return int(d.name)
        except OSError:
            continue
    raise AssertionError(f"no process with {port_var}={port}")


def _status_uid(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    return int(line.split()[1])


def _turn(api: httpx.Client, session: str, n: int, timeout: float = 120) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        r = api.get(f"/api/sessions/{session}/turns/{n}")
        t = r.json() if r.status_code == 200 else None
        return t if t and t["phase"] in ("Completed", "Failed", "Interrupted", "NeedsInput") else None

    return dict(wait(done, timeout, f"turn {n} of {session}"))


def test_install_session_turn_upgrade_uninstall(release: Release) -> None:
    rel = release
    model = ScriptedModel(
        [
            Step(text="Writing it.", command="echo installed-by-helm > hello.txt"),
            Step(when="tool_result", text="FINAL: wrote hello.txt"),
            Step(when="again", text="FINAL: still here"),
        ]
    )
    url = model.start()
    try:
        # --- values.schema.json: a wrong type or an unknown key fails the install, saying where ----------
        for bad, why in (
            ("sandbox.slots=ten", "at '/sandbox/slots': got string, want integer"),
            ("api.prot=8000", "at '/api': additional properties 'prot' not allowed"),
        ):
            r = rel.helm(
                "install", "hangar", str(CHART), "-n", NS, "--create-namespace", "--set", bad, check=False
            )
            assert r.returncode != 0 and why in r.stderr, r.stderr
        assert "hangar" not in rel.helm("list", "-A", "-q").stdout.split()

        # --- install: CRDs from the chart, RBAC on, the pod as the chart's ServiceAccount -----------------
        rel.helm("install", "hangar", str(CHART), "-n", NS, "--create-namespace", *rel.values())
        for crd in ("sessions", "turns", "environments", "approvals", "jobs"):
            rel.cluster.kubectl("get", "crd", f"{crd}.hangar.dev")
        pod = rel.ready_pod()
        assert pod["spec"]["serviceAccountName"] == "hangar"
        statuses = {c["name"]: c for c in pod["status"]["containerStatuses"]}
        assert set(statuses) == {"operator", "api"} and all(c["ready"] for c in statuses.values())
        operator_pid = _container_pid("HANGAR_OPERATOR_PORT", rel.ports["metrics"])
        api_pid = _container_pid("HANGAR_API_PORT", rel.ports["api"])
        for pid in (operator_pid, api_pid):
            assert _status_uid(pid) == 10001  # the chart's runAsUser
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            # No kubeconfig: the only credential is the mounted ServiceAccount token.
            assert not any(v.startswith(b"KUBECONFIG=") for v in environ)
            assert any(v.startswith(b"KUBERNETES_SERVICE_HOST=") for v in environ)
        tokens = list(
            (rel.root / "runner" / "pods" / pod["metadata"]["uid"]).rglob("kube-api-access-*/token")
        )
        assert tokens, rel.logs()
        review = httpx.post(
            f"{rel.cp.server}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            headers={"Authorization": f"Bearer {tokens[0].read_text()}"},
            verify=ssl.create_default_context(cafile=str(rel.cp.dir / "pki" / "ca.crt")),
        )
        assert review.json()["status"]["userInfo"]["username"] == "system:serviceaccount:hangar:hangar"

        # --- readiness means something: without the RBAC to list what it watches, the operator is unready -
        ready = f"http://127.0.0.1:{rel.ports['metrics']}/readyz"
        assert httpx.get(ready, timeout=10).text == "ok"
        body = httpx.get(ready + "?verbose", timeout=10).text
        assert all(f"{c}: ok" in body for c in ("kopf", "namespaces", "resources", "watches", "gateway")), (
            body
        )
        role = rel.get("role", "hangar")

        def set_rules(rules: list[dict[str, Any]]) -> None:
            meta = {
                k: v for k, v in role["metadata"].items() if k not in ("resourceVersion", "managedFields")
            }
            rel.cluster.kubectl(
                "replace", "-f", "-", input=json.dumps({**role, "metadata": meta, "rules": rules})
            )

        set_rules([r for r in role["rules"] if "hangar.dev" not in r["apiGroups"]])
        wait(lambda: httpx.get(ready, timeout=10).status_code == 503, 60, "the operator unready")
        assert "watches: RuntimeError: cannot list" in httpx.get(ready, timeout=10).text
        # The api's readiness is its own (cached 2 s) and may lag the operator's: waited for, not read once.
        api_ready = wait(
            lambda: (
                (r := httpx.get(f"http://127.0.0.1:{rel.ports['api']}/readyz", timeout=10)).status_code == 503
                and r
            ),
            30,
            "the api unready",
        )
        assert "apiserver:" in api_ready.text, api_ready.text
        set_rules(role["rules"])
        wait(lambda: httpx.get(ready, timeout=10).status_code == 200, 60, "the operator ready again")

        # --- a session through the chart-deployed api, a turn with the real CLI --------------------------
        env = environment_object(
            "helm-claude", {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test"}
        )
        rel.cluster.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(env))
        with rel.api() as api:
            body = {
                "name": "helm-s",
                "environment": "helm-claude",
                "harness": "claude",
                "message": "write hello",
            }
            r = api.post("/api/sessions", json=body)
            assert r.status_code == 201, r.text
            t1 = _turn(api, "helm-s", 1)
            assert t1["phase"] == "Completed" and "FINAL: wrote hello.txt" in t1["summary"], rel.logs()
            pvc = rel.root / "runner" / "pvc" / NS / "helm-s-workspace" / "workspace" / "hello.txt"
            assert pvc.read_text().strip() == "installed-by-helm"
        token = rel.token()

        # --- upgrade: a values change rolls the pod (Recreate); fast liveness for the wedge below ---------
        live = {"periodSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 2}
        rel.helm(
            "upgrade", "hangar", str(CHART), "-n", NS, *rel.values(),
            *("--set", "sandbox.slots=3", "--set-json", f"operator.livenessProbe={json.dumps({**live, 'httpGet': {'path': '/healthz', 'port': 'metrics'}})}"),
        )  # fmt: skip
        pod2 = rel.ready_pod(not_uid=pod["metadata"]["uid"])
        op = next(c for c in pod2["spec"]["containers"] if c["name"] == "operator")
        assert {"name": "HANGAR_MAX_SANDBOXES", "value": "3"} in op["env"]
        assert rel.token() == token  # the admin token survives upgrades
        with rel.api() as api:
            # The database is on the PVC: the first turn's history is still there.
            assert api.get("/api/sessions/helm-s/turns/1").json()["phase"] == "Completed"

            # --- a wedged operator (stopped: it answers nothing) is restarted by its liveness probe -------
            pid = _container_pid("HANGAR_OPERATOR_PORT", rel.ports["metrics"])
            os.killpg(pid, signal.SIGSTOP)

            def restarted() -> bool:
                p = rel.pod()
                cs = {c["name"]: c for c in (p.get("status") or {}).get("containerStatuses") or []}
                op = cs.get("operator") or {}
                return bool(op.get("restartCount", 0) >= 1 and op.get("ready"))

            wait(restarted, 90, "the operator restarted by its liveness probe", rel.logs)
            events = rel.get("events", "--field-selector", f"involvedObject.name={pod2['metadata']['name']}")
            reasons = {e["reason"] for e in events["items"]}
            assert {"Unhealthy", "Killing"} <= reasons, reasons
            # The restarted operator serves the session: its next turn runs.
            r = api.post("/api/sessions/helm-s/messages", json={"message": "again"})
            assert r.status_code == 202, r.text
            t2 = _turn(api, "helm-s", 2)
            assert t2["phase"] == "Completed" and "still here" in t2["summary"], rel.logs()

        # --- uninstall: the workloads and RBAC go; the database's PVC and the CRDs stay -------------------
        rel.cluster.kubectl("delete", "session", "helm-s", "-n", NS, "--wait=true", "--timeout=60s")
        rel.helm("uninstall", "hangar", "-n", NS, "--wait", "--timeout", "120s")
        left = {
            o["kind"] + "/" + o["metadata"]["name"]
            for o in rel.get("all,role,rolebinding,serviceaccount,secret,pvc")["items"]
        }
        assert "PersistentVolumeClaim/hangar-data" in left, left
        assert not {"Deployment/hangar", "Service/hangar", "Role/hangar", "ServiceAccount/hangar"} & left, (
            left
        )
        assert "Secret/hangar-auth" not in left
        rel.cluster.kubectl("get", "crd", "sessions.hangar.dev")
        wait(lambda: not rel.pod(), 60, "the hangar pod gone")
    finally:
        model.stop()
