"""Taint: a web tool's or an untrusted MCP server's result taints the turn and its session (sticky).

The driver is told with the signed ``taint`` command, and the policy engine counts pushes, network calls and
MCP write tools as risky from then on. A session created with ``spec.tainted`` starts tainted, and so does a
fork of a tainted session.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hangar.kube import Obj
from hangar.models import Session, Turn
from hangar.models.session import Taint

from .. import metrics
from ..context import Context
from ..status import patch_status
from .policy import MAX_TAINT_REASONS


def _with(taint: Taint, reason: str) -> Taint | None:
    """``taint`` with ``reason`` added, or None when it says that already."""
    reasons = list(taint.reasons)
    if reason not in reasons and len(reasons) < MAX_TAINT_REASONS:
        reasons.append(reason)
    if taint.tainted and reasons == taint.reasons:
        return None
    return Taint(tainted=True, reasons=reasons, since=taint.since or datetime.now(UTC))


class Tainting:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def taint(self, ns: str, session: str, turn: str | None, reason: str) -> None:
        """Taint the session and the turn (sticky) and tell the driver. Caller holds the session's lock."""
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        if s_obj is None:
            return
        s = Session.model_validate(s_obj)
        was = s.status.taint.tainted
        new = _with(s.status.taint, reason)
        if new is not None:
            await patch_status(kube, "sessions", s_obj, {"taint": new.dump()})
        if turn:
            t_obj = await kube.get("turns", turn)
            if t_obj is not None:
                tnew = _with(Turn.model_validate(t_obj).status.taint, reason)
                if tnew is not None:
                    await patch_status(kube, "turns", t_obj, {"taint": tnew.dump()})
        run = self.ctx.run_of(ns, s.status.sandbox.run)
        if run and not was:
            await self.ctx.gateway.send(run.id, "taint", {}, command_id=f"taint-{run.pod}")
        if not was:
            metrics.TAINTED.inc()
            await self.ctx.activity(ns, session, "taint", {"reason": reason}, turn)
            await self.ctx.events.emit(kube, s_obj, "Warning", "Tainted", f"the session is tainted: {reason}")

    async def sync_spec_taint(self, ns: str, s_obj: Obj, forked: str | None = None) -> bool:
        """``spec.tainted``, or ``forked`` (why: a fork of a tainted session): the session starts tainted.
        True when the status was changed now."""
        s = Session.model_validate(s_obj)
        reasons = ["the session started tainted (spec.tainted)"] if s.spec.tainted else []
        reasons += [forked] if forked else []
        if not reasons or s.status.taint.tainted:
            return False
        taint = Taint(tainted=True, reasons=reasons, since=datetime.now(UTC))
        await patch_status(self.ctx.kube_in(ns), "sessions", s_obj, {"taint": taint.dump()})
        metrics.TAINTED.inc()
        return True
