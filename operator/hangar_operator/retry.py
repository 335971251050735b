"""Nothing dropped: a raw kopf event handler that fails is retried with backoff, keyed by object.

kopf retries its own change handlers, but a failure in a raw ``@kopf.on.event`` handler is logged and
forgotten. Each such handler hands its work here as ``(key, work)``: the work runs now; if it raises it runs
again after 1, 2, 4 … 60 s until it succeeds. The work re-reads the object (every reconcile is idempotent),
so a newer event for the same key replaces a waiting retry instead of queueing a second one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hangar import logs
from hangar.kube import ApiException

log = logging.getLogger("hangar.operator.retry")

Work = Callable[[], Awaitable[None]]
FIRST_DELAY = 1.0
MAX_DELAY = 60.0


class Retrier:
    def __init__(self, first_delay: float = FIRST_DELAY, max_delay: float = MAX_DELAY) -> None:
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.waiting: dict[str, asyncio.Task[None]] = {}
        self.failures = 0

    async def run(self, key: str, work: Work) -> None:
        """Run ``work`` now; on failure keep retrying it in the background (a newer call for ``key`` wins)."""
        old = self.waiting.pop(key, None)
        if old is not None:
            old.cancel()
        try:
            await work()
        except Exception:
            self.failures += 1
            log.exception("handling %s failed: retrying in %.0f s", key, self.first_delay, extra=_ref(key))
            self.waiting[key] = asyncio.create_task(self._retry(key, work))

    async def _retry(self, key: str, work: Work) -> None:
        delay = self.first_delay
        while True:
            await asyncio.sleep(delay)
            try:
                await work()
            except Exception:
                self.failures += 1
                delay = min(delay * 2, self.max_delay)
                log.exception("handling %s failed again: retrying in %.0f s", key, delay, extra=_ref(key))
                continue
            if self.waiting.get(key) is asyncio.current_task():
                del self.waiting[key]
            return

    def stop(self) -> None:
        for task in self.waiting.values():
            task.cancel()
        self.waiting.clear()


def _ref(key: str) -> dict[str, Any]:
    """The log record's resource for a retry key ``<plural>/<namespace>/<name>``."""
    plural, _, rest = key.partition("/")
    namespace, _, name = rest.partition("/")
    return logs.ref(namespace or None, name or None, plural.rstrip("s").capitalize() or None)


TRANSIENT = frozenset({429, 500, 502, 503, 504})


async def transient(work: Callable[[], Awaitable[None]], *, within: float, first_delay: float = 0.5) -> None:
    """Run ``work``, again while it fails with an apiserver answer that says "not now" (429, 5xx), for up to
    ``within`` seconds; any other failure, or one past that, is raised. Right after CRDs are installed the
    apiserver answers 429 "storage is (re)initializing" for a moment, and the operator's first listing met it.
    """
    deadline = asyncio.get_running_loop().time() + within
    delay = first_delay
    while True:
        try:
            await work()
            return
        except ApiException as e:
            if e.status not in TRANSIENT or asyncio.get_running_loop().time() + delay > deadline:
                raise
            log.warning("the apiserver answered %s: trying again in %.1f s", e.status, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)
