"""The session's ``pendingApprovals`` and approval counter, written off its lock, in the order asked.

A session's driver events and its approvals' decisions take turns on the session's lock, and the agent's
next request waits for the decision before it, the decision for the request before it. Each used to hold the
lock for this record (a read-modify-write of the session's status: one apiserver round trip) after the
Approval itself was written. The Approval is what counts (REST lists and decides from it, delivery reads
it); this record only shows it on the session and its job. So it is written on one task per session:

- Changes are queued under the session's lock, so the queue's order is the order the approvals moved
  (an approval's add always before its drop).
- One task per session writes them: everything queued when it looks goes out in one patch (``apply``: the
  same result as writing them one at a time), so a burst costs one write, and no two writes of this record
  race (the list is replaced whole by each patch).
- Only this writer writes these fields and each write it makes is put in the operator's cache
  (``status.py``), so it reads the session from the cache.
- A write the apiserver did not take is tried again with backoff until it is taken, the session is gone,
  or the apiserver refuses it for good; nothing queued is lost meanwhile (the next try writes it too).
- What a stop loses (queued, not yet written) is repaired by the Approval's next look (each event, and the
  listing at start-up): a waiting one is added, an ended one dropped; neither writes when the list holds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from hangar.kube import ApiException
from hangar.models import Approval, Session

from ..context import Context
from ..status import patch_status
from .delivery import final

log = logging.getLogger("hangar.operator.approvals")

FIRST_BACKOFF, MAX_BACKOFF = 0.2, 5.0


@dataclass(frozen=True)
class Change:
    """``add`` an entry (a dict with its ``id``), ``drop`` an id, or ``count`` one more approval."""

    kind: Literal["add", "drop", "count"]
    entry: dict[str, Any] = field(default_factory=dict)
    id: str = ""


def apply(
    pending: list[dict[str, Any]], approvals: int, changes: Iterable[Change]
) -> tuple[list[dict[str, Any]], int]:
    """``pending`` and the approval count after ``changes``, in order. An entry already listed is not added
    twice; dropping one not listed changes nothing."""
    out = list(pending)
    for c in changes:
        if c.kind == "add":
            if not any(x.get("id") == c.entry.get("id") for x in out):
                out.append(c.entry)
        elif c.kind == "drop":
            out = [x for x in out if x.get("id") != c.id]
        else:
            approvals += 1
    return out, approvals


def listed(ap: Approval) -> dict[str, Any]:
    """An approval as the session lists it while it waits."""
    entry: dict[str, Any] = {"id": ap.name, "turn": ap.spec.turn, "tool": ap.spec.tool}
    if ap.spec.command is not None:
        entry["command"] = ap.spec.command
    return entry


Key = tuple[str, str]  # (namespace, session)


class PendingWriter:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queued: dict[Key, list[Change]] = {}
        self.tasks: dict[Key, asyncio.Task[None]] = {}

    def add(self, ns: str, session: str, entry: dict[str, Any], count: bool = False) -> None:
        self.queue(ns, session, [Change("add", entry=entry)] + ([Change("count")] if count else []))

    def drop(self, ns: str, session: str, approval: str) -> None:
        self.queue(ns, session, [Change("drop", id=approval)])

    def count(self, ns: str, session: str) -> None:
        self.queue(ns, session, [Change("count")])

    def queue(self, ns: str, session: str, changes: list[Change]) -> None:
        if not session or not changes:
            return
        key = (ns, session)
        self.queued.setdefault(key, []).extend(changes)
        if key not in self.tasks:
            self.tasks[key] = asyncio.create_task(self._drain(key))

    async def settled(self) -> None:
        """Everything queued so far is written (or given up)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)

    def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()

    async def _drain(self, key: Key) -> None:
        try:
            while self.queued.get(key):
                changes = self.queued.pop(key)
                await self._write(key, changes)
        finally:
            # No await since the loop's last look: nothing was queued after it without a task to write it.
            self.tasks.pop(key, None)

    async def _write(self, key: Key, changes: list[Change]) -> None:
        ns, session = key
        kube = self.ctx.kube_in(ns)
        backoff = FIRST_BACKOFF
        while True:
            # What was queued while the last try failed goes out with this one, after what it held.
            changes += self.queued.pop(key, [])
            try:
                s_obj = await self.ctx.cached(ns, "sessions", session)
                if s_obj is None:
                    return  # the session is gone, and its record with it
                st = Session.model_validate(s_obj).status
                before = [p.dump() for p in st.pending_approvals]
                pending, n = apply(before, st.counters.approvals, changes)
                patch: dict[str, Any] = {}
                if pending != before:
                    patch["pendingApprovals"] = pending
                if n != st.counters.approvals:
                    # This count alone: the other counters are written under the session's lock meanwhile.
                    counters = st.counters.model_copy()
                    counters.approvals = n
                    patch["counters"] = counters.changed(st.counters)
                if patch:
                    await patch_status(kube, "sessions", s_obj, patch)
                return
            except ApiException as e:
                if e.status == 404:
                    return
                if final(e):
                    log.warning(
                        "pendingApprovals of session %s not written: %s %s", session, e.status, e.reason
                    )
                    return
                log.info("pendingApprovals of session %s: %s; trying again", session, e.status)
            except Exception as e:  # the apiserver away: tried again (the record must catch up)
                log.info("pendingApprovals of session %s: %s; trying again", session, e)
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)
