"""Figures of the local control plane: time to get the binaries (warm), time to start, peak memory.

Run: .venv/bin/python bench/controlplane.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from hangar.devcluster import binaries
from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import install_crds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    t = time.monotonic()
    bins = binaries.ensure()
    print(f"binaries ready (warm cache)         {time.monotonic() - t:8.2f} s   {bins.dir}")
    starts, crds, peaks = [], [], []
    for _ in range(a.runs):
        d = Path(tempfile.mkdtemp(prefix="hangar-bench-cp-"))
        t = time.monotonic()
        cp = ControlPlane(bins, d).start()
        starts.append(time.monotonic() - t)
        t = time.monotonic()
        asyncio.run(install_crds(str(cp.kubeconfig)))
        crds.append(time.monotonic() - t)
        time.sleep(5)  # let the controller-manager and scheduler settle before reading peaks
        mem = cp.peak_memory_kib()
        peaks.append(mem)
        cp.stop()
        shutil.rmtree(d, ignore_errors=True)
    print(f"control plane start → /readyz       {statistics.median(starts):8.2f} s   (median of {a.runs})")
    print(f"CRDs installed and Established      {statistics.median(crds):8.2f} s")
    last = peaks[-1]
    for name, kib in last.items():
        print(f"peak RSS {name:26} {kib / 1024:8.0f} MiB")
    print(f"peak RSS total                      {sum(last.values()) / 1024:8.0f} MiB")


if __name__ == "__main__":
    main()
