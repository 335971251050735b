"""Steering a running turn: steers, withdrawals, interrupts and their classes (the operator's side).

People write requests into the Turn's spec (REST, the CLI, ``kubectl patch``: the same path); this module
delivers them to the sandbox's driver and records what happened in the Turn's status, under the session's
lock ([steering.md](../../../docs/steering.md) says what each status means).

- A new steer on a running turn becomes ``sending`` and goes to the driver (command ``steer-<turn>-<id>``).
  The driver reports its fate once: ``delivered`` (the CLI has it in this turn) or ``queued`` (the turn ended
  first: it starts the next Turn, ``nextTurn``). A steer on a turn that has ended is ``queued`` at once; one
  on a one-shot harness is ``refused``.
- ``withdrawn: true`` in spec: not yet sent → ``cancelled`` here; sent → the driver's ``withdraw`` command
  arbitrates (``withdraw-<turn>-<id>``): withdrawn (``cancelled``) or ``too_late`` (its ``steer`` event
  brings delivered or queued). Never both.
- An interrupt is sent (``interrupt-<turn>-<id>``) and a deadline armed; a signed ``turn_ended`` or
  ``interrupted`` confirms it, else the run is killed (``deadlines.py``, ``ending.py``).
- A class set in spec is mirrored into the status record and counted.

What a turn's end does to its requests is in ``ending.py``: one write with the phase.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from hangar.bodies import Body, resolve_or_none
from hangar.kube import Kube, Obj
from hangar.models import LIVE_HARNESSES, Session, Turn
from hangar.models.turn import InterruptRequest, InterruptState, Steer, SteerState
from hangar.turns import create_turn

from .. import metrics
from ..context import Context
from ..status import patch_status
from .deadlines import Deadlines
from .steer_events import SteerEvents

log = logging.getLogger("hangar.operator.steering")

SHOWN_CHARS = 300
BODY_GONE = "its message body is not in hangar's database (it was lost): send it again"
Shown = dict[str, Any]


def one_shot_reason(harness: str) -> str:
    return (
        f"{harness} cannot be steered: it runs one-shot, so a message can't reach a running turn. "
        "Send it to start the next turn, or interrupt the run"
    )


def steer_command(turn: str, steer_id: str) -> str:
    return f"steer-{turn}-{steer_id}"


def withdraw_command(turn: str, steer_id: str) -> str:
    return f"withdraw-{turn}-{steer_id}"


def interrupt_command(turn: str, interrupt_id: str) -> str:
    return f"interrupt-{turn}-{interrupt_id}"


def _short(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _class_changed(req: Steer | InterruptRequest, state: SteerState | InterruptState) -> bool:
    if req.klass == "unclassified" and not req.classified_by:
        return False
    return not (
        state.klass == req.klass and (req.classified_at is None or state.classified_at == req.classified_at)
    )


class Steering:
    def __init__(self, ctx: Context, deadlines: Deadlines) -> None:
        self.ctx = ctx
        self.deadlines = deadlines
        # Command ids this process has queued on the gateway (its queue lives in memory only: after an
        # operator restart, what the resources show as sent is sent again, with the same ids).
        self.sent: set[tuple[str, str]] = set()
        self.events = SteerEvents(ctx, deadlines, self.next_turn_maker)

    def forget_sent(self, namespace: str, turn: str) -> None:
        """The turn will run again in another sandbox: what was sent for it is sent again there."""
        prefixes = tuple(f"{p}-{turn}-" for p in ("steer", "withdraw", "interrupt"))
        self.sent = {x for x in self.sent if not (x[0] == namespace and x[1].startswith(prefixes))}
        self.deadlines.cancel(namespace, turn)

    def next_turn_maker(self, kube: Kube, owner: str) -> Callable[[Steer | InterruptRequest], Awaitable[str]]:
        async def make(req: Steer | InterruptRequest) -> str:
            # The same body, inline or by reference: a stored body is not stored again.
            body = Body(req.message or "", req.message_ref)
            return await create_turn(kube, owner, body, by=req.by, from_steer=req.id, klass=req.klass)

        return make

    async def _text(self, req: Steer | InterruptRequest) -> str | None:
        """The whole message of a request (a stored body read back), or None when its body is gone."""
        return await resolve_or_none(self.ctx.db, Body(req.message or "", req.message_ref))

    async def _send(self, ns: str, run: str, op: str, body: dict[str, Any], command_id: str) -> None:
        await self.ctx.gateway.send(run, op, body, command_id=command_id)
        self.sent.add((ns, command_id))

    def _classify(
        self, kind: str, req: Steer | InterruptRequest, state: SteerState | InterruptState
    ) -> Shown | None:
        """Mirror a class set in spec into the status record; the progress event to show, if it changed."""
        if not _class_changed(req, state):
            return None
        by = req.classified_by or "spec"
        state.klass, state.classified_by = req.klass, by
        state.classified_at = req.classified_at or datetime.now(UTC)
        metrics.STEER_CLASSIFICATIONS.labels(req.klass).inc()
        return {
            "message": f"steer.classified: {kind} {req.id} is {req.klass} (by {by})",
            "event": "steer.classified",
            kind: req.id,
            "class": req.klass,
            "by": by,
        }

    # --- requests in spec -------------------------------------------------------------------------------
    def pending(self, ns: str, obj: Obj) -> bool:
        """Does this Turn (as a watch event shows it) ask for something not done yet? No API call: most
        events are the operator's own status writes and need nothing."""
        turn = Turn.model_validate(obj)
        st = turn.status
        if st.phase == "Queued":
            return False  # delivered when it starts
        steers = {x.id: x for x in st.steers}
        for req in turn.spec.steers:
            state = steers.get(req.id)
            if state is None or _class_changed(req, state):
                return True
            if state.status == "sending" and (
                (req.withdrawn and not state.withdraw)
                or (ns, steer_command(turn.name, req.id)) not in self.sent
            ):
                return True
        interrupts = {x.id: x for x in st.interrupts}
        for ireq in turn.spec.interrupts:
            istate = interrupts.get(ireq.id)
            if istate is None or _class_changed(ireq, istate):
                return True
            if (
                istate.status == "sent"
                and not st.ended
                and (
                    (ns, interrupt_command(turn.name, ireq.id)) not in self.sent
                    or not self.deadlines.armed(ns, turn.name)
                )
            ):
                return True
        return False

    async def reconcile(self, ns: str, owner: str, turn_name: str) -> None:
        """Deliver what the Turn's spec asks for and its status doesn't show yet. Idempotent; the caller
        holds the session's lock."""
        kube = self.ctx.kube_in(ns)
        # Both at once: a steer waits on this, and each read is a round trip to the apiserver.
        obj, s_obj = await asyncio.gather(kube.get("turns", turn_name), kube.get("sessions", owner))
        if obj is None or s_obj is None:
            return
        session = Session.model_validate(s_obj)
        run_pod = session.status.sandbox.run
        run = self.ctx.run_of(ns, run_pod)
        obj = await self._reconcile_steers(
            ns, owner, obj, run_pod, run.id if run else None, session.spec.harness
        )
        await self._reconcile_interrupts(ns, owner, obj, run_pod, run.id if run else None)

    async def _reconcile_steers(
        self, ns: str, owner: str, obj: Obj, run_pod: str | None, run: str | None, harness: str
    ) -> Obj:
        kube = self.ctx.kube_in(ns)
        turn = Turn.model_validate(obj)
        name, st = turn.name, turn.status
        same_run = bool(run_pod) and st.run == run_pod
        live = st.phase == "Running" and same_run
        states = [s.model_copy(deep=True) for s in st.steers]
        by_id = {x.id: x for x in states}
        now = datetime.now(UTC)
        changed = False
        sends: list[tuple[str, dict[str, Any], str]] = []
        shown: list[Shown] = []
        for req in turn.spec.steers:
            sid = req.id
            state = by_id.get(sid)
            if state is None:
                state = SteerState(id=sid, at=now, klass=req.klass)
                if (ns, steer_command(name, sid)) in self.sent and same_run and run:
                    # Sent by this process, its "sending" never written (that write failed): it is on its
                    # way all the same, so a withdrawal goes to the driver, which arbitrates.
                    state.status = "sending"
                    if req.withdrawn:
                        state.withdraw = "requested"
                        sends.append(
                            ("withdraw", {"steer_id": sid, "turn": name}, withdraw_command(name, sid))
                        )
                elif req.withdrawn:
                    state.status, state.withdraw = "cancelled", "withdrawn"
                    state.reason = "withdrawn before it was sent to the agent"
                    shown.append({"message": f"steer {sid} withdrawn", "event": "steer.status", "steer": sid})
                elif harness not in LIVE_HARNESSES:
                    state.status, state.reason = "refused", one_shot_reason(harness)
                    shown.append({"message": f"steer {sid} refused", "event": "steer.status", "steer": sid})
                elif st.ended:
                    state.status, state.reason = "queued", "the turn had ended before the steer was sent"
                    state.next_turn = await self.next_turn_maker(kube, owner)(req)
                    shown.append(
                        {
                            "message": f"steer {sid} queued: it starts {state.next_turn}",
                            "event": "steer.status",
                            "steer": sid,
                        }
                    )
                elif live and run and (text := await self._text(req)) is None:
                    state.status, state.reason = "refused", BODY_GONE
                    shown.append({"message": f"steer {sid} refused", "event": "steer.status", "steer": sid})
                elif live and run:
                    state.status = "sending"
                    sends.append(
                        (
                            "steer",
                            {"steer_id": sid, "message": text or "", "turn": name},
                            steer_command(name, sid),
                        )
                    )
                    shown.append(
                        {
                            "message": f"steered: {_short(req.message)}",
                            "event": "steer",
                            "steer": sid,
                            "by": req.by,
                            "class": req.klass,
                        }
                    )
                else:
                    continue  # a queued turn, or its sandbox is not there yet: delivered once it runs
                state.klass = "unclassified"  # set by _classify below when spec classified it
                metrics.INTERVENTIONS.labels("steer", req.klass).inc()
                if state.status != "sending":
                    metrics.STEERS.labels(status=state.status).inc()
                states.append(state)
                by_id[sid] = state
                changed = True
            elif state.status == "sending" and same_run and run:
                if req.withdrawn and not state.withdraw:
                    state.withdraw = "requested"
                    changed = True
                # After an operator restart; a body gone meanwhile leaves it to the turn's end (queued).
                resend = (ns, steer_command(name, sid)) not in self.sent
                if resend and (text := await self._text(req)) is not None:
                    sends.append(
                        ("steer", {"steer_id": sid, "message": text, "turn": name}, steer_command(name, sid))
                    )
                if state.withdraw == "requested" and (ns, withdraw_command(name, sid)) not in self.sent:
                    sends.append(("withdraw", {"steer_id": sid, "turn": name}, withdraw_command(name, sid)))
            classified = self._classify("steer", req, state)
            if classified:
                shown.append(classified)
                changed = True
        # Sent first, recorded right after: the driver's answer (its steer event) is applied under this
        # session's lock, which is held until "sending" is written, so it never finds the steer unrecorded;
        # a write that fails leaves the id in ``sent`` (above: a withdrawal then still reaches the driver),
        # and the same id sent again is executed once by the driver.
        for op, body, cid in sends:
            if run:
                await self._send(ns, run, op, body, cid)
        if changed:
            obj = await patch_status(kube, "turns", obj, {"steers": [s.dump() for s in states]})
        for payload in shown:
            await self.ctx.activity(ns, owner, "progress", payload, name)
        return obj

    async def _reconcile_interrupts(
        self, ns: str, owner: str, obj: Obj, run_pod: str | None, run: str | None
    ) -> None:
        kube = self.ctx.kube_in(ns)
        turn = Turn.model_validate(obj)
        name, st = turn.name, turn.status
        same_run = bool(run_pod) and st.run == run_pod
        states = [i.model_copy(deep=True) for i in st.interrupts]
        by_id = {x.id: x for x in states}
        now = datetime.now(UTC)
        changed = arm = False
        shown: list[Shown] = []
        for req in turn.spec.interrupts:
            iid = req.id
            state = by_id.get(iid)
            body: dict[str, Any] = {"turn": name, "interrupt_id": iid}
            if req.message:
                # A body that is gone drops the message, never the interrupt: the turn stops either way.
                text = await self._text(req)
                if text is not None:
                    body["message"] = text
            if state is None:
                if st.ended:
                    state = InterruptState(
                        id=iid, status="too_late", at=now, reason="the turn had already ended"
                    )
                    if req.message:
                        state.message_status = "queued"
                        state.next_turn = await self.next_turn_maker(kube, owner)(req)
                    shown.append(
                        {
                            "message": f"interrupt {iid}: the turn had already ended",
                            "event": "interrupt.status",
                        }
                    )
                elif st.phase == "Running" and same_run and run:
                    state = InterruptState(id=iid, status="sent", at=now)
                    await self._send(ns, run, "interrupt", body, interrupt_command(name, iid))
                    metrics.INTERRUPTS.inc()
                    arm = True
                    shown.append(
                        {
                            "message": "interrupt requested"
                            + (f": {_short(req.message)}" if req.message else ""),
                            "event": "interrupt",
                            "interrupt": iid,
                            "by": req.by,
                            "class": req.klass,
                        }
                    )
                else:
                    continue  # not running yet: delivered once it runs
                metrics.INTERVENTIONS.labels("interrupt", req.klass).inc()
                states.append(state)
                by_id[iid] = state
                changed = True
            elif state.status == "sent" and same_run and run and not st.ended:
                if (ns, interrupt_command(name, iid)) not in self.sent:  # after an operator restart
                    await self._send(ns, run, "interrupt", body, interrupt_command(name, iid))
                if not self.deadlines.armed(ns, name):
                    arm = True
            classified = self._classify("interrupt", req, state)
            if classified:
                shown.append(classified)
                changed = True
        if arm:
            # Armed before the status write: if the apiserver refuses that write, the run is still stopped.
            self.deadlines.arm(ns, owner, name)
        if changed:
            await patch_status(kube, "turns", obj, {"interrupts": [i.dump() for i in states]})
        for payload in shown:
            await self.ctx.activity(ns, owner, "progress", payload, name)

    async def on_event(self, ns: str, owner: str, name: str, p: dict[str, Any], hint: str | None) -> None:
        """A driver event about a steer or an interrupt (``steer_events.py``)."""
        await self.events.on_event(ns, owner, name, p, hint)
