"""One subscriber's ``notifications/resources/updated``, at most one per URI every 250 ms as the subscriber
receives them.

Each subscriber (a 2026-07-28 listen stream, a handshake-era MCP session) has its own :class:`Outbox`, and
one task writes its notifications, one after the other. The window of a URI starts when its notification
has been **written** (the write returned), not when the change was seen: a backlog of writes on a loaded
server can't squeeze two notifications closer together than the window. A change during the window marks
the URI; one notification at the window's end covers every change in it, so the last change is always
notified. The window is 250 ms plus :data:`GUARD`: "written" is handed to the transport, which on a loaded
machine may deliver one notification late and the next on time (34 ms taken off a gap was seen at a load
average of 13).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("hangar.api.mcp.subscriptions")

THROTTLE_SECONDS = 0.25
GUARD = 0.1
Write = Callable[[str], Awaitable[None]]


class Outbox:
    def __init__(self, write: Write, interval: float = THROTTLE_SECONDS + GUARD) -> None:
        self.write = write
        self.interval = interval
        self.uris: set[str] = set()  # what it is subscribed to
        self._dirty: dict[str, None] = {}  # URIs changed since their last notification, in order
        self._last: dict[str, float] = {}  # URI → when its last notification was written
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.broken: BaseException | None = None  # set when a write failed: the subscriber is gone

    def mark(self, uri: str) -> None:
        if self.broken is None:
            self._dirty[uri] = None
            self._wake.set()

    def start(self) -> None:
        """Write from a task of its own (a handshake-era session's outbox)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run_logged())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run_logged(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("a subscriber's notification failed; dropping its subscriptions: %s", e)

    def _next_due(self, now: float) -> tuple[list[str], float]:
        ready, wait = [], math.inf
        for uri in self._dirty:
            due = self._last.get(uri, -math.inf) + self.interval
            if due <= now:
                ready.append(uri)
            else:
                wait = min(wait, due - now)
        return ready, wait

    async def run(self) -> None:
        """Writes until cancelled (the subscriber went) or a write fails (raised, after ``broken`` is set)."""
        while True:
            self._wake.clear()  # before looking: a mark from now on wakes the wait below
            ready, wait = self._next_due(time.monotonic())
            if not ready:
                if math.isinf(wait):
                    await self._wake.wait()
                else:
                    try:
                        await asyncio.wait_for(self._wake.wait(), wait)
                    except TimeoutError:
                        pass
                continue
            for uri in ready:
                self._dirty.pop(uri, None)
                try:
                    await self.write(uri)
                except Exception as e:
                    self.broken = e
                    raise
                self._last[uri] = time.monotonic()  # the window starts once it is written
            if len(self._last) > 4096:  # forget URIs quiet for longer than a window
                now = time.monotonic()
                for uri, at in list(self._last.items()):
                    if at + self.interval < now and uri not in self._dirty:
                        del self._last[uri]
