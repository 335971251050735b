"""The Session controller: one idempotent reconcile that moves a session one step along its lifecycle.

Phases and the events that move them are in ``lifecycle.SESSION``. In short: a new session (or one with a
queued turn and no sandbox) starts a sandbox (``Pending → Starting``, or waits in ``Pending`` with the reason),
the driver's hello makes it ``Idle``, a queued turn makes it ``Running`` and the turn's end ``Idle`` again;
``spec.stopped`` stops it. Every entry (kopf, a timer, a driver event, a pod event) ends here, under the
session's lock, so a repeated event or an operator restart never does anything twice.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from hangar.bodies import Body, BodyMissing, resolve
from hangar.kube import Obj
from hangar.models import LIVE_HARNESSES, Session, Turn
from hangar.models import labels as L
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec
from hangar.models.session import ForkOrigin
from hangar.turns import create_turn, turn_index

from . import metrics
from .approvals.taint import Tainting
from .context import Context, resource
from .governance.idle import IdleSuspension
from .governance.suspension import Suspensions
from .lifecycle import SESSION, TURN, after, move
from .prepare_turn import prepare_first_turn
from .sandbox_objects import workspace_name, workspace_pvc
from .sandboxes import Sandboxes
from .status import patch_status
from .sweeper import Wakeups
from .turns.ending import Ending, failed
from .turns.outcomes import TurnOutcomes
from .turns.steering import Steering

log = logging.getLogger("hangar.operator.sessions")

SUSPENDING_POLL = 5.0  # seconds between looks at a suspension's steps (a transient phase: few sessions)


class Sessions:
    def __init__(
        self,
        ctx: Context,
        sandboxes: Sandboxes,
        outcomes: TurnOutcomes,
        steering: Steering,
        tainting: Tainting,
        suspensions: Suspensions,
    ) -> None:
        self.ctx = ctx
        self.sandboxes = sandboxes
        self.outcomes = outcomes
        self.steering = steering
        self.tainting = tainting
        self.suspensions = suspensions
        self.idle = IdleSuspension(ctx)
        self.idle.on_not_due = self._idle_due
        self.wakeups: Wakeups | None = None
        self.failed: set[tuple[str, str]] = set()  # whose last reconcile raised: the sweeper tries again

    async def reconcile(self, ns: str, name: str) -> None:
        async with self.ctx.lock(ns, name):
            try:
                await self._reconcile(ns, name)
            except Exception:
                self.failed.add((ns, name))
                raise
            self.failed.discard((ns, name))

    # --- deadlines: the session is looked at again exactly when one is due (sweeper.py) ----------------
    def _wake_at(self, ns: str, name: str, what: str, when: float, check: bool = False) -> None:
        if self.wakeups is None:
            return
        sandboxes = self.sandboxes

        async def work() -> None:
            if check:
                await sandboxes.check(ns, name)
            await self.reconcile(ns, name)

        self.wakeups.at(f"sessions/{ns}/{name}/{what}", when, work)

    def _idle_due(self, ns: str, name: str, at: float) -> None:
        self._wake_at(ns, name, "idle", at + 0.5)

    def _deadlines(self, ns: str, s: Session) -> None:
        st = s.status
        if st.phase == "Starting" and st.sandbox.started_at is not None:
            due = st.sandbox.started_at.timestamp() + self.ctx.settings.connect_timeout + 0.5
            self._wake_at(ns, s.name, "connect", due, check=True)
        elif self.wakeups is not None:  # connected (or gone): its connect deadline would only cost reads
            self.wakeups.cancel(f"sessions/{ns}/{s.name}/connect")
        if st.phase == "Suspending":  # its steps wait on the driver, with time limits (suspension.py)
            self._wake_at(ns, s.name, "suspending", time.time() + SUSPENDING_POLL)

    async def _reconcile(self, ns: str, name: str) -> None:
        kube = self.ctx.kube_in(ns)
        s_obj = await self.sandboxes.read_session(ns, name)
        if s_obj is None or s_obj["metadata"].get("deletionTimestamp"):
            self.ctx.drop_lock(ns, name)
            return
        s = Session.model_validate(s_obj)
        st = s.status
        self._deadlines(ns, s)
        if st.phase == "Failed":
            return
        # The checkpoints' snapshot records follow their VolumeSnapshots (a no-op once each is ready).
        s_obj = await self.sandboxes.snapshots.refresh(ns, s_obj)
        if s.spec.stopped:
            if st.phase != "Stopped":
                await self._stop(ns, s_obj)
            return
        if st.suspended is not None or st.phase in ("Suspending", "Suspended"):
            # Governance's steps (suspension.py); it hands back once the session was resumed.
            if not await self.suspensions.advance(ns, name):
                return
            fresh = await kube.get("sessions", name)
            if fresh is None:
                return
            s_obj, s = fresh, Session.model_validate(fresh)
            st = s.status
        if st.resuming is not None:
            t_obj = await kube.get("turns", st.resuming.turn)
            if t_obj is None or Turn.model_validate(t_obj).status.ended:
                s_obj = await patch_status(kube, "sessions", s_obj, {"resuming": None})
                st.resuming = None
        if s.spec.fork_of and st.forked_from is None:
            forked = await self._record_fork(ns, s_obj)
            if forked is None:
                return
            s_obj, s = forked, Session.model_validate(forked)
            st = s.status
        # An Environment is a template the session reads its spec from: the watch's copy does (a miss is read).
        env_obj = await self.ctx.cached(ns, "environments", s.spec.environment)
        if env_obj is None:
            msg = f"environment {s.spec.environment!r} does not exist"
            if st.message != msg:
                await self.ctx.events.emit(kube, s_obj, "Warning", "EnvironmentNotFound", msg)
            await patch_status(
                kube,
                "sessions",
                s_obj,
                {"phase": self._wait_phase(st.phase), "reason": "EnvironmentNotFound", "message": msg},
            )
            return
        env = EnvironmentSpec.model_validate(env_obj["spec"])
        inherited = st.forked_from.policy if st.forked_from else None  # a fork keeps its parent's policy
        policy = s.spec.approvals or inherited or env.approvals or self.ctx.settings.approvals or "auto"
        if await self.tainting.sync_spec_taint(ns, s_obj):
            st.taint.tainted = True
        # The policy rides on the status write that starts (or claims) a first sandbox: one write, and one
        # watch event and reconcile fewer, on the way to it.
        policy_patch = (
            {"policy": policy} if st.policy != policy or st.observed_generation != s.generation else {}
        )
        if st.sandbox.pod is None and await self.sandboxes.start_warm(ns, s_obj, env, policy_patch):
            # A warm sandbox first, before this reconcile's other writes: its driver's hello brings the next
            # reconcile, which starts the first turn as for any sandbox.
            return
        first = st.sandbox.pod is None and st.counters.sandboxes == 0  # starts whatever turns there are
        if policy_patch and not first:
            s_obj = await patch_status(kube, "sessions", s_obj, policy_patch)
            st.policy, policy_patch = policy, {}
        if first and not s.spec.prompt:
            # Nothing to read before a first sandbox: its driver's hello brings the reconcile that counts the
            # turns and starts the first queued one.
            await self._start_sandbox(ns, s_obj, env, policy_patch)
            return
        selector = L.session_selector(name)
        if s.spec.prompt and st.counters.turns == 0 and not st.current_turn:
            if not await kube.list("turns", label_selector=selector):
                await create_turn(
                    kube,
                    name,
                    Body.of(s_obj["spec"], "prompt") or Body(s.spec.prompt),
                    by="session.spec.prompt",
                )
        turns = sorted(await kube.list("turns", label_selector=selector), key=turn_index)
        queued = [t for t in turns if Turn.model_validate(t).status.phase == "Queued"]
        s_obj = await self._sync_counters(ns, s_obj, turns)
        if st.sandbox.pod is None:
            if st.counters.sandboxes == 0 or queued:
                await self._start_sandbox(ns, s_obj, env, policy_patch)
            return
        # The first turn's CLI, ahead (a moment after the connect: prepare_turn.py says why).
        await prepare_first_turn(
            self.ctx,
            ns,
            s_obj,
            turns,
            policy,
            env,
            lambda left: self._wake_at(ns, name, "prepare", time.time() + left),
        )
        if st.sandbox.connected and st.current_turn is None and queued:
            await self._start_turn(ns, s_obj, queued[0], policy, env)
        elif await self.idle.maybe_suspend(ns, s_obj, env, bool(queued)):
            await self.suspensions.advance(ns, name)  # checkpoint, then release (suspension.py)
            self._wake_at(ns, name, "suspending", time.time() + SUSPENDING_POLL)

    async def _start_sandbox(self, ns: str, s_obj: Obj, env: EnvironmentSpec, extra: dict[str, Any]) -> None:
        await self.sandboxes.start(ns, s_obj, env, extra)
        # Its connect deadline (if it waits for a slot instead, the look finds nothing to do).
        due = time.time() + self.ctx.settings.connect_timeout + 0.5
        self._wake_at(ns, str(s_obj["metadata"]["name"]), "connect", due, check=True)

    @staticmethod
    def _wait_phase(phase: str) -> str:
        return after(SESSION, phase, "wait")

    async def _record_fork(self, ns: str, s_obj: Obj) -> Obj | None:
        """A fork takes, once, what its parent has now: conversation, policy in force and taint (so the
        parent may go on or go away afterwards). None while the parent doesn't exist (the timer retries)."""
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        name, parent_name = s.name, s.spec.fork_of or ""
        parent_obj = await kube.get("sessions", parent_name) if parent_name != name else None
        if parent_obj is None or parent_obj["metadata"].get("deletionTimestamp"):
            msg = f"parent session {parent_name!r} does not exist: a fork starts from an existing session"
            if parent_name == name:
                msg = "a session can't be a fork of itself (spec.forkOf names the session)"
            if s.status.message != msg:
                await self.ctx.events.emit(kube, s_obj, "Warning", "ParentNotFound", msg)
                await patch_status(
                    kube,
                    "sessions",
                    s_obj,
                    {"phase": self._wait_phase(s.status.phase), "reason": "ParentNotFound", "message": msg},
                )
            return None
        parent = Session.model_validate(parent_obj)
        pst = parent.status
        policy = pst.policy or parent.spec.approvals or (pst.forked_from.policy if pst.forked_from else None)
        tainted = pst.taint.tainted or parent.spec.tainted
        # A conversation id means nothing to another CLI: a fork to another harness starts a new one.
        conversation = pst.conversation if parent.spec.harness == s.spec.harness else None
        # The taint and the workspace clone go before forkedFrom: a restart in between records the fork
        # again (the clone's create is then a 409), never loses either.
        if tainted:
            why = "; ".join(pst.taint.reasons) or "the session started tainted (spec.tainted)"
            await self.tainting.sync_spec_taint(
                ns, s_obj, f"forked from {parent_name} (tainted: {why})"[:1000]
            )
        # The clone is asked for now, not at the fork's first sandbox, so the parent's later turns stay out of
        # it (with a WaitForFirstConsumer storage class the volume is still only cut when a pod needs it).
        source = await kube.get_core("persistentvolumeclaims", workspace_name(parent_obj))
        if source is None:
            why = (
                f"session {parent_name!r} has no workspace volume to clone: the fork starts with an empty one"
            )
            await self.ctx.activity(ns, name, "fork_workspace_empty", {"reason": why})
        await kube.create_core("persistentvolumeclaims", workspace_pvc(s_obj, self.ctx.settings, source))
        origin = ForkOrigin(
            session=parent_name,
            conversation=conversation,
            policy=policy,
            tainted=tainted,
            at=datetime.now(UTC),
        )
        fresh = await kube.get("sessions", name)
        if fresh is None:
            return None
        await patch_status(
            kube, "sessions", fresh, {"forkedFrom": origin.dump(), "conversation": conversation}
        )
        await self.ctx.activity(
            ns,
            name,
            "forked",
            {"parent": parent_name, "conversation": conversation, "policy": policy, "tainted": tainted},
        )
        return await kube.get("sessions", name)

    async def _sync_counters(self, ns: str, s_obj: Obj, turns: list[Obj]) -> Obj:
        st = Session.model_validate(s_obj).status
        typed = [Turn.model_validate(t) for t in turns]
        n = (len(typed), sum(len(t.spec.steers) for t in typed), sum(len(t.spec.interrupts) for t in typed))
        c = st.counters.model_copy()
        if (c.turns, c.steers, c.interrupts) == n:
            return s_obj
        c.turns, c.steers, c.interrupts = n
        return await patch_status(
            self.ctx.kube_in(ns), "sessions", s_obj, {"counters": c.changed(st.counters)}
        )

    async def _start_turn(
        self, ns: str, s_obj: Obj, turn_obj: Obj, policy: str, env: EnvironmentSpec
    ) -> None:
        kube = self.ctx.kube_in(ns)
        s, turn = Session.model_validate(s_obj), Turn.model_validate(turn_obj)
        st, name, tname = s.status, s.name, turn.name
        run = self.ctx.run_of(ns, st.sandbox.run)
        assert run is not None
        if policy != "auto" and s.spec.harness not in LIVE_HARNESSES:
            reason = (
                f"approvals {policy!r} needs a live turn, and {s.spec.harness} runs one-shot: "
                "refusing to run with permission checks off"
            )
            ending = failed("refused", reason)
            turn_obj = await patch_status(kube, "turns", turn_obj, {"policy": policy})
            await self.outcomes.finish(ns, name, turn_obj, ending)
            return
        try:
            message = await resolve(self.ctx.db, Body(turn.spec.message, turn.spec.message_ref))
        except BodyMissing as e:
            await self.outcomes.finish(ns, name, turn_obj, failed("refused", str(e)))
            return
        await patch_status(
            kube,
            "turns",
            turn_obj,
            {
                "phase": move(TURN, turn.status.phase, "started"),
                "policy": policy,
                "run": run.pod,
                "startedAt": iso(),
                "taint": st.taint.dump(),
            },
        )
        await patch_status(
            kube, "sessions", s_obj, {"phase": move(SESSION, st.phase, "turn_started"), "currentTurn": tname}
        )
        await self.ctx.gateway.send(
            run.id,
            "start_turn",
            {
                "turn": tname,
                "message": message,
                "model": s.spec.model,
                "conversation": st.conversation,
                # A fork's first turn: the CLI copies the parent's conversation rather than continue it.
                "fork": bool(
                    st.conversation and st.forked_from and st.conversation == st.forked_from.conversation
                ),
                "approvals": policy,
                "tainted": st.taint.tainted or s.spec.tainted,
                "extra": env.harness_options,
            },
            command_id=f"start-{tname}",
        )
        await self.suspensions.turn_started(ns, s_obj, tname)
        await self.ctx.activity(ns, name, "turn_requested", {"message": turn.spec.message[:2000]}, tname)
        await self.steering.reconcile(ns, name, tname)  # steers or interrupts written while it was queued

    async def _stop(self, ns: str, s_obj: Obj) -> None:
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        st = s.status
        # Who stopped it and why (Tower's run.stop says both) stay on the session's status message.
        stopped = "stopped" + (f" by {s.spec.stopped_by}" if s.spec.stopped_by else "")
        stopped += f": {s.spec.stop_reason}" if s.spec.stop_reason else ""
        await self.suspensions.stopped(ns, s_obj)  # a suspended call is withdrawn, at Tower too
        if st.current_turn:
            turn_obj = await kube.get("turns", st.current_turn)
            if turn_obj is not None and Turn.model_validate(turn_obj).status.phase == "Running":
                why = f"the session was {stopped}"
                ending = Ending(event="stopped", outcome="interrupted", exit_status=130, reason=why, lost=why)
                ending.interrupts, ending.interrupt_reason = "killed", why
                await self.outcomes.finish(ns, st_name(s_obj), turn_obj, ending)
        await self.sandboxes.release(ns, st_name(s_obj), stopped, event="stop")
        await self.ctx.events.emit(
            kube, s_obj, "Normal", "Stopped", f"the session was {stopped} (spec.stopped)"
        )

    async def kill_unconfirmed(self, ns: str, owner: str, turn_name: str) -> None:
        """An interrupt the driver didn't confirm (a signed turn_ended or interrupted) in time: kill the run."""
        kube = self.ctx.kube_in(ns)
        async with self.ctx.lock(ns, owner):
            if not self.steering.deadlines.current(ns, turn_name):
                return
            self.steering.deadlines.tasks.pop((ns, turn_name), None)
            obj = await kube.get("turns", turn_name)
            if obj is None:
                return
            turn = Turn.model_validate(obj)
            # Every interrupt asked for and not confirmed counts, its "sent" record written or not: an
            # interrupt stops the turn whatever the apiserver let us write about it.
            confirmed = {i.id for i in turn.status.interrupts if i.status != "sent"}
            if turn.status.phase != "Running" or all(r.id in confirmed for r in turn.spec.interrupts):
                return
            why = "the driver did not confirm the interrupt in time; hangar killed the run"
            ending = Ending(event="interrupt_killed", outcome="interrupted", exit_status=130, reason=why)
            ending.lost, ending.interrupts = "hangar killed the run", "killed"
            try:
                written = await self.outcomes.finish(ns, owner, obj, ending)
            except Exception:
                # The turn's end could not be written: the run is stopped all the same (tried again).
                await self.sandboxes.release(ns, owner, "interrupt not confirmed: run killed")
                raise
            metrics.INTERRUPT_KILLS.inc()
            await self.ctx.activity(
                ns,
                owner,
                "progress",
                {
                    "message": "the driver did not confirm the interrupt in time: hangar killed the run",
                    "event": "interrupt.status",
                },
                turn_name,
            )
            await self.ctx.events.emit(kube, written, "Warning", "InterruptKilled", why)
            log.warning("killed the run of %s: interrupt unconfirmed", turn_name, extra=resource(ns, owner))
            await self.sandboxes.release(ns, owner, "interrupt not confirmed: run killed")
        await self.reconcile(ns, owner)


def st_name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])
