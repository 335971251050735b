"""The requests waiting on a Turn (a withdraw waiting for the driver's verdict) and the listeners of Turn
changes (the MCP resource subscriptions, ``hangar_api/mcp/subscriptions.py``), fed by the replica's one
Turn stream: the watch-fed cache's (``watch_cache.py``), which also tells what a relist after a lost watch
found changed. One stream per replica, not one per request or per use: a burst of withdraws on one busy
turn would otherwise have the apiserver send every change of it to each."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

from hangar.kube import Kube, Obj

from .watch_cache import Watched, api_cache_of

log = logging.getLogger("hangar.api.steering")


class _Waiter:
    """One request waiting on a turn: ``found`` is the first state told that satisfies ``done``; ``poke``
    wakes it (that, or the turn deleted: it reads the turn again)."""

    def __init__(self, done: Callable[[Obj], bool]) -> None:
        self.done = done
        self.found: Obj | None = None
        self.poke = asyncio.Event()


class TurnWatch:
    def __init__(self, k: Kube, feed: Watched | None, withdraw_wait: float = 20.0) -> None:
        self.k = k
        self.feed = feed  # None: nothing streams (waiters read the turn every 5 s)
        self.withdraw_wait = withdraw_wait  # seconds a withdraw waits for the driver's verdict, then 202
        self.waiters: dict[str, list[_Waiter]] = {}
        self.listeners: list[Callable[[Obj], None]] = []
        self.attached = False

    def stop(self) -> None:
        """Nothing to stop: the stream is the cache's (stopped with it)."""

    def _start(self) -> None:
        if not self.attached and self.feed is not None:
            self.attached = True
            self.feed.listen(self.changed)

    def listen(self, fn: Callable[[Obj], None]) -> None:
        """Call ``fn`` (synchronous, must not block) with every changed or deleted Turn from now on."""
        self.listeners.append(fn)
        self._start()

    def changed(self, kind: str, obj: Obj) -> None:
        """One change of the stream: the waiters on that turn and the listeners hear of it."""
        for w in list(self.waiters.get((obj.get("metadata") or {}).get("name", ""), [])):
            if kind == "DELETED":
                w.poke.set()  # read again: the turn is gone (a relist's stub holds no state to judge)
                continue
            try:
                hit = w.found is None and w.done(obj)
            except Exception:
                hit = False  # an object the predicate can't read: the waiter reads the turn itself
            if hit:
                w.found = obj
                w.poke.set()
        for fn in list(self.listeners):
            try:
                fn(obj)
            except Exception:
                log.exception("turn watch listener failed")

    async def wait(self, turn: Obj, done: Callable[[Obj], bool], timeout: float) -> Obj:
        """The turn once ``done(turn)``, or as it is at the timeout. Reads the turn itself once registered
        (and every 5 s, and when poked), so a change the stream told before we listened is not missed."""
        if done(turn):
            return turn
        self._start()
        name = turn["metadata"]["name"]
        w = _Waiter(done)
        self.waiters.setdefault(name, []).append(w)
        deadline = time.monotonic() + timeout
        try:
            while True:
                w.poke.clear()  # before the read: a change told during it wakes the wait below at once
                fresh = await self.k.get("turns", name)
                if fresh is None:
                    return turn
                turn = fresh
                if done(turn):
                    return turn
                if w.found is not None:
                    return w.found
                left = deadline - time.monotonic()
                if left <= 0:
                    return turn
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(w.poke.wait(), min(5.0, left))
                if w.found is not None:
                    return w.found
        finally:
            waiting = self.waiters.get(name, [])
            if w in waiting:
                waiting.remove(w)
            if not waiting:
                self.waiters.pop(name, None)


def stop_watch(state: Any) -> None:
    w: TurnWatch | None = getattr(state, "turn_watch", None)
    if w is not None:
        w.stop()


def turn_watch_of(state: Any) -> TurnWatch:
    """The app's Turn waiters and listeners (made on first use; they join the Turn stream with the first)."""
    w: TurnWatch | None = getattr(state, "turn_watch", None)
    if w is None:
        w = state.turn_watch = TurnWatch(
            state.kube, api_cache_of(state).feed("turns"), state.settings.api_withdraw_wait
        )
    return w


def turn_watch(request: Request) -> TurnWatch:
    return turn_watch_of(request.app.state)
