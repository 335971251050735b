"""The local pod runner's service pods (hangar/devcluster/servicepods.py): which pods are hangar's own, the
user a container runs as, the restart back-off, and podns's search for the directory that hides an image's
files from a non-root user."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from hangar.devcluster.podns import _blocked
from hangar.devcluster.servicepods import Container, ServicePod, ServicePodRunner, image_repository


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("ghcr.io/hangar-dev/hangar:0.1.0", "ghcr.io/hangar-dev/hangar"),
        ("ghcr.io/hangar-dev/hangar@sha256:" + "a" * 64, "ghcr.io/hangar-dev/hangar"),
        ("ghcr.io/hangar-dev/hangar:0.1.0@sha256:" + "b" * 64, "ghcr.io/hangar-dev/hangar"),
        ("localhost:5000/hangar:dev", "localhost:5000/hangar"),
        ("localhost:5000/hangar", "localhost:5000/hangar"),
        ("hangar", "hangar"),
    ],
)
def test_image_repository(image: str, repo: str) -> None:
    assert image_repository(image) == repo


def runner() -> ServicePodRunner:
    return ServicePodRunner(api=None, root=Path("/nonexistent"))  # type: ignore[arg-type]


def pod(
    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **sc: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {"containers": containers, "initContainers": init or [], "securityContext": sc},
    }


HANGAR = "ghcr.io/hangar-dev/hangar:0.1.0"
SANDBOX = "ghcr.io/hangar-dev/hangar-sandbox:0.1.0"


def test_only_pods_made_of_hangar_images_are_service_pods() -> None:
    r = runner()
    assert r.is_service(pod([{"name": "operator", "image": HANGAR}, {"name": "api", "image": HANGAR}]))
    assert not r.is_service(pod([{"name": "sandbox", "image": SANDBOX}], [{"name": "i", "image": HANGAR}]))
    assert not r.is_service(
        pod([{"name": "operator", "image": HANGAR}], [{"name": "proxy", "image": "gcr.io/x"}])
    )
    assert not r.is_service(pod([]))


def test_the_user_comes_from_the_container_then_the_pod_then_the_image() -> None:
    r = runner()
    c = {"name": "c", "image": HANGAR}
    assert r._user(ServicePod(pod([c])), c) == (10001, 0, [0])  # the image's USER
    p = pod([c], runAsUser=2000, runAsGroup=3000, fsGroup=4000, supplementalGroups=[5000])
    assert r._user(ServicePod(p), c) == (2000, 3000, [3000, 4000, 5000])
    c2 = {**c, "securityContext": {"runAsUser": 7, "runAsGroup": 8}}
    assert r._user(ServicePod(p), c2) == (7, 8, [8, 4000, 5000])


def test_run_as_non_root_refuses_root() -> None:
    c = {"name": "c", "image": HANGAR, "securityContext": {"runAsUser": 0}}
    with pytest.raises(ValueError, match="runAsNonRoot"):
        runner()._user(ServicePod(pod([c], runAsNonRoot=True)), c)


def test_restart_back_off_doubles_up_to_its_cap() -> None:
    c = Container("c", {})
    waits = []
    for n in range(1, 9):
        c.restarts = n
        waits.append(ServicePodRunner._backoff(c))
    assert waits == [1, 2, 4, 8, 16, 30, 30, 30]


def test_blocked_finds_the_topmost_private_directory() -> None:
    tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own tmp_path sits under a 0700 directory
    top = tmp_path / "private"
    inner = top / "a" / "b"
    inner.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(top, 0o700)
    assert _blocked(inner) == top
    os.chmod(top, 0o711)
    assert _blocked(inner) is None
    os.chmod(inner.parent, 0o700)
    assert _blocked(inner) == inner.parent
    shutil.rmtree(tmp_path)
