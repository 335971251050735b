"""Message bodies no resource names any more are deleted from the database (``hangar.bodies``).

The api stores a body just before it writes the resource that names it, and storing a body again renews
its time; so only bodies older than ``GRACE`` seconds are candidates, and a candidate is deleted only if no
Session, Job or Turn in the namespaces this operator serves names it (``promptRef``, ``messageRef``, a
steer's or an interrupt's ``messageRef``). A failed listing deletes nothing: the sweep fails closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from hangar.kube import Obj

from .context import Context

log = logging.getLogger("hangar.operator.bodies")

GRACE = 3600.0  # seconds: a body stored this recently is kept whatever names it
INTERVAL = 600.0  # seconds between sweeps


def named_bodies(obj: Obj) -> set[str]:
    """The digests of the stored bodies a Session, Job or Turn names."""
    spec: dict[str, Any] = obj.get("spec") or {}
    refs = [spec.get("promptRef"), spec.get("messageRef")]
    for field in ("steers", "interrupts"):
        refs += [x.get("messageRef") for x in spec.get(field) or [] if isinstance(x, dict)]
    return {str(r["sha256"]) for r in refs if isinstance(r, dict) and r.get("sha256")}


class BodySweeper:
    def __init__(self, ctx: Context, interval: float = INTERVAL, grace: float = GRACE) -> None:
        self.ctx = ctx
        self.interval = interval
        self.grace = grace
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._forever())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sweeping stored message bodies failed; tried again later")

    async def _objects(self) -> list[Obj]:
        out: list[Obj] = []
        for plural in ("sessions", "jobs", "turns"):
            if self.ctx.settings.watch_all:
                out += await self.ctx.kube.list_all(plural)
            else:
                for ns in self.ctx.settings.watch_namespaces:
                    out += await self.ctx.kube_in(ns).list(plural)
        return out

    async def sweep(self) -> int:
        """Deletes the old bodies nothing names; returns how many."""
        candidates = await self.ctx.db.bodies_before(self.grace)
        if not candidates:
            return 0
        named: set[str] = set()
        for obj in await self._objects():
            named |= named_bodies(obj)
        gone = [d for d in candidates if d not in named]
        await self.ctx.db.delete_bodies(gone, self.grace)
        if gone:
            log.info("deleted %d stored message bodies no resource names", len(gone))
        return len(gone)
