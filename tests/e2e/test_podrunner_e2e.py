"""The local pod runner waits for a Secret a pod's volume names, as a kubelet retries the mount: hangar makes a
sandbox's run-key Secret beside its pod, not before it (operator/hangar_operator/sandboxes.py ``_make_run``).
Each pod starts on its own task, as a kubelet's pod workers do: one that waits holds up no other."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from hangar.devcluster.stack import Stack

from .conftest import Cluster
from .helpers import wait


def _pod(name: str, ns: str) -> dict[str, object]:
    """A pod that prints its Secret's value ``v`` (the Secret named as the pod) and sleeps."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "local",
                    "command": [
                        "python3",
                        "-c",
                        "import sys, time; print(open(sys.argv[1]).read(), flush=True); time.sleep(60)",
                        "/k/v",  # an argument of its own: the runner maps it to the volume's directory
                    ],
                    "volumeMounts": [{"name": "k", "mountPath": "/k", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "k", "secret": {"secretName": name, "defaultMode": 0o400}}],
        },
    }


def _secret(cluster: Cluster, name: str, ns: str, value: str) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"v": value},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))


def _phase(cluster: Cluster, name: str, ns: str) -> tuple[str, str]:
    out = json.loads(cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
    return str(out["status"].get("phase")), str(out["metadata"]["uid"])


def test_a_pod_whose_secret_comes_after_it_starts_with_the_secret(cluster: Cluster, stack: Stack) -> None:
    name = f"late-secret-{uuid.uuid4().hex[:6]}"
    ns = stack.namespace
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(name, ns)))
    try:

        def scheduled() -> bool:
            out = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout
            return bool(json.loads(out)["spec"].get("nodeName"))

        wait(scheduled, 30, "the pod scheduled to the runner's node")
        time.sleep(0.5)  # the runner has seen it and waits for the Secret
        _secret(cluster, name, ns, "the key came late")

        def running() -> dict[str, object] | None:
            out = json.loads(cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
            phase = out["status"].get("phase")
            assert phase != "Failed", out["status"]
            return out if phase == "Running" else None

        uid = wait(running, 30, "the pod Running once its Secret exists")["metadata"]["uid"]  # type: ignore[index]
        log = Path(stack.runner_root) / "pods" / str(uid) / "main.log"
        wait(lambda: "the key came late" in log.read_text() if log.exists() else False, 30, "the secret read")
    finally:
        cluster.kubectl(
            "delete", "pod", name, "-n", ns, "--grace-period=0", "--ignore-not-found", check=False
        )
        cluster.kubectl("delete", "secret", name, "-n", ns, "--ignore-not-found", check=False)


def test_a_pod_waiting_for_its_secret_holds_up_no_other_pod(cluster: Cluster, stack: Stack) -> None:
    """Pod A waits for its Secret (up to 10 s, then it would fail); pod B, made after A and whose Secret
    exists, runs meanwhile. When the runner started pods in its one watch loop, B waited out A's wait and A
    had failed by the time B ran."""
    ns = stack.namespace
    a, b = (f"{x}-waits-{uuid.uuid4().hex[:6]}" for x in ("a", "b"))
    _secret(cluster, b, ns, "b's key")
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(a, ns)))

        def a_scheduled() -> bool:
            out = cluster.kubectl("get", "pod", a, "-n", ns, "-o", "json").stdout
            return bool(json.loads(out)["spec"].get("nodeName"))

        wait(a_scheduled, 30, "pod A scheduled to the runner's node (the runner sees it first)")
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(b, ns)))

        def b_running() -> bool:
            phase = _phase(cluster, b, ns)[0]
            assert phase != "Failed"
            return phase == "Running"

        wait(b_running, 30, "pod B Running while pod A waits for its Secret")
        assert _phase(cluster, a, ns)[0] == "Pending"  # still waiting, not failed
        _secret(cluster, a, ns, "a's key came")

        def a_running() -> bool:
            phase = _phase(cluster, a, ns)[0]
            assert phase != "Failed"
            return phase == "Running"

        wait(a_running, 30, "pod A Running once its Secret exists")
        log = Path(stack.runner_root) / "pods" / _phase(cluster, a, ns)[1] / "main.log"
        wait(lambda: "a's key came" in log.read_text() if log.exists() else False, 30, "A's secret read")
    finally:
        for name in (a, b):
            cluster.kubectl(
                "delete", "pod", name, "-n", ns, "--grace-period=0", "--ignore-not-found", check=False
            )
            cluster.kubectl("delete", "secret", name, "-n", ns, "--ignore-not-found", check=False)
