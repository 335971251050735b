"""What the sandbox's driver reports about a turn's steers and interrupts, recorded in the Turn's status.

The driver reports a steer's fate once (``delivered`` or ``queued``: the turn ended first, so it starts the
next Turn), refuses a steer it can't take, arbitrates a withdrawal (withdrawn, or too late), and confirms an
interrupt whose message the same turn goes on with. Sending the requests is ``steering.py``'s side.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from hangar.kube import Kube, Obj
from hangar.models import Turn
from hangar.models.labels import session_selector
from hangar.models.turn import InterruptRequest, InterruptState, Steer, SteerState
from hangar.turns import turn_index

from .. import metrics
from ..context import Context, resource
from ..status import patch_status
from .deadlines import Deadlines

log = logging.getLogger("hangar.operator.steering")

# The driver events this module applies.
EVENTS = frozenset({"steer", "interrupted", "command_result"})
NextTurnMaker = Callable[[Kube, str], Callable[[Steer | InterruptRequest], Awaitable[str]]]


class SteerEvents:
    def __init__(self, ctx: Context, deadlines: Deadlines, next_turn_maker: NextTurnMaker) -> None:
        self.ctx = ctx
        self.deadlines = deadlines
        self.next_turn_maker = next_turn_maker

    async def on_event(self, ns: str, owner: str, name: str, p: dict[str, Any], hint: str | None) -> None:
        if name == "steer":
            await self._steer_outcome(ns, owner, hint, p)
        elif name == "interrupted":
            await self._interrupted(ns, owner, hint, p)
        elif name == "command_result":
            op = p.get("op")
            if op == "steer" and not p.get("ok"):
                await self._steer_refused(
                    ns, owner, hint, str(p.get("steer_id", "")), str(p.get("error") or "")
                )
            elif op == "withdraw" and p.get("ok"):
                await self._withdraw_result(
                    ns, owner, hint, str(p.get("steer_id", "")), bool(p.get("withdrawn"))
                )

    async def _find(self, ns: str, owner: str, kind: str, item_id: str, hint: str | None) -> Obj | None:
        """The turn whose spec holds steer/interrupt ``item_id``: the hinted turn first, else the latest."""
        if not item_id:
            return None
        kube = self.ctx.kube_in(ns)

        def holds(obj: Obj) -> bool:
            return any(x.get("id") == item_id for x in (obj.get("spec") or {}).get(kind) or [])

        if hint:
            obj = await kube.get("turns", hint)
            if obj is not None and holds(obj):
                return obj
        for obj in sorted(
            await kube.list("turns", label_selector=session_selector(owner)), key=turn_index, reverse=True
        ):
            if holds(obj):
                return obj
        return None

    async def _steer_outcome(self, ns: str, owner: str, hint: str | None, p: dict[str, Any]) -> None:
        sid, raw = str(p.get("steer_id", "")), p.get("status")
        if raw not in ("delivered", "queued"):
            return
        outcome: Literal["delivered", "queued"] = "delivered" if raw == "delivered" else "queued"
        obj = await self._find(ns, owner, "steers", sid, hint)
        if obj is None:
            log.warning("outcome %s of an unknown steer %s", outcome, sid, extra=resource(ns, owner))
            return
        turn = Turn.model_validate(obj)
        states, state = _editable(turn.status.steers, sid)
        if state is None:
            state = SteerState(id=sid)
            states.append(state)
        elif state.status != "sending":
            if state.status != outcome:
                log.error(
                    "steer %s is %s; the driver now says %s",
                    sid,
                    state.status,
                    outcome,
                    extra=resource(ns, turn.name),
                )
            return
        state.status, state.at, state.reason = outcome, datetime.now(UTC), str(p.get("reason") or "")[:500]
        if isinstance(p.get("written_at"), int | float):
            state.written_at = datetime.fromtimestamp(float(p["written_at"]), UTC)
        if state.withdraw == "requested":
            state.withdraw = "too_late"
        message = f"steer {sid} {outcome}"
        if outcome == "queued":
            req = next((x for x in turn.spec.steers if x.id == sid), None)
            if req is not None:
                state.next_turn = await self.next_turn_maker(self.ctx.kube_in(ns), owner)(req)
                message += f": the turn ended first, it starts {state.next_turn}"
        await patch_status(self.ctx.kube_in(ns), "turns", obj, {"steers": [s.dump() for s in states]})
        metrics.STEERS.labels(status=outcome).inc()
        await self.ctx.activity(
            ns, owner, "progress", {"message": message, "event": "steer.status", "steer": sid}, turn.name
        )

    async def _steer_refused(self, ns: str, owner: str, hint: str | None, sid: str, reason: str) -> None:
        obj = await self._find(ns, owner, "steers", sid, hint)
        if obj is None:
            return
        states = [s.model_copy(deep=True) for s in Turn.model_validate(obj).status.steers]
        changed = False
        for x in states:
            if x.id == sid and x.status == "sending":
                x.status, x.reason, x.at = (
                    "refused",
                    reason[:500] or "refused by the sandbox",
                    datetime.now(UTC),
                )
                changed = True
        if changed:
            await patch_status(self.ctx.kube_in(ns), "turns", obj, {"steers": [s.dump() for s in states]})
            metrics.STEERS.labels(status="refused").inc()

    async def _withdraw_result(
        self, ns: str, owner: str, hint: str | None, sid: str, withdrawn: bool
    ) -> None:
        obj = await self._find(ns, owner, "steers", sid, hint)
        if obj is None:
            return
        turn = Turn.model_validate(obj)
        states, state = _editable(turn.status.steers, sid)
        if state is None:
            return
        if withdrawn:
            if state.status != "sending":
                log.error(
                    "steer %s withdrawn by the driver but %s here",
                    sid,
                    state.status,
                    extra=resource(ns, turn.name),
                )
                return
            state.status, state.withdraw, state.at, state.reason = (
                "cancelled",
                "withdrawn",
                datetime.now(UTC),
                "withdrawn",
            )
            metrics.STEERS.labels(status="cancelled").inc()
            text = f"steer {sid} withdrawn"
        else:
            if state.withdraw == "too_late":
                return
            state.withdraw = "too_late"
            text = f"steer {sid}: too late to withdraw, the agent has it"
        await patch_status(self.ctx.kube_in(ns), "turns", obj, {"steers": [s.dump() for s in states]})
        await self.ctx.activity(
            ns, owner, "progress", {"message": text, "event": "steer.status", "steer": sid}, turn.name
        )

    async def _interrupted(self, ns: str, owner: str, hint: str | None, p: dict[str, Any]) -> None:
        """The CLI stopped for an interrupt with a message and the same turn goes on with it (signed)."""
        iid = str(p.get("interrupt_id") or "")
        obj = await self._find(ns, owner, "interrupts", iid, hint)
        if obj is None:
            return
        turn = Turn.model_validate(obj)
        states, state = _editable(turn.status.interrupts, iid)
        if state is None or state.status != "sent":
            return
        state.status, state.at, state.message_status = "confirmed", datetime.now(UTC), "delivered"
        await patch_status(self.ctx.kube_in(ns), "turns", obj, {"interrupts": [i.dump() for i in states]})
        if not any(x.status == "sent" for x in states):
            self.deadlines.cancel(ns, turn.name)
        await self.ctx.activity(
            ns,
            owner,
            "progress",
            {"message": f"interrupted: the turn goes on with {iid}'s message", "event": "interrupt.status"},
            turn.name,
        )


ItemState = TypeVar("ItemState", SteerState, InterruptState)


def _editable(items: list[ItemState], item_id: str) -> tuple[list[ItemState], ItemState | None]:
    """Copies of a turn's steer (or interrupt) states, to change and patch back whole, and the one with
    ``item_id`` among them."""
    states = [x.model_copy(deep=True) for x in items]
    return states, next((x for x in states if x.id == item_id), None)
