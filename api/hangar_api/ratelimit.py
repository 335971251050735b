"""Per-token rate limits on the writing routes: a token bucket per caller.

Each caller holds up to ``burst`` writes and earns ``rate`` a second back; a write with the bucket empty is
refused (429) with the seconds until the next one is allowed. Buckets are per caller (a token maps to one
caller), so the memory is bounded by the tokens configured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable


class RateLimiter:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}

    def take(self, key: Hashable) -> float:
        """0.0 when ``key`` may write now (and it is counted), else the seconds until it may."""
        now = self.clock()
        level, at = self._buckets.get(key, (self.burst, now))
        level = min(self.burst, level + (now - at) * self.rate)
        if level >= 1.0:
            self._buckets[key] = (level - 1.0, now)
            return 0.0
        self._buckets[key] = (level, now)
        return (1.0 - level) / self.rate

    @staticmethod
    def retry_after(wait: float) -> str:
        """A Retry-After value: whole seconds, at least 1."""
        return str(max(1, math.ceil(wait)))
