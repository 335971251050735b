"""Governed calls and Tower: filing them, applying Tower's answers, withdrawing them.

- **Filing.** An Approval whose ``spec.tower`` is set (``enforce``: Tower decides; ``shadow``: its answer is
  recorded beside hangar's) is filed with ``POST /v1/approvals`` in the background. While Tower can't be
  reached the filing is retried with backoff (1 s doubling to 60 s) and the call keeps waiting. Tower's
  receipt goes on the Approval: ``status.receipt`` and the label ``hangar.dev/tower-approval``, by which
  the webhook finds it.
- **Answers.** The webhook applies an enforce decision itself (``spec.decision``, ``decidedBy:
  tower:<who>``). What it could not apply yet (a "decided" before hangar recorded the receipt) it keeps an
  hour in the database; once the receipt is recorded, the operator applies it from there. Every pending
  Tower-filed approval is also re-read from Tower every minute and at start (a suspended session's
  included). In shadow nothing is decided: Tower's answer is written to ``status.tower`` and audited
  ``governance.shadow_decision`` with what hangar did.
- **Withdrawal.** A call that no longer waits (its turn was stopped, its session stopped) is withdrawn
  at Tower (``POST /v1/approvals/{id}/withdraw``), retried the same way.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from hangar.governance.tower import Call, Decision, TowerUnavailable
from hangar.kube import Obj
from hangar.models import Approval, Session, Turn
from hangar.models import labels as L

from .. import metrics
from ..approvals.controller import Approvals
from ..context import Context, resource
from ..status import patch_status

log = logging.getLogger("hangar.operator.governance")

REREAD_SECONDS = 60.0
MAX_BACKOFF = 60.0
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


def _tower_verdict(status: str) -> str | None:
    return {"allowed": "allow", "denied": "deny"}.get(status)


class TowerCalls:
    def __init__(self, ctx: Context, approvals: Approvals) -> None:
        self.ctx = ctx
        self.approvals = approvals
        self.tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.reread_seconds = REREAD_SECONDS
        self.first_backoff = 1.0
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.ctx.tower is not None and self._loop is None:
            self._loop = asyncio.create_task(self._reread_forever())

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            self._loop = None
        for t in self.tasks.values():
            t.cancel()
        self.tasks.clear()

    # --- background work, retried ---------------------------------------------------------------------
    def _spawn(self, key: tuple[str, str], work: Callable[[], Awaitable[bool]]) -> None:
        task = self.tasks.get(key)
        if task is not None and not task.done():
            return
        self.tasks[key] = asyncio.create_task(self._retrying(key, work))

    async def _retrying(self, key: tuple[str, str], work: Callable[[], Awaitable[bool]]) -> None:
        backoff = self.first_backoff
        try:
            while True:
                try:
                    if await work():
                        return
                except TowerUnavailable as e:
                    log.warning("Tower: %s; again in %.0fs", e, backoff, extra=resource(key[0], key[1]))
                    metrics.TOWER_CALLS.labels(outcome="unavailable").inc()
                except Exception:
                    log.exception("governance work for %s failed", key[1], extra=resource(key[0], key[1]))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
        finally:
            if self.tasks.get(key) is asyncio.current_task():
                del self.tasks[key]

    # --- filing -----------------------------------------------------------------------------------------
    async def hook(self, ns: str, name: str) -> None:
        """After each reconcile of an Approval: file it if it is Tower's and not filed; apply an answer the
        webhook kept for it (the webhook's annotation says one came)."""
        if self.ctx.tower is None:
            return
        obj = await self.ctx.kube_in(ns).get("approvals", name)
        if obj is None:
            return
        ap = Approval.model_validate(obj)
        if ap.spec.tower is None:
            return
        if not ap.status.receipt:
            if self._waits(ap):
                self.file(ns, name)
            return
        if self._waits(ap):
            kept = await self.ctx.db.tower_decision(ap.status.receipt)
            if kept is not None:
                await self.apply(ns, name, Decision.model_validate(kept))

    @staticmethod
    def _waits(ap: Approval) -> bool:
        """Is Tower's answer still wanted: an enforce call still pending, or a shadow one not yet answered."""
        if ap.spec.tower == "enforce":
            return ap.status.phase == "Pending"
        return ap.spec.tower == "shadow" and ap.status.phase is not None and ap.status.tower is None

    def file(self, ns: str, name: str) -> None:
        self._spawn((ns, f"file/{name}"), lambda: self._file(ns, name))

    async def _file(self, ns: str, name: str) -> bool:
        tower = self.ctx.tower
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("approvals", name)
        if tower is None or obj is None:
            return True
        ap = Approval.model_validate(obj)
        if ap.status.receipt or not self._waits(ap):
            return True
        # The Approval's uid makes the filing idempotent: a restart before the receipt is recorded files it
        # again, and Tower answers the receipt it gave.
        receipt = await tower.file(await self._call(ns, obj), obj["metadata"]["uid"])
        metrics.TOWER_CALLS.labels(outcome="filed").inc()
        session = ap.spec.session or ""
        async with self.ctx.lock(ns, session):
            obj = await kube.get("approvals", name)
            if obj is None:
                return True
            if _LABEL_VALUE.match(receipt.id):
                await kube.patch("approvals", name, {"metadata": {"labels": {L.TOWER_APPROVAL: receipt.id}}})
            else:
                log.warning("Tower's receipt %r can't be a label: only re-reads find it", receipt.id)
            obj = await kube.get("approvals", name)
            if obj is None:
                return True
            await patch_status(kube, "approvals", obj, {"receipt": receipt.id})
        await self.ctx.db.audit(
            "hangar", "governance.call_filed", name, tower=receipt.id, session=session, mode=ap.spec.tower
        )
        await self.ctx.activity(
            ns, session, "approval_filed", {"approval": name, "tower": receipt.id, "mode": ap.spec.tower}
        )
        kept = await self.ctx.db.tower_decision(receipt.id)
        if kept is not None:  # decided before hangar had the receipt: the webhook kept it for an hour
            await self.apply(ns, name, Decision.model_validate(kept))
        elif receipt.status in ("allowed", "denied"):
            await self.apply(ns, name, Decision(id=receipt.id, status=receipt.status))
        return True

    async def _call(self, ns: str, obj: Obj) -> Call:
        kube = self.ctx.kube_in(ns)
        ap = Approval.model_validate(obj)
        s_obj = await kube.get("sessions", ap.spec.session or "")
        t_obj = await kube.get("turns", ap.spec.turn)
        job = ((s_obj or {}).get("metadata") or {}).get("labels", {}).get(L.JOB)
        taint = Session.model_validate(s_obj).status.taint if s_obj else None
        run = self.ctx.run_of(ns, ap.labels.get(L.RUN))
        return Call(
            tool=ap.spec.tool,
            command=ap.spec.command or "",
            args_hash=ap.spec.args_hash,
            taint={"tainted": ap.spec.tainted, "reasons": list(taint.reasons) if taint else []},
            namespace=ns,
            session=ap.spec.session or "",
            job=job,
            turn=ap.spec.turn,
            run=run.id if run else "",
            approval=ap.name,
            started_by=Turn.model_validate(t_obj).spec.by if t_obj else "",
            policy=ap.spec.policy,
            why=ap.spec.why,
        )

    # --- answers ----------------------------------------------------------------------------------------
    async def apply(self, ns: str, name: str, d: Decision) -> None:
        """Tower's answer for the call ``name``: decided (enforce) or recorded beside hangar's (shadow)."""
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("approvals", name)
        if obj is None or d.status == "pending":
            return
        ap = Approval.model_validate(obj)
        if ap.spec.tower == "shadow":
            if ap.status.tower is not None:
                return
            answer = {"status": d.status, "by": d.decided_by, "reason": d.reason, "at": _at(d.decided_at)}
            await patch_status(kube, "approvals", obj, {"tower": answer})
            await self.ctx.db.audit(
                "tower",
                "governance.shadow_decision",
                name,
                tower=d.id,
                tower_decision=d.status,
                hangar_decision=ap.status.decision,
                hangar_resolved_by=ap.status.resolved_by,
                agrees=_tower_verdict(d.status) == ap.status.decision,
            )
            return
        verdict = _tower_verdict(d.status)
        if verdict is not None and ap.status.phase == "Pending":
            await self.approvals.tower_decided(ns, name, verdict, d.decided_by or "", d.reason)

    async def reread(self) -> None:
        """Every Tower-filed call still waiting is re-read from Tower (every minute, and at start)."""
        tower = self.ctx.tower
        if tower is None:
            return
        namespaces = (
            sorted({x["metadata"]["namespace"] for x in await self.ctx.kube.list_all("approvals")})
            if self.ctx.settings.watch_all
            else list(self.ctx.settings.watch_namespaces)
        )
        for ns in namespaces:
            for obj in await self.ctx.kube_in(ns).list("approvals"):
                ap = Approval.model_validate(obj)
                if ap.spec.tower is None or not self._waits(ap):
                    continue
                if not ap.status.receipt:
                    self.file(ns, ap.name)
                    continue
                d = await tower.decision(ap.status.receipt)
                await self.ctx.db.keep_tower_decision(ap.status.receipt, d.model_dump(mode="json"))
                await self.apply(ns, ap.name, d)

    async def _reread_forever(self) -> None:
        while True:
            try:
                await self.reread()
            except TowerUnavailable as e:
                log.warning("re-reading Tower's decisions: %s", e)
            except Exception:
                log.exception("re-reading Tower's decisions failed")
            await asyncio.sleep(self.reread_seconds)

    # --- withdrawal -------------------------------------------------------------------------------------
    async def withdrawn(self, ns: str, obj: Obj, why: str) -> None:
        """hangar's approval was withdrawn (its turn or session was stopped): so is Tower's."""
        ap = Approval.model_validate(obj)
        receipt = ap.status.receipt
        if self.ctx.tower is None or ap.spec.tower != "enforce" or not receipt:
            return

        async def work() -> bool:
            assert self.ctx.tower is not None
            await self.ctx.tower.withdraw(receipt, why)
            await self.ctx.db.audit(
                "hangar", "governance.withdrawn", ap.name, tower=receipt, session=ap.spec.session, reason=why
            )
            return True

        self._spawn((ns, f"withdraw/{ap.name}"), work)


def _at(value: str | None) -> str:
    if value:
        return value
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
