"""What every benchmark prints with: progress lines and nearest-rank percentiles."""

from __future__ import annotations

import math
import statistics
import sys
import time


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile: with fewer than 100 samples p99 is the maximum."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def summary(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50": pct(xs, 50),
        "p99": pct(xs, 99),
        "mean": statistics.fmean(xs),
        "min": min(xs),
        "max": max(xs),
    }


def med(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return statistics.median(ys) if ys else None
