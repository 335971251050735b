"""A new sandbox's ``Starting`` status write, held until its driver connects (issue 15's cold path).

A session's first sandbox used to write the session's status twice within ~0.1 s: ``Starting`` (the pod, the
run, the slot's counter) once the objects were made, then ``connected`` at the driver's hello. On two cores
the first write, and the watch events it sends to every watcher, land while the workspace volume binds and the
pod is scheduled: the start's own critical path. So that write is held (:class:`HeldStarts`), and it is

- folded into the ``connected`` write when the driver says hello first (one write instead of two);
- written on its own when ``hold`` seconds pass (a slow image pull shows ``Starting`` as before);
- written first whenever anything else takes the session's lock (``Context.lock``): every reader and writer
  of a session's sandbox does, so each of them sees the status as written, as before.

Meanwhile the session's slot is counted as taken (``Sandboxes.in_use`` counts held starts). Only a run whose key
Secret this process made is held: a run made again (after a restart) is written at once, since the gateway
then reads its key through the status. A crash loses a held write and nothing else: the restarted operator
makes the same run again (its name comes from the counters the held write had not moved yet), finds its
objects (409) and writes the status then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("hangar.operator.held_starts")

Key = tuple[str, str]  # (namespace, session)
Flush = Callable[[], Awaitable[None]]


@dataclass
class Held:
    patch: dict[str, Any]  # the status merge patch, without conditions (added when it is written)
    timer: asyncio.TimerHandle | None = None

    @property
    def run_pod(self) -> str:
        """The run the write names."""
        return str(self.patch["sandbox"]["run"])


def combine(first: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """Two status merge patches as one: ``then`` applied after ``first``. Objects combine key by key; any
    other value of ``then`` (``None``, a deletion, too) replaces ``first``'s."""
    out = dict(first)
    for k, v in then.items():
        before = out.get(k)
        out[k] = combine(before, v) if isinstance(v, dict) and isinstance(before, dict) else v
    return out


class HeldStarts:
    def __init__(self) -> None:
        self._held: dict[Key, Held] = {}
        self._flushes: set[asyncio.Task[None]] = set()

    def hold(self, key: Key, patch: dict[str, Any], after: float, flush: Flush) -> None:
        """Hold ``patch`` for ``key`` (replacing one held before); ``flush`` runs after ``after`` seconds."""
        self.take(key)
        timer = asyncio.get_running_loop().call_later(after, self._spawn, flush)
        self._held[key] = Held(patch, timer)

    def keys(self) -> list[Key]:
        return list(self._held)

    def has(self, key: Key) -> bool:
        return key in self._held

    def take(self, key: Key) -> Held | None:
        """The held write of ``key``, no longer held (its caller writes it)."""
        held = self._held.pop(key, None)
        if held is not None and held.timer is not None:
            held.timer.cancel()
        return held

    def close(self) -> None:
        for key in list(self._held):
            self.take(key)
        for task in list(self._flushes):
            task.cancel()

    def _spawn(self, flush: Flush) -> None:
        task = asyncio.ensure_future(flush())
        self._flushes.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a held Starting write failed: %s", task.exception())
