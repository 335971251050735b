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

A decision's own status write waits for the confirmation first (at most ``HEAR_WAIT``; the driver answers
within milliseconds): it is taken from the driver's event as the gateway hands it over, before the event
waits for the session's lock the decision holds, and ``deliveredAt`` goes out in the decision's write. One
write where there were two, and none on the apiserver while the answer is on its way to the agent; the
confirmation, applied after, then writes nothing. Unheard in time, the status is written without it and
the confirmation writes it as above.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from hangar.kube import ApiException, Obj
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
# Seconds a decision's status write waits to hear that the driver has delivered its answer (it holds the
# session's lock meanwhile: the driver's next events wait anyway, behind the confirmation).
HEAR_WAIT = 0.25

Key = tuple[str, str]  # (namespace, approval)


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


def answer_delivered(p: dict[str, Any]) -> str | None:
    """The Approval whose answer a ``command_result`` says the driver gave the CLI, if it says so."""
    cid = str(p.get("command_id") or "")
    if p.get("op") == "answer" and p.get("ok") and cid.startswith("answer-ap-"):
        return cid[len("answer-") :]
    return None


def final(e: ApiException) -> bool:
    """The apiserver refused the write as it is (trying again cannot work); a conflict is read again."""
    status = int(e.status or 0)
    return 400 <= status < 500 and status not in (408, 409, 429)


class Deliveries:
    def __init__(self, ctx: Context, sent: set[Key]) -> None:
        self.ctx = ctx
        # The approvals controller's set of answers this process sent (shared: only the others are re-sent).
        self.sent = sent
        self.tasks: set[asyncio.Task[None]] = set()
        # Decisions whose status write waits to hear of their delivery: when the driver's word arrived.
        self.hearing: dict[Key, asyncio.Future[datetime]] = {}
        # Written with the decision's status: the confirmation, applied later, has nothing to write.
        self.recorded: set[Key] = set()
        # The Approval as its request's status write left it, when a decision was in it already.
        self.early: dict[Key, Obj] = {}

    def requested(self, ns: str, name: str, written: Obj) -> None:
        """The request's status write returned ``written`` (under the session's lock). A decision made before
        it landed is in it: that decision's event, which shows no status, waits for this lock, and then
        decides from this, the apiserver's own answer, without a read (a stale one loses its compare-and-set)."""
        if (written.get("spec") or {}).get("decision") is not None:
            self.early[(ns, name)] = written

    def first_look(self, ns: str, name: str, sent: bool) -> Obj | None:
        """What a decision seen before its request's status write decides from, if that write showed it and
        its answer is not out yet (else the state is read)."""
        early = self.early.pop((ns, name), None)
        return None if sent else early

    def expect(self, ns: str, name: str) -> None:
        """A decision's answer is about to be sent: its status write will wait to hear of its delivery."""
        self.hearing[(ns, name)] = asyncio.get_running_loop().create_future()

    def arrived(self, ns: str, event: str, p: dict[str, Any], received: datetime) -> None:
        """A driver event as the gateway hands it over (its signature checked, in order), before it waits for
        the session's lock: the word that an answer was delivered reaches the decision holding that lock."""
        name = answer_delivered(p) if event == "command_result" else None
        heard = self.hearing.get((ns, name)) if name is not None else None
        if heard is not None and not heard.done():
            heard.set_result(received)

    async def heard(self, ns: str, name: str) -> datetime | None:
        """When the driver's word arrived, waited for (``HEAR_WAIT``) if a decision expects it; None when
        none is expected, or it did not come in time (the confirmation writes it then)."""
        key = (ns, name)
        heard = self.hearing.get(key)
        if heard is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(heard), HEAR_WAIT)
        except TimeoutError:
            self.hearing.pop(key, None)
            return None

    def written(self, ns: str, name: str, delivered: bool) -> None:
        """The decision's status is written, ``delivered``: with its ``deliveredAt``."""
        self.hearing.pop((ns, name), None)
        if delivered:
            self.recorded.add((ns, name))

    def confirmed(self, ns: str, name: str, received: datetime | None = None) -> None:
        """The driver wrote the answer to the CLI; ``received``: when its word arrived (the time recorded)."""
        key = (ns, name)
        self.hearing.pop(key, None)
        if key in self.recorded:  # written with the decision (the status write came first, under the lock)
            # Still among the answers sent until the watch shows it delivered (``Approvals.reconcile``): an
            # older event of it, still on its way, must not pass for a decision to send.
            self.recorded.discard(key)
            return
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
