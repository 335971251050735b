"""Letting the machine settle between samples: what the previous sample set off (a warm pool's refill, a
driver starting, a pre-started CLI, ~0.5 s of a core for node) finished before the next sample begins.

Only this bench's own processes are counted (the control plane, the stack, the pod runner and every pod it
runs, agent-sandbox's controller: all descendants of this process), not the machine's load, which other
work on a shared machine makes and a bench cannot wait out. Used before every sample of every side alike;
``--no-settle`` measures the old way, back to back.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from _observe import TICK

WINDOW = 0.25  # seconds per look: the kernel counts CPU in ticks of 10 ms, so a shorter window reads coarse
QUIET = 0.2  # cores: the idle control plane and stack use ~0.05-0.1 of one
MOST = 5.0  # seconds: past this the sample runs anyway (and the wait is reported)


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def descendants_cpu(root: int) -> float:
    """CPU seconds that ``root``'s descendants (not ``root`` itself) have spent, the living ones."""
    procs = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += procs[pid][1]
        todo += children.get(pid, [])
    return total


async def settle(root: int | None = None, quiet: float = QUIET, most: float = MOST) -> float:
    """Waits until ``root``'s descendants use less than ``quiet`` cores over a window (at most ``most``
    seconds); returns how long it waited. A process that ends within the window takes its CPU with it, so
    a window is read again when the sum went down."""
    root = os.getpid() if root is None else root
    t0 = time.monotonic()
    while time.monotonic() - t0 < most:
        a = descendants_cpu(root)
        await asyncio.sleep(WINDOW)
        b = descendants_cpu(root)
        if 0 <= b - a < quiet * WINDOW:
            break
    return time.monotonic() - t0
