"""kwok on the local control plane: fake nodes whose pods reach Running without running anything."""

from __future__ import annotations

import json

import pytest

from .conftest import Cluster
from .helpers import wait


def test_a_pod_on_a_kwok_node_reaches_running(cluster: Cluster) -> None:
    if cluster.cp is None or "kwok" not in [p.name for p in cluster.cp.processes]:
        pytest.skip("kwok runs only with the local control plane")
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "kwok-node-0",
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"type": "kwok"},
                },
                # Tainted, so that sandbox pods never land on a node that runs nothing.
                "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
            }
        ),
    )
    wait(
        lambda: (
            "True"
            in cluster.kubectl(
                "get", "node", "kwok-node-0", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
            ).stdout
        ),
        60,
        "kwok node ready",
    )
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "kwok-pod", "namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "image": "registry.example/none:1"}],
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [
                        {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            }
        ),
    )
    wait(
        lambda: (
            cluster.kubectl("get", "pod", "kwok-pod", "-o", "jsonpath={.status.phase}").stdout == "Running"
        ),
        60,
        "kwok pod Running",
    )
    cluster.kubectl("delete", "pod", "kwok-pod", "--wait=false")
