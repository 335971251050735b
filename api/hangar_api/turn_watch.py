"""One watch on the namespace's Turns for the whole API process: the withdraw route waits on it for the
driver's verdict, and the MCP resource subscriptions (``hangar_api/mcp/subscriptions.py``) listen to it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

from hangar.kube import Kube, Obj

log = logging.getLogger("hangar.api.steering")


class TurnWatch:
    """One watch on the namespace's Turns for the whole API process, fanned out to the requests waiting on
    a turn (a withdraw waiting for the driver's verdict) and to the listeners (the MCP resource
    subscriptions, ``hangar_api/mcp/subscriptions.py``). One watch, not one per request: a burst of
    withdraws on one busy turn would otherwise have the apiserver send every change of it to each."""

    def __init__(self, k: Kube, withdraw_wait: float = 20.0) -> None:
        self.k = k
        self.withdraw_wait = withdraw_wait  # seconds a withdraw waits for the driver's verdict, then 202
        self.waiters: dict[str, list[tuple[Callable[[Obj], bool], asyncio.Future[Obj]]]] = {}
        self.listeners: list[Callable[[Obj], None]] = []
        self.task: asyncio.Task[None] | None = None

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())

    def listen(self, fn: Callable[[Obj], None]) -> None:
        """Call ``fn`` (synchronous, must not block) with every changed or deleted Turn from now on."""
        self.listeners.append(fn)
        self._start()

    async def _run(self) -> None:
        while True:
            try:
                async for ev in self.k.watch("turns"):
                    obj = ev.get("object")
                    if not isinstance(obj, dict):
                        continue
                    for done, fut in list(self.waiters.get(obj.get("metadata", {}).get("name", ""), [])):
                        if not fut.done() and done(obj):
                            fut.set_result(obj)
                    for fn in list(self.listeners):
                        try:
                            fn(obj)
                        except Exception:
                            log.exception("turn watch listener failed")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("turn watch broke (%s); watching again", e)
                await asyncio.sleep(1)

    async def wait(self, turn: Obj, done: Callable[[Obj], bool], timeout: float) -> Obj:
        """The turn once ``done(turn)``, or as it is at the timeout. Reads the turn itself once registered
        (and every 5 s), so a change the watch saw before we listened is not missed."""
        if done(turn):
            return turn
        self._start()
        name = turn["metadata"]["name"]
        fut: asyncio.Future[Obj] = asyncio.get_running_loop().create_future()
        entry = (done, fut)
        self.waiters.setdefault(name, []).append(entry)
        deadline = time.monotonic() + timeout
        try:
            while True:
                fresh = await self.k.get("turns", name)
                if fresh is None:
                    return turn
                turn = fresh
                if done(turn):
                    return turn
                left = deadline - time.monotonic()
                if left <= 0:
                    return turn
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(fut), min(5.0, left))
        finally:
            waiting = self.waiters.get(name, [])
            if entry in waiting:
                waiting.remove(entry)
            if not waiting:
                self.waiters.pop(name, None)


def stop_watch(state: Any) -> None:
    w: TurnWatch | None = getattr(state, "turn_watch", None)
    if w is not None:
        w.stop()


def turn_watch_of(state: Any) -> TurnWatch:
    """The app's one Turn watch (made on first use; started by its first waiter or listener)."""
    w: TurnWatch | None = getattr(state, "turn_watch", None)
    if w is None:
        w = state.turn_watch = TurnWatch(state.kube, state.settings.api_withdraw_wait)
    return w


def turn_watch(request: Request) -> TurnWatch:
    return turn_watch_of(request.app.state)
