"""The local pod runner waits for a Secret a pod's volume names, as a kubelet retries the mount: hangar makes a
sandbox's run-key Secret beside its pod, not before it (operator/hangar_operator/sandboxes.py ``_make_run``)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from hangar.devcluster.stack import Stack

from .conftest import Cluster
from .helpers import wait


def test_a_pod_whose_secret_comes_after_it_starts_with_the_secret(cluster: Cluster, stack: Stack) -> None:
    name = f"late-secret-{uuid.uuid4().hex[:6]}"
    ns = stack.namespace
    pod = {
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
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:

        def scheduled() -> bool:
            out = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout
            return bool(json.loads(out)["spec"].get("nodeName"))

        wait(scheduled, 30, "the pod scheduled to the runner's node")
        time.sleep(0.5)  # the runner has seen it and waits for the Secret
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": ns},
            "stringData": {"v": "the key came late"},
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))

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
