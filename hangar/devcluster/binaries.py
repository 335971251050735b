"""Where the control-plane binaries come from: KUBEBUILDER_ASSETS, else our cached build from the Go proxy."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..paths import cache_dir, repo_root

REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kube-controller-manager", "kube-scheduler", "kubectl", "kwok")


def k8s_version() -> str:
    gomod = (repo_root() / "tools" / "k8s" / "go.mod").read_text()
    for line in gomod.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes":
            return parts[1]
    raise RuntimeError("tools/k8s/go.mod does not require k8s.io/kubernetes")


@dataclass(frozen=True)
class Binaries:
    dir: Path

    def path(self, name: str) -> Path | None:
        p = self.dir / name
        return p if p.is_file() and os.access(p, os.X_OK) else None

    def need(self, name: str) -> Path:
        p = self.path(name)
        if p is None:
            raise FileNotFoundError(f"{name} not found in {self.dir}")
        return p

    @property
    def kwok_dir(self) -> Path | None:
        marker = self.dir / "kwok-dir"
        return Path(marker.read_text().strip()) if marker.exists() else None


def default_dir() -> Path:
    return cache_dir() / f"k8s-{k8s_version()}"


def ensure(build: bool = True) -> Binaries:
    """The binaries to use; builds the missing ones into the cache (minutes cold, nothing warm)."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        bins = Binaries(Path(assets))
        missing = [n for n in REQUIRED if bins.path(n) is None]
        if missing:
            raise FileNotFoundError(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
        return bins
    bins = Binaries(default_dir())
    if all(bins.path(n) for n in REQUIRED + OPTIONAL) and bins.kwok_dir:
        return bins
    if not build:
        raise FileNotFoundError(f"control-plane binaries missing in {bins.dir}; run `hangar dev binaries`")
    script = repo_root() / "tools" / "k8s" / "build.sh"
    print(f"building control-plane binaries into {bins.dir} (cold: ~10 minutes)", file=sys.stderr)
    subprocess.run(["bash", str(script), str(bins.dir)], check=True)
    return bins
