"""Interrupt deadlines: an interrupt the driver does not confirm in time has its run killed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hangar import logs

log = logging.getLogger("hangar.operator.turns")

# (namespace, session, turn): kill the run of this turn, its interrupt unconfirmed.
OnExpiry = Callable[[str, str, str], Awaitable[None]]


class Deadlines:
    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.on_expiry: OnExpiry | None = None

    def armed(self, namespace: str, turn: str) -> bool:
        return (namespace, turn) in self.tasks

    def arm(self, namespace: str, owner: str, turn: str) -> None:
        self.cancel(namespace, turn)
        self.tasks[(namespace, turn)] = asyncio.create_task(self._wait(namespace, owner, turn))

    def cancel(self, namespace: str, turn: str) -> None:
        task = self.tasks.pop((namespace, turn), None)
        if task and task is not asyncio.current_task():
            task.cancel()

    def current(self, namespace: str, turn: str) -> bool:
        """Is the running task this turn's live deadline (not one cancelled or replaced since)?"""
        return self.tasks.get((namespace, turn)) is asyncio.current_task()

    def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()

    async def _wait(self, namespace: str, owner: str, turn: str) -> None:
        await asyncio.sleep(self.grace)
        delay = 1.0
        while self.on_expiry is not None:
            try:
                await self.on_expiry(namespace, owner, turn)
                return
            except Exception:  # tried again: an unconfirmed interrupt is never left running
                log.exception("killing the run of %s failed", turn, extra=logs.ref(namespace, turn, "Turn"))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
