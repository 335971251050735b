"""The operator's ``requestedAt`` of a call that waits: to the millisecond, and after its run's previous one.

The pending list is sorted on ``requestedAt``, stored to the millisecond (the one stamp form, ``iso``). Two
calls of one run asked within a millisecond would tie and be listed in whatever order they were read; each
run's stamps are made strictly increasing instead, so the list keeps the order the operator took them in.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

KEEP = timedelta(seconds=1)  # a run's stamp older than this cannot tie with a new one: forgotten
PRUNE_AT = 256  # runs remembered before the old stamps are first pruned (bounded, whatever the count)
TICK = timedelta(milliseconds=1)


class RequestClock:
    def __init__(self) -> None:
        self.last: dict[str, datetime] = {}
        # Pruned again only once the runs remembered have doubled since: with more than PRUNE_AT runs asking
        # within a second, a prune on every call would walk them all for each request.
        self.prune_at = PRUNE_AT

    def now(self, run: str) -> datetime:
        """Now, to the millisecond, or the run's last stamp plus a millisecond if that is not earlier."""
        t = datetime.now(UTC)
        t = t.replace(microsecond=t.microsecond // 1000 * 1000)
        prev = self.last.get(run)
        if prev is not None and t <= prev:
            t = prev + TICK
        if len(self.last) >= self.prune_at:
            self.last = {r: s for r, s in self.last.items() if s >= t - KEEP}
            self.prune_at = max(PRUNE_AT, 2 * len(self.last))
        self.last[run] = t
        return t
