"""Suspend and resume: a session whose governed call waits on Tower gives its sandbox back, and comes back
when Tower allows the call (spec 002).

Once a session's call, filed with Tower under ``enforce``, has waited ``HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS``:

1. the call is denied to the CLI with "Paused for approval A-9; this turn resumes when it's signed."
   (the Approval itself stays Pending: it waits for Tower);
2. the turn is interrupted at that call, a moment later (``Running → Suspending``, ``status.suspended`` says on what);
3. once the turn has ended, the driver's ``checkpoint`` op archives the workspace and the agent's HOME (the
   CLI's conversation) onto the workspace volume, recorded on ``status.checkpoints``;
4. the sandbox is released: pod and run key gone, no slot held (``Suspending → Suspended``).

On Tower's allow (the webhook's decision, or one read back from Tower), a new turn in the same conversation
tells the agent its call was approved (``Suspended → Pending``, ``status.resuming``); the new run's Secret
carries that call, signed with the new run's key, and its driver allows it once without asking. A deny
leaves the session suspended with Tower's reason; a person's new message then starts a new run. A stop
withdraws the call (at Tower too) and the session is ``Stopped``; a later allow resumes nothing.

A job's turn is never suspended (it waits in place), nor is a turn while Tower's approvals are not
enforced. The reason (``approval``) is a field so that idle suspension can reuse steps 3 and 4.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from hangar.bodies import Body
from hangar.kube import Obj
from hangar.models import Approval, Session, Turn
from hangar.models import labels as L
from hangar.models.session import Checkpoint, Resuming, Suspension
from hangar.turns import create_turn, turn_index

from .. import metrics
from ..approvals.controller import Approvals
from ..context import Context, resource
from ..lifecycle import SESSION, move
from ..sandbox_objects import workspace_name
from ..sandboxes import Sandboxes
from ..status import patch_status
from ..turns.ending import Ending
from ..turns.outcomes import TurnOutcomes

log = logging.getLogger("hangar.operator.suspension")

PAUSED = "Paused for approval {tower}; this turn resumes when it's signed."
# How long a suspension waits for the turn to stop, then for the driver's checkpoint, before going on.
TURN_STOP_SECONDS = 30.0
# The deny reaches the CLI this long before the interrupt (see Suspensions._interrupt).
PAUSE_GRACE = 2.0
CHECKPOINT_SECONDS = 120.0
KEEP_CHECKPOINTS = 20
REQUESTED = "requested:"


def resume_message(sus: Suspension) -> str:
    who = sus.decided_by or "Tower"
    return (
        f"Your tool call was approved by {who} (approval {sus.tower}): {sus.command or sus.tool}. "
        "Make that call again now, exactly as before: it is allowed once without asking. "
        "Then carry on with the task."
    )


class Suspensions:
    def __init__(
        self, ctx: Context, sandboxes: Sandboxes, outcomes: TurnOutcomes, approvals: Approvals
    ) -> None:
        self.ctx = ctx
        self.sandboxes = sandboxes
        self.outcomes = outcomes
        self.approvals = approvals
        self.timers: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Set by controllers.py: the session's own reconcile (a resumed session starts its sandbox there).
        self.reconcile_session: Callable[[str, str], Coroutine[Any, Any, None]] | None = None
        self._later: set[asyncio.Task[None]] = set()
        self.pause_grace = PAUSE_GRACE

    def stop(self) -> None:
        for t in self.timers.values():
            t.cancel()
        self.timers.clear()

    # --- when to suspend --------------------------------------------------------------------------------
    def enforced(self) -> bool:
        return self.ctx.settings.governance_mode("approval") == "enforce"

    async def hook(self, ns: str, name: str) -> None:
        """After each reconcile of an Approval: a session's call waiting on Tower is timed for suspension."""
        if not self.enforced():
            return
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("approvals", name)
        if obj is None:
            return
        ap = Approval.model_validate(obj)
        if ap.spec.tower != "enforce" or ap.status.phase != "Pending" or ap.status.requested_at is None:
            return
        s_obj = await kube.get("sessions", ap.spec.session or "")
        if s_obj is None or s_obj["metadata"].get("labels", {}).get(L.JOB):
            return  # a job's turn waits in place
        st = Session.model_validate(s_obj).status
        if st.phase != "Running" or st.sandbox.run != ap.labels.get(L.RUN):
            return
        at = ap.status.requested_at + timedelta(seconds=self.ctx.settings.governance_suspend_after)
        task = self.timers.get((ns, name))
        if task is None or task.done():
            self.timers[(ns, name)] = asyncio.create_task(self._timer(ns, ap.spec.session or "", name, at))

    async def _timer(self, ns: str, session: str, name: str, at: datetime) -> None:
        try:
            await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))
            while True:
                try:
                    async with self.ctx.lock(ns, session):
                        if await self._suspend(ns, session, name):
                            break
                except Exception:
                    log.exception("suspending %s failed", session, extra=resource(ns, session))
                await asyncio.sleep(2.0)  # no receipt from Tower yet, or a failure: the call keeps waiting
        finally:
            if self.timers.get((ns, name)) is asyncio.current_task():
                del self.timers[(ns, name)]
        await self.reconcile(ns, session)

    async def reconcile(self, ns: str, session: str) -> None:
        async with self.ctx.lock(ns, session):
            await self.advance(ns, session)

    async def _suspend(self, ns: str, session: str, name: str) -> bool:
        """Pause the call and interrupt its turn. True when done (or no longer called for); False: not yet."""
        kube = self.ctx.kube_in(ns)
        obj, s_obj = await kube.get("approvals", name), await kube.get("sessions", session)
        if obj is None or s_obj is None:
            return True
        ap, s = Approval.model_validate(obj), Session.model_validate(s_obj)
        st = s.status
        if ap.status.phase != "Pending" or s.spec.stopped or st.suspended is not None:
            return True
        if st.phase != "Running" or st.current_turn != ap.spec.turn or st.sandbox.run != ap.labels.get(L.RUN):
            return True
        if not ap.status.receipt:
            return False  # the agent is told which approval it waits on: Tower's id is needed first
        run = self.ctx.run_of(ns, st.sandbox.run)
        assert run is not None
        now = datetime.now(UTC)
        sus = Suspension(
            reason="approval",
            approval=name,
            tower=ap.status.receipt,
            turn=ap.spec.turn,
            tool=ap.spec.tool,
            command=ap.spec.command,
            args_hash=ap.spec.args_hash,
            since=now,
        )
        await patch_status(
            kube,
            "sessions",
            s_obj,
            {
                "phase": move(SESSION, st.phase, "suspend"),
                "reason": "Suspending",
                "message": f"suspending: waiting for Tower's approval {sus.tower}",
                "suspended": sus.dump(),
            },
        )
        # The approval's ask deadline no longer applies: it waits for Tower past its turn.
        obj = await kube.get("approvals", name) or obj
        await patch_status(kube, "approvals", obj, {"deadline": None})
        paused = PAUSED.format(tower=sus.tower)
        await self.approvals.answer(ns, run.id, name, ap.spec.request_id, "deny", paused)
        self._later_run(self._interrupt(ns, session, ap.spec.turn, run.id))
        metrics.SUSPENSIONS.labels(reason="approval").inc()
        await self.ctx.activity(
            ns,
            session,
            "suspending",
            {"approval": name, "tower": sus.tower, "tool": sus.tool, "command": sus.command},
            ap.spec.turn,
        )
        await self.ctx.db.audit("hangar", "governance.suspend", session, approval=name, tower=sus.tower)
        return True

    async def _interrupt(self, ns: str, session: str, turn: str, run_id: str) -> None:
        """Interrupt the paused turn a moment after the deny: an interrupt that overtakes the CLI's tool result
        makes Claude Code record "rejected" instead of hangar's words, and the resumed agent must read them."""
        await asyncio.sleep(self.pause_grace)
        async with self.ctx.lock(ns, session):
            s_obj = await self.ctx.kube_in(ns).get("sessions", session)
            if s_obj is None:
                return
            st = Session.model_validate(s_obj).status
            run = self.ctx.run_of(ns, st.sandbox.run)
            if st.phase == "Suspending" and st.current_turn == turn and run is not None and run.id == run_id:
                await self.ctx.gateway.send(run_id, "interrupt", {"turn": turn}, command_id=f"suspend-{turn}")

    def _later_run(self, work: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    # --- the steps after ------------------------------------------------------------------------------
    async def advance(self, ns: str, session: str) -> bool:
        """Move a suspending or suspended session one step; True when the session's own reconcile should go
        on (it was resumed, or a person's message starts a new run after a deny). Caller holds the lock."""
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        if s_obj is None:
            return False
        s = Session.model_validate(s_obj)
        st, sus = s.status, s.status.suspended
        if sus is None or s.spec.stopped:
            return st.phase not in ("Suspending", "Suspended")
        if st.phase == "Suspending":
            await self._suspending(ns, s_obj)
            return False
        if st.phase != "Suspended":
            return True
        if sus.reason == "idle":
            if not await self._queued(ns, session):
                return False
            # The next message after an idle suspension: the session comes back on its volume, as it was.
            await patch_status(
                kube,
                "sessions",
                s_obj,
                {"phase": move(SESSION, st.phase, "resume"), "suspended": None, "reason": "", "message": ""},
            )
            if sus.since is not None:
                waited = (datetime.now(UTC) - sus.since).total_seconds()
                metrics.SUSPENDED_SECONDS.labels(reason="idle").observe(max(0.0, waited))
            await self.ctx.activity(ns, session, "resumed", {"after": "idle"})
            return True
        if sus.decision == "allowed":
            await self._resume(ns, s_obj)
            return True
        if sus.decision == "denied" and await self._queued(ns, session):
            # A person's new message after Tower's deny: a new run, nothing pre-cleared.
            await patch_status(
                kube,
                "sessions",
                s_obj,
                {"phase": move(SESSION, st.phase, "resume"), "suspended": None, "reason": "", "message": ""},
            )
            await self.ctx.activity(ns, session, "resumed", {"approval": sus.approval, "after": "denied"})
            return True
        return False

    async def _queued(self, ns: str, session: str) -> bool:
        turns = await self.ctx.kube_in(ns).list("turns", label_selector=L.session_selector(session))
        return any(Turn.model_validate(t).status.phase == "Queued" for t in turns)

    async def _suspending(self, ns: str, s_obj: Obj) -> None:
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        st, sus = s.status, s.status.suspended
        assert sus is not None and sus.since is not None
        waited = (datetime.now(UTC) - sus.since).total_seconds()
        if st.current_turn:
            t_obj = await kube.get("turns", st.current_turn)
            if t_obj is not None and Turn.model_validate(t_obj).status.phase == "Running":
                if waited < TURN_STOP_SECONDS:
                    return  # the driver's interrupt ends it (turn_ended)
                why = "the turn did not stop for the suspension in time; hangar killed the run"
                ending = Ending(event="interrupt_killed", outcome="interrupted", exit_status=130, reason=why)
                ending.lost, ending.interrupts = why, "killed"
                await self.outcomes.finish(ns, s.name, t_obj, ending)
            s_obj = await kube.get("sessions", s.name) or s_obj
            await patch_status(kube, "sessions", s_obj, {"currentTurn": None})
            s_obj = await kube.get("sessions", s.name) or s_obj
        run = self.ctx.run_of(ns, st.sandbox.run)
        if sus.checkpoint is None and run is not None and st.sandbox.connected:
            cid = f"ck-{int(time.time())}-{secrets.token_hex(3)}"
            await patch_status(kube, "sessions", s_obj, {"suspended": {"checkpoint": REQUESTED + cid}})
            await self.ctx.gateway.send(
                run.id,
                "checkpoint",
                {"path": f"{cid}.tar.gz", "include_home": True},  # in HANGAR_CHECKPOINT_DIR
                command_id=f"checkpoint-{cid}",
            )
            return
        if (sus.checkpoint or "").startswith(REQUESTED) and waited < TURN_STOP_SECONDS + CHECKPOINT_SECONDS:
            if run is not None and st.sandbox.connected:
                return  # waiting for the driver's checkpoint
        if (sus.checkpoint or "").startswith(REQUESTED) or sus.checkpoint is None:
            # No checkpoint came (no driver to take it, or none in time): the workspace volume still holds
            # the checkout and the conversation; only the archive is missing.
            await self.ctx.activity(ns, s.name, "checkpoint_failed", {"reason": "no checkpoint in time"})
            s_obj = await kube.get("sessions", s.name) or s_obj
            await patch_status(kube, "sessions", s_obj, {"suspended": {"checkpoint": "failed"}})
        await self._release(ns, s.name)

    async def checkpointed(self, ns: str, session: str, p: dict[str, Any]) -> None:
        """The driver's answer to the checkpoint op: recorded, then the sandbox is released."""
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        if s_obj is None:
            return
        s = Session.model_validate(s_obj)
        sus = s.status.suspended
        cid = str(p.get("command_id") or "")[len("checkpoint-") :]
        if s.status.phase != "Suspending" or sus is None or sus.checkpoint != REQUESTED + cid:
            return
        if p.get("ok"):
            ck = Checkpoint(
                id=cid,
                turn=sus.turn,
                at=datetime.now(UTC),
                conversation=s.status.conversation,
                location=f"pvc://{ns}/{workspace_name(s_obj)}/checkpoints/{cid}.tar.gz",
                reason=sus.reason,
                size=int(p.get("size") or 0),
                sha256=str(p.get("sha256") or ""),
            )
            # The volume itself too, where the cluster can snapshot it: a lost volume comes back from it.
            ck.snapshot = await self.sandboxes.snapshots.take(ns, s_obj, cid)
            kept = [c.dump() for c in s.status.checkpoints][-(KEEP_CHECKPOINTS - 1) :]
            s_obj = await patch_status(
                kube, "sessions", s_obj, {"checkpoints": [*kept, ck.dump()], "suspended": {"checkpoint": cid}}
            )
            await self.ctx.activity(ns, session, "checkpoint", ck.dump(), sus.turn)
            if ck.snapshot.name:
                pruned = await self.sandboxes.snapshots.prune(ns, session)
                await self.sandboxes.snapshots.refresh(ns, s_obj, pruned)
        else:
            await patch_status(kube, "sessions", s_obj, {"suspended": {"checkpoint": "failed"}})
            await self.ctx.activity(ns, session, "checkpoint_failed", {"reason": str(p.get("error") or "")})
        await self._release(ns, session)

    async def _release(self, ns: str, session: str) -> None:
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        if s_obj is None:
            return
        sus = Session.model_validate(s_obj).status.suspended
        assert sus is not None
        why = (
            "suspended: idle; the next message resumes it"
            if sus.reason == "idle"
            else f"suspended: waiting for Tower's approval {sus.tower} ({sus.command or sus.tool})"
        )
        await self.sandboxes.release(ns, session, why, event="suspended")
        s_obj = await kube.get("sessions", session)
        if s_obj is not None:
            await patch_status(kube, "sessions", s_obj, {"reason": "Suspended"})
            await self.ctx.events.emit(kube, s_obj, "Normal", "Suspended", why)
        await self.ctx.activity(ns, session, "suspended", {"approval": sus.approval, "tower": sus.tower})
        # A decision that came while it was suspending is acted on now.
        await self.advance(ns, session)

    # --- decisions ------------------------------------------------------------------------------------
    async def decided(self, ns: str, session: str, name: str) -> None:
        """The call a suspended (or suspending) session waits on was decided. Caller holds the lock."""
        kube = self.ctx.kube_in(ns)
        obj, s_obj = await kube.get("approvals", name), await kube.get("sessions", session)
        if obj is None or s_obj is None:
            return
        ap, st = Approval.model_validate(obj), Session.model_validate(s_obj).status
        if st.suspended is None or st.suspended.approval != name:
            return
        allowed = ap.status.phase == "Allowed"
        by = (ap.status.by or "").removeprefix("tower:") or None
        decision = {"decision": "allowed" if allowed else "denied", "decidedBy": by}
        message = ap.status.message or ap.spec.message
        if message and not allowed:
            decision["message"] = message
        patch: dict[str, Any] = {"suspended": decision}
        if not allowed:
            patch["message"] = (
                f"suspended: {by or 'Tower'} denied approval {st.suspended.tower}"
                + (f": {message}" if message else "")
                + ". A new message starts a new run."
            )
        await patch_status(kube, "sessions", s_obj, patch)
        if st.suspended.since is not None:
            waited = (datetime.now(UTC) - st.suspended.since).total_seconds()
            metrics.SUSPENDED_SECONDS.labels(reason=st.suspended.reason).observe(max(0.0, waited))
        await self.ctx.activity(
            ns, session, "suspension_decided", {"approval": name, "tower": st.suspended.tower, **decision}
        )
        if st.phase == "Suspended":
            await self.advance(ns, session)
        if self.reconcile_session is not None:
            # After the caller's lock is released: a resumed session takes a slot and starts its sandbox.
            self._later_run(self.reconcile_session(ns, session))

    async def _resume(self, ns: str, s_obj: Obj) -> None:
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        sus = s.status.suspended
        assert sus is not None and sus.approval and sus.tool and sus.args_hash
        message = resume_message(sus)
        turn = await self._resume_turn(ns, s.name, message, f"tower:{sus.decided_by or ''}")
        resuming = Resuming(
            approval=sus.approval,
            tower=sus.tower,
            turn=turn,
            tool=sus.tool,
            args_hash=sus.args_hash,
            decided_by=sus.decided_by,
            decided_at=datetime.now(UTC),
            suspended_at=sus.since,
        )
        s_obj = await kube.get("sessions", s.name) or s_obj
        await patch_status(
            kube,
            "sessions",
            s_obj,
            {
                "phase": move(SESSION, s.status.phase, "resume"),
                "suspended": None,
                "resuming": resuming.dump(),
                "reason": "",
                "message": f"resuming: Tower allowed approval {sus.tower}",
            },
        )
        await self.ctx.activity(
            ns, s.name, "resumed", {"approval": sus.approval, "tower": sus.tower, "turn": turn}, turn
        )
        await self.ctx.db.audit("tower", "governance.resume", s.name, approval=sus.approval, tower=sus.tower)

    async def _resume_turn(self, ns: str, session: str, message: str, by: str) -> str:
        """The resuming turn, made once: a retry after a crash finds the one it made."""
        kube = self.ctx.kube_in(ns)
        for t in sorted(await kube.list("turns", label_selector=L.session_selector(session)), key=turn_index):
            turn = Turn.model_validate(t)
            if turn.status.phase == "Queued" and turn.spec.message == message:
                return turn.name
        return await create_turn(kube, session, Body(message), by=by)  # hangar's own words: short

    async def turn_started(self, ns: str, s_obj: Obj, turn: str) -> None:
        """A resuming session's turn runs: the resume latency is the allow to this moment."""
        r = Session.model_validate(s_obj).status.resuming
        if r is not None and r.turn == turn and r.decided_at is not None:
            metrics.RESUME_SECONDS.observe(max(0.0, (datetime.now(UTC) - r.decided_at).total_seconds()))

    async def stopped(self, ns: str, s_obj: Obj) -> None:
        """A stop while suspended (or suspending): the call no longer waits, here or at Tower."""
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        sus = s.status.suspended
        if sus is None:
            return
        await patch_status(kube, "sessions", s_obj, {"suspended": None})
        if sus.approval and sus.decision is None:
            why = "the session was stopped" + (f" by {s.spec.stopped_by}" if s.spec.stopped_by else "")
            await self.approvals.withdraw_one(ns, sus.approval, why, held=True)
        await self.ctx.activity(ns, s.name, "suspension_ended", {"approval": sus.approval, "by": "stop"})
