"""The apiserver's own count of the requests it served (``apiserver_request_total`` on its /metrics), and a
wait until it is quiet: a window that measures idle cost must not begin while the control plane is still
working through a burst (after 900 new sessions the controller-manager's volume binder went on for minutes,
~18 requests a second, rate-limited by its client, and read as the idle apiserver's cost)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx
from _stats import log

from hangar.devcluster.controlplane import ControlPlane

_REQ = re.compile(r"^apiserver_request_total\{([^}]*)\}\s+([0-9.e+]+)$")


def parse_requests(text: str) -> dict[str, float]:
    """apiserver_request_total by "verb resource", summed over codes and scopes."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _REQ.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


async def requests(cp: ControlPlane) -> dict[str, float]:
    async with httpx.AsyncClient(verify=cp.ssl_context(), timeout=30) as h:
        return parse_requests((await h.get(f"{cp.server}/metrics")).text)


def rate(samples: list[tuple[float, dict[str, float]]]) -> tuple[float, dict[str, float]]:
    """Requests a second between the first and the last sample, in all and by "verb resource" (the reads of
    /metrics themselves are not counted: the apiserver leaves that path out of the metric)."""
    (t0, a), (t1, b) = samples[0], samples[-1]
    dt = max(t1 - t0, 1e-9)
    per = {k: (b[k] - a.get(k, 0.0)) / dt for k in b}
    return sum(per.values()), per


async def until_quiet(cp: ControlPlane, rps: float, cap: float, steady: float = 5.0) -> dict[str, Any]:
    """Wait until the apiserver served at most ``rps`` requests a second over the last ``steady`` seconds (at
    least that long), or ``cap`` seconds passed; say how long it took, or that it never was quiet."""
    t0 = time.monotonic()
    samples: list[tuple[float, dict[str, float]]] = []
    while True:
        now = time.monotonic()
        samples.append((now, await requests(cp)))
        while len(samples) > 2 and now - samples[1][0] >= steady:
            samples.pop(0)  # the oldest sample still at least `steady` seconds back is the window's start
        waited = now - t0
        rps_now, per = rate(samples)
        if waited >= steady and rps_now <= rps:
            log(f"apiserver quiet after {waited:.1f} s ({rps_now:.2f} req/s over the last {steady:g} s)")
            return {"waited_s": round(waited, 1), "rps": round(rps_now, 2), "quiet": True}
        if waited >= cap:
            top = sorted(((v, k) for k, v in per.items() if v > 0.05), reverse=True)[:4]
            busy = ", ".join(f"{k.strip()} {v:.1f}" for v, k in top) or "none above 0.05"
            log(f"apiserver not quiet after {waited:.0f} s ({rps_now:.2f} req/s: {busy}); measuring anyway")
            return {"waited_s": round(waited, 1), "rps": round(rps_now, 2), "quiet": False}
        await asyncio.sleep(1.0)
