"""Shared fixtures: a real control plane for the whole run, and a whole hangar stack on it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hangar.devcluster import binaries
from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack, install_crds


@dataclass
class Cluster:
    kubeconfig: Path
    bin_dir: Path | None
    cp: ControlPlane | None

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        exe = (
            str(self.bin_dir / "kubectl")
            if self.bin_dir and (self.bin_dir / "kubectl").exists()
            else "kubectl"
        )
        return subprocess.run(
            [exe, "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A real kube-apiserver: an explicit KUBECONFIG (kind, GKE) wins, else our local control plane."""
    explicit = os.environ.get("HANGAR_TEST_KUBECONFIG")
    if explicit:
        asyncio.run(install_crds(explicit))
        yield Cluster(Path(explicit), None, None)
        return
    bins = binaries.ensure()
    d = Path(tempfile.mkdtemp(prefix="hangar-cp-"))
    cp = ControlPlane(bins, d, components=("kube-controller-manager", "kube-scheduler", "kwok")).start(
        crds=True
    )
    try:
        yield Cluster(cp.kubeconfig, bins.dir, cp)
    finally:
        cp.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def stack(cluster: Cluster) -> Iterator[Stack]:
    """operator, API and the local pod runner as processes, the way `hangar dev up` runs them."""
    root = Path(tempfile.mkdtemp(prefix="hangar-stack-", dir="/tmp"))
    os.chmod(root, 0o755)
    # Many modules' sessions share this stack and stay Idle with their sandboxes, so it allows more than the
    # default 10 at once: a test that needs a free slot (a warm pool's refill) must not depend on which ran
    # before it. The slot limit itself is tested on a stack of its own (test_slots_e2e.py).
    env = {"HANGAR_INTERRUPT_GRACE_SECONDS": "5", "HANGAR_MAX_SANDBOXES": "40"}
    s = Stack(root, cluster.kubeconfig, extra_env=env)
    try:
        s.start_operator()
        s.start_api()
        s.start_runner()
        yield s
    finally:
        s.stop_all()
        if os.environ.get("HANGAR_KEEP_LOGS"):
            print(f"stack logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything in this folder drives a real control plane: it is e2e, marked or not."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.e2e)
