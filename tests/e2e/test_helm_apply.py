"""The chart's rendered objects against a real kube-apiserver (server-side dry-run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..unit.test_helm_chart import GKE_VALUES, rendered_manifests
from .conftest import Cluster

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("values", [[], [GKE_VALUES]], ids=["default", "gke"])
def test_rendered_manifests_apply_to_a_real_apiserver(cluster: Cluster, values: list[Path]) -> None:
    """Every rendered object is accepted by a real kube-apiserver (server-side dry-run)."""
    cluster.kubectl("create", "namespace", "hangar", check=False)
    objs = rendered_manifests(values)
    assert objs
    r = cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-n",
        "hangar",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}),
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("serverside-applied (server dry run)") == len(objs)
