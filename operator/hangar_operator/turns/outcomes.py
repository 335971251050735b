"""What the driver reports about a turn becomes its status: usage, hand-backs, a refused start, its end.

Every end of a turn goes through :meth:`TurnOutcomes.finish` (one status write with its steers and
interrupts final, ``ending.py``), which also shows why a turn failed as a Kubernetes Event.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from hangar.kube import Kube, Obj
from hangar.models import Session, Turn
from hangar.models.limits import ARTIFACTS_MAX, REASON_MAX, RESULT_MAX, SUMMARY_MAX, clip
from hangar.models.turn import Artifact, Usage

from ..approvals.controller import Approvals
from ..context import Context
from ..lifecycle import SESSION, TURN, after, can, move
from ..status import patch_status
from .deadlines import Deadlines
from .ending import Ending, end_turn
from .steering import Steering

log = logging.getLogger("hangar.operator.turns")

# What the CLIs say when asked to resume a conversation they never saved.
LOST_CONVERSATION = ("No conversation found with session ID", "no rollout found for thread id")
OUTCOME_EVENT = {"completed": "completed", "failed": "failed", "interrupted": "interrupted"}


def _usage(raw: Any) -> Usage:
    u = raw if isinstance(raw, dict) else {}
    return Usage(input_tokens=int(u.get("input_tokens") or 0), output_tokens=int(u.get("output_tokens") or 0))


class TurnOutcomes:
    def __init__(self, ctx: Context, steering: Steering, deadlines: Deadlines, approvals: Approvals) -> None:
        self.ctx = ctx
        self.steering = steering
        self.deadlines = deadlines
        self.approvals = approvals

    async def finish(self, ns: str, owner: str, obj: Obj, ending: Ending) -> Obj | None:
        """End the turn ``obj`` (caller holds the session's lock); None when it had ended already."""
        kube = self.ctx.kube_in(ns)
        self.deadlines.cancel(ns, obj["metadata"]["name"])
        done = await end_turn(kube, obj, ending, self.steering.next_turn_maker(kube, owner))
        if done is None:
            return None
        written, shown = done
        name = obj["metadata"]["name"]
        for payload in shown:
            await self.ctx.activity(ns, owner, "progress", payload, name)
        if ending.outcome == "failed":
            await self.ctx.activity(ns, owner, "turn_failed", {"reason": ending.reason[:2000]}, name)
            why = f"turn {name} failed: {ending.reason or 'no reason given'}"
            await self.ctx.events.emit(kube, written, "Warning", "TurnFailed", why)
            await self.ctx.events.emit(kube, await kube.get("sessions", owner), "Warning", "TurnFailed", why)
        return written

    async def requeue(
        self,
        ns: str,
        owner: str,
        obj: Obj,
        reason: str,
        extra: dict[str, Any] | None = None,
        shown: bool = True,
    ) -> None:
        """The turn goes back to Queued: it runs in the next sandbox (the agent never had it here)."""
        turn = Turn.model_validate(obj)
        patch: dict[str, Any] = {
            "phase": move(TURN, turn.status.phase, "requeued"),
            "run": None,
            "startedAt": None,
            "policy": None,
        }
        patch.update(extra or {})
        await patch_status(self.ctx.kube_in(ns), "turns", obj, patch)
        self.steering.forget_sent(ns, turn.name)  # its requests go to the next sandbox's driver
        if shown:
            await self.ctx.activity(ns, owner, "turn_requeued", {"reason": reason}, turn.name)

    # --- driver events ----------------------------------------------------------------------------------
    async def usage(self, ns: str, turn_name: str, p: dict[str, Any]) -> None:
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("turns", turn_name)
        if obj is None:
            return
        patch: dict[str, Any] = {"usage": _usage(p).dump()}
        if p.get("cost_usd") is not None:
            patch["costUsd"] = float(p["cost_usd"])
        await patch_status(kube, "turns", obj, patch)

    async def turn_ended(self, ns: str, session: str, turn_name: str, p: dict[str, Any]) -> None:
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("turns", turn_name)
        if obj is None:
            return
        turn = Turn.model_validate(obj)
        if turn.status.ended or turn.status.phase != "Running":
            return
        raw = p.get("outcome")
        outcome = raw if raw in ("completed", "failed", "interrupted") else "failed"
        code = p.get("exit_status")
        exit_status = int(code) if isinstance(code, int) else (130 if outcome == "interrupted" else 0)
        error = clip(str(p.get("error") or ""), REASON_MAX)
        if outcome == "failed" and await self._conversation_lost(ns, session, obj, error):
            return
        usage = _usage(p.get("usage"))
        cost = float(p["cost_usd"]) if p.get("cost_usd") is not None else None
        ending = Ending(
            event="asked" if turn.status.question else OUTCOME_EVENT[outcome],
            outcome=outcome,  # type: ignore[arg-type]
            exit_status=exit_status,
            reason=error,
            summary=clip(str(p.get("summary") or ""), SUMMARY_MAX),
            usage=usage,
            cost_usd=cost,
        )
        await self.finish(ns, session, obj, ending)
        s_obj = await kube.get("sessions", session)
        if s_obj is None:
            return
        st = Session.model_validate(s_obj).status
        counters = st.counters.model_copy()
        counters.input_tokens += usage.input_tokens
        counters.output_tokens += usage.output_tokens
        counters.cost_usd = round(counters.cost_usd + (cost or 0.0), 6)
        spatch: dict[str, Any] = {"lastTurn": turn_name, "counters": counters.changed(st.counters)}
        if st.current_turn == turn_name:
            spatch["currentTurn"] = None
            if can(SESSION, st.phase, "turn_ended"):
                spatch["phase"] = move(SESSION, st.phase, "turn_ended")
        await patch_status(kube, "sessions", s_obj, spatch)

    async def _conversation_lost(self, ns: str, session: str, obj: Obj, error: str) -> bool:
        """A CLI killed before it saved its conversation can't resume it: the turn restarts, once, in a new
        conversation instead of failing every turn after it."""
        turn = Turn.model_validate(obj)
        if not any(m in error for m in LOST_CONVERSATION) or turn.status.restarted:
            return False
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        lost = Session.model_validate(s_obj).status.conversation if s_obj else None
        if s_obj is not None:
            await _session_turn_off(kube, s_obj, "turn_requeued", {"conversation": None})
        why = f"the conversation {lost} was lost with its sandbox; the turn restarted in a new one"
        await self.requeue(ns, session, obj, error[:500], {"restarted": True, "reason": why}, shown=False)
        await self.ctx.activity(
            ns, session, "conversation_lost", {"conversation": lost, "error": error[:500]}, turn.name
        )
        return True

    async def handback(self, ns: str, turn_name: str, p: dict[str, Any]) -> None:
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("turns", turn_name)
        if obj is None:
            return
        kind = p.get("kind")
        if kind == "result" and isinstance(p.get("result"), dict):
            size = len(json.dumps(p["result"]).encode())
            # Larger results stay in the activity log (the handback event holds them whole).
            result = p["result"] if size <= RESULT_MAX else {"omitted": f"{size} bytes: see the activity log"}
            await patch_status(kube, "turns", obj, {"result": result})
        elif kind == "ask" and p.get("question"):
            await patch_status(kube, "turns", obj, {"question": str(p["question"])[:4000]})
        elif kind == "artifact" and p.get("name"):
            arts = list(Turn.model_validate(obj).status.artifacts)
            if len(arts) < ARTIFACTS_MAX and not any(a.name == p["name"] for a in arts):
                arts.append(
                    Artifact(
                        name=str(p["name"])[:253],
                        path=str(p.get("path", ""))[:4096],
                        size=int(p.get("size") or 0),
                        sha256=str(p.get("sha256") or ""),
                    )
                )
                await patch_status(kube, "turns", obj, {"artifacts": [a.dump() for a in arts]})

    async def start_refused(self, ns: str, session: str, turn_name: str, p: dict[str, Any]) -> None:
        """The driver did not start the turn: the sandbox is going away (it runs in the next one), or the
        driver refused it (a turn already runs, the harness can't take the policy…)."""
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("turns", turn_name)
        if obj is None or Turn.model_validate(obj).status.phase != "Running":
            return
        error = clip(str(p.get("error") or ""), REASON_MAX)
        s_obj = await kube.get("sessions", session)
        if "the sandbox is shutting down" in error:
            await self.requeue(ns, session, obj, error)
            if s_obj is not None:
                await _session_turn_off(kube, s_obj, "turn_requeued", {"sandbox": {"connected": False}})
            return
        reason = f"the sandbox refused to start the turn: {error or 'no reason given'}"
        await self.finish(
            ns, session, obj, Ending(event="failed", outcome="failed", exit_status=1, reason=reason)
        )
        if s_obj is not None:
            await _session_turn_off(kube, s_obj, "turn_ended")


async def _session_turn_off(kube: Kube, s_obj: Obj, event: str, more: dict[str, Any] | None = None) -> None:
    """The session no longer runs a turn: ``event`` (turn_ended, turn_requeued) moves its phase, where its
    lifecycle has that move."""
    phase = after(SESSION, Session.model_validate(s_obj).status.phase, event)
    await patch_status(kube, "sessions", s_obj, {"phase": phase, "currentTurn": None, **(more or {})})
