"""``deliveredAt``: the driver's word that the CLI has its answer, recorded beside the session's next events.

A session's driver events are applied one at a time under its lock, and the confirmation of an answer (the
``command_result`` of ``answer-<approval>``) comes just before the agent's next tool call and, under ``ask``,
its next ``permission_request``. Read and written under the lock, the confirmation put two apiserver round
trips ahead of that request. It is written on a task of its own instead, once the event is applied:

- The decision's status is written by then: the confirmation waited for the lock the decide held while it
  wrote it, so the read finds the Approval decided.
- Nothing else writes a decided Approval's status, and this write is a compare-and-set: a second
  confirmation (an answer sent again) finds it written and writes nothing.
- While it is being written the approval stays among the answers this process sent, so a reconcile meanwhile
  does not send the answer again.
- A write refused for good, or a stop, leaves ``deliveredAt`` unset and the approval no longer counted as
  sent: the next reconcile (its next watch event, or the listing at start-up) sends the answer again under
  the same command id, the driver confirms it with its recorded result without giving it to the CLI a
  second time, and that confirmation is written. Delivery stays exactly once; only its record may be late.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from hangar.kube import ApiException
from hangar.models import Approval
from hangar.models.approval import APPROVAL_DONE
from hangar.models.base import iso

from ..context import Context
from ..status import patch_status

log = logging.getLogger("hangar.operator.approvals")

DECIDED = ("Allowed", "Denied", "Expired")
# Between tries of a write the apiserver did not take (it was away, throttling, a server error); after the
# last the record waits for the re-send (about 30 s of tries).
FIRST_BACKOFF, MAX_BACKOFF, TRIES = 0.2, 5.0, 10


def ended(phase: str | None, delivered: bool, sent: bool) -> bool:
    """Nothing left to do for an Approval in this state, however stale the look: it ended (an ended phase
    never changes), and it was withdrawn (nothing to deliver), its delivery is recorded (never unset), or
    this process sent its answer and the driver's confirmation will record it (a write given up takes it
    from ``sent``: the next look sends the answer again)."""
    return phase in APPROVAL_DONE and (phase == "Withdrawn" or delivered or sent)


def waiting_as_known(phase: str | None, decided: bool, armed: bool) -> bool:
    """Nothing to do now for an Approval seen undecided: its request's own create (the status write that
    follows is seen next), or pending with its deadline armed here. A decision made since is a later event
    of the same Approval, seen after this one (kopf hands an object's events over in order, the latest last);
    a withdrawal or an expiry is not waited for on these events (the turn's end, the sandbox's, the timer)."""
    if decided:
        return False
    return phase is None or (phase == "Pending" and armed)


def final(e: ApiException) -> bool:
    """The apiserver refused the write as it is (trying again cannot work); a conflict is read again."""
    status = int(e.status or 0)
    return 400 <= status < 500 and status not in (408, 409, 429)


class Deliveries:
    def __init__(self, ctx: Context, sent: set[tuple[str, str]]) -> None:
        self.ctx = ctx
        # The approvals controller's set of answers this process sent (shared: only the others are re-sent).
        self.sent = sent
        self.tasks: set[asyncio.Task[None]] = set()

    def confirmed(self, ns: str, name: str, received: datetime | None = None) -> None:
        """The driver wrote the answer to the CLI; ``received``: when its word arrived (the time recorded)."""
        at = iso(received) if received is not None else iso()
        self.sent.add((ns, name))  # until it is written: a reconcile meanwhile does not send it again
        task = asyncio.create_task(self._write(ns, name, at))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def settled(self) -> None:
        """Every confirmation received so far is written (or given up)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def _write(self, ns: str, name: str, at: str) -> None:
        kube = self.ctx.kube_in(ns)
        backoff = FIRST_BACKOFF
        try:
            for _ in range(TRIES):
                try:
                    obj = await kube.get("approvals", name)
                    if obj is None:
                        return
                    st = Approval.model_validate(obj).status
                    if st.delivered_at is not None or st.phase not in DECIDED:
                        return
                    rv = obj["metadata"]["resourceVersion"]
                    await patch_status(kube, "approvals", obj, {"deliveredAt": at}, resource_version=rv)
                    return
                except ApiException as e:
                    if e.status in (404, 409):
                        continue  # changed meanwhile (or gone): look again
                    if final(e):
                        log.warning("deliveredAt of approval %s not written: %s %s", name, e.status, e.reason)
                        return
                except Exception as e:  # the apiserver away: tried again, then left to the re-send
                    log.info("deliveredAt of approval %s: %s; trying again", name, e)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
            log.warning("deliveredAt of approval %s not written after %d tries", name, TRIES)
        finally:
            self.sent.discard((ns, name))
