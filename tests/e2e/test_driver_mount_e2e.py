"""HANGAR_DRIVER_MOUNT=image-volume: the driver image mounted read-only as an image volume instead of copied
by an init container. The session's pod has no init container, its driver starts from the mount, says its
signed hello and runs a turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.devcluster import binaries
from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack, environment_object

from .conftest import Cluster
from .helpers import Api, namespace_stack, wait

pytestmark = pytest.mark.e2e

NAMESPACE = "driver-mount"


@pytest.fixture(scope="module")
def mounted(cluster: Cluster, stack: Stack) -> Iterator[Stack]:
    """An operator and API in their own namespace with the driver as an image volume; pods run on the main
    stack's runner, which has the driver image's root (``--image``)."""
    env = {"HANGAR_DRIVER_MOUNT": "image-volume"}
    with namespace_stack(cluster, NAMESPACE, "hangar-drivermount-", extra_env=env) as s:
        yield s


def test_a_session_runs_with_the_driver_from_an_image_volume(cluster: Cluster, mounted: Stack) -> None:
    env = environment_object(
        "mount-env", harnessOptions={"command": ["sh", "-c", "echo from-the-image", "x"]}
    )
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(env))
    api = Api(mounted)
    body = {"name": "mounted", "environment": "mount-env", "harness": "antigravity", "message": "hello"}
    assert api.post("/api/sessions", body).status_code == 201
    turn = api.wait_turn("mounted", 1, 60)
    assert turn["phase"] == "Completed" and "from-the-image" in turn["summary"]
    session = api.session("mounted")
    assert session["sandbox"]["connected"] is True
    pod = json.loads(
        cluster.kubectl("get", "pod", session["sandbox"]["pod"], "-n", NAMESPACE, "-o", "json").stdout
    )
    assert not pod["spec"].get("initContainers")
    (driver,) = [v for v in pod["spec"]["volumes"] if v["name"] == "driver"]
    assert driver["image"]["reference"] == mounted.driver_image
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "driver"]
    assert mount["subPath"] == "opt/hangar/lib" and mount["readOnly"] is True
    assert api.delete("/api/sessions/mounted").status_code == 202
    wait(lambda: api.get("/api/sessions/mounted").status_code == 404, 60, "session gone")


def test_an_operator_refuses_image_volumes_its_cluster_would_drop(tmp_path: Path) -> None:
    """On a 1.34 apiserver as it comes (ImageVolume off) the pods' image volumes would be dropped without an
    error: `hangar operator` with HANGAR_DRIVER_MOUNT=image-volume stops at its start, naming the setting."""
    cp = ControlPlane(binaries.ensure(), tmp_path / "cp", components=(), image_volumes=False).start(crds=True)
    try:
        env = {
            **os.environ,
            "KUBECONFIG": str(cp.kubeconfig),
            "HANGAR_DRIVER_MOUNT": "image-volume",
        }
        run = subprocess.run(
            [sys.executable, "-m", "hangar.cli.main", "operator"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode == 2
        assert "refusing to start: HANGAR_DRIVER_MOUNT=image-volume" in run.stderr
        assert "HANGAR_DRIVER_MOUNT=init-copy" in run.stderr
    finally:
        cp.stop()
