"""Tool approvals: the operator's side of the policy engine (``hangar.approvals``).

The driver reports each permission prompt of the agent's CLI as a ``permission_request`` event. What happens
depends on the turn's policy:

- ``auto``: allowed at once, nothing recorded (the CLI runs with its checks off anyway).
- ``deny-risky``: :func:`hangar.approvals.decide` answers at once. A denial, like every hand-back exemption,
  is recorded as an ``Approval`` resolved by ``policy``; a call no rule flags is allowed and shows only as an
  ``approval_decided`` event and in the metrics.
- ``ask`` (and ``governed`` for what its rules flag): an ``Approval`` is created, ``Pending``, with a
  deadline; it shows in the session's ``status.pendingApprovals``. A decision written to ``spec.decision``
  (REST, CLI, ``kubectl patch``) reaches :meth:`Approvals.reconcile` and is delivered to the driver
  (command ``answer-<approval>``, executed once). Unanswered at the deadline, it is denied (``timeout``).

Lifecycle (``lifecycle.APPROVAL``): Pending → Allowed | Denied | Expired | Withdrawn, each move a
compare-and-set on the resourceVersion (the REST API's decision is one too), so an approval is decided
exactly once: by a person, the policy, the timeout, or withdrawn when the CLI takes its prompt back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from hangar.kube import ApiException, Kube, Obj
from hangar.models import Approval, Session
from hangar.models import labels as L
from hangar.models.approval import APPROVAL_DONE, waiting
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec

from .. import metrics
from ..context import Context, resource
from ..lifecycle import APPROVAL, move
from ..status import with_conditions
from .delivery import Deliveries, answer_delivered, ended, waiting_as_known
from .pending_writer import PendingWriter, listed
from .policy import (
    WEB_TOOLS,
    approval_name,
    mcp_server_of,
    resource_reader,
    untrusted_source,
)
from .session_state import field_manager, gone_reason, held_by
from .taint import Tainting

log = logging.getLogger("hangar.operator.approvals")

# The driver events this module applies besides permission_request.
EVENTS = frozenset({"permission_cancelled", "tool_use", "tool_result", "command_result", "turn_ended"})

# (namespace, approval name): governance looks at an approval after each reconcile (file it with Tower, time
# its suspension). (namespace, session, approval): a decision for the call a suspended session waits on.
Hook = Callable[[str, str], Awaitable[None]]
HeldDecision = Callable[[str, str, str], Awaitable[None]]
# (namespace, the Approval as it was, why): a call that no longer waits (Tower is told).
Withdrawn = Callable[[str, Obj, str], Awaitable[None]]


class Approvals:
    def __init__(self, ctx: Context, tainting: Tainting) -> None:
        self.ctx = ctx
        self.tainting = tainting
        self.timers: dict[tuple[str, str], asyncio.Task[None]] = {}
        # (run id, tool id) -> tool name, to know which tool a tool_result belongs to.
        self.tools: dict[tuple[str, str], str] = {}
        # Approvals whose answer this process sent: only the others are re-sent (after a restart).
        self.sent: set[tuple[str, str]] = set()
        self.deliveries = Deliveries(ctx, self.sent)
        # The sessions' pendingApprovals and counters, written off the session's lock (``pending_writer.py``).
        self.pending = PendingWriter(ctx)
        # Set by controllers.py: governance's callbacks (they sit above this module).
        self.hooks: list[Hook] = []
        self.on_held_decision: HeldDecision | None = None
        self.on_withdrawn: Withdrawn | None = None

    def stop(self) -> None:
        self.deliveries.stop()
        self.pending.stop()
        for t in self.timers.values():
            t.cancel()
        self.timers.clear()

    # --- driver events (under the session's lock) ------------------------------------------------------
    async def on_event(
        self,
        ns: str,
        session: str,
        run: str,
        name: str,
        p: dict[str, Any],
        turn: str | None,
        received: datetime | None = None,
    ) -> None:
        """``received``: when the gateway had the event (before it waited for the session's lock)."""
        if name == "permission_cancelled" and turn:
            rid = str(p.get("request_id") or "")
            if rid:
                await self.withdraw_one(ns, approval_name(run, rid), "the agent withdrew the request")
        elif name == "tool_use":
            tid, tool = str(p.get("id") or ""), str(p.get("tool") or "")
            if tid and tool:
                self.tools[(run, tid)] = resource_reader(tool, p.get("input")) or tool
        elif name == "tool_result" and turn:
            tool = self.tools.pop((run, str(p.get("id") or "")), "")
            if tool and not p.get("is_error") and (tool in WEB_TOOLS or mcp_server_of(tool)):
                why = untrusted_source(tool, await self.environment(ns, session))
                if why:
                    await self.tainting.taint(ns, session, turn, why)
        elif name == "command_result" and (delivered := answer_delivered(p)) is not None:
            # Written on its own task: the agent's next request waits on this lock (``delivery.py``).
            self.deliveries.confirmed(ns, delivered, received)
        elif name == "turn_ended" and turn:
            await self.withdraw_turn(ns, turn, "the turn ended")
            self.forget_run(run)

    def forget_run(self, run: str) -> None:
        for key in [k for k in self.tools if k[0] == run]:
            del self.tools[key]

    async def _cas_status(self, kube: Kube, obj: Obj, status: dict[str, Any]) -> bool:
        """Patch the Approval's status only if nothing changed it since ``obj`` was read."""
        try:
            await kube.patch_status(
                "approvals",
                obj["metadata"]["name"],
                with_conditions("approvals", obj, status),
                obj["metadata"]["resourceVersion"],
            )
            return True
        except ApiException as e:
            if e.status in (404, 409):
                return False
            raise

    async def answer(
        self, ns: str, run: str, name: str, request_id: str, decision: str, message: str | None
    ) -> None:
        body: dict[str, Any] = {"request_id": request_id, "decision": decision}
        if message:
            body["message"] = message
        self.sent.add((ns, name))
        await self.ctx.gateway.send(run, "answer", body, command_id=f"answer-{name}")

    # --- decisions ----------------------------------------------------------------------------------------
    async def reconcile(self, ns: str, name: str, seen: Obj | None = None) -> None:
        """Deliver a decision, expire, or re-arm the timer (a raw event, a timer, the listing at start-up).

        ``seen``: the Approval in the watch event. It names the session, and one showing a decision to
        deliver is the first look (a person waits: one read fewer; a stale one loses its compare-and-set).
        Any other state is read afresh (a stale one would re-send an answer already confirmed), unless the
        event shows one no reconcile can act on (``ended``): its own status writes' and its ``deliveredAt``'s
        events would each hold the session's lock for a read while the agent's next events wait on it."""
        if seen is not None:
            sap = Approval.model_validate(seen)
            sst = sap.status
            done = ended(sst.phase, sst.delivered_at is not None, (ns, name) in self.sent)
            if done:
                self._disarm(ns, name)
                if sst.delivered_at is not None:  # its latest state: no older event of it comes after this
                    self.sent.discard((ns, name))
                self.pending.drop(ns, sap.spec.session or "", name)  # repair only: no write when not listed
            # Nor does one undecided and known here (the request's create, its status write, armed): the
            # decision's event of the same Approval waits behind these.
            if done or waiting_as_known(sst.phase, sap.spec.decision is not None, self.armed(ns, name)):
                for hook in self.hooks:
                    await hook(ns, name)
                return
        obj = seen if seen is not None else await self.ctx.kube_in(ns).get("approvals", name)
        if obj is None:
            self._disarm(ns, name)
            return
        ap = Approval.model_validate(obj)
        session = ap.spec.session
        if not session:
            return
        # Not the first look when this process already sent its answer: the event is older than the decide
        # that sent it (a compare-and-set with it would lose), so the state is read.
        fresh = ap.status.phase == "Pending" and ap.spec.decision is not None and (ns, name) not in self.sent
        first = obj if fresh else None
        async with self.ctx.lock(ns, session):
            if not fresh and ap.status.phase is None and ap.spec.decision is not None:
                first = self.deliveries.first_look(ns, name, (ns, name) in self.sent)  # before its status
            await self._reconcile(ns, session, name, first)
        for hook in self.hooks:
            await hook(ns, name)

    async def held(self, kube: Kube, session: str, name: str) -> bool:
        """Is ``session`` suspended on this approval (its call was paused, the sandbox given back)? Such an
        approval waits for Tower past its turn and its sandbox: it is neither withdrawn nor expired."""
        return held_by(await kube.get("sessions", session), name)

    async def _reconcile(self, ns: str, session: str, name: str, seen: Obj | None = None) -> None:
        kube = self.ctx.kube_in(ns)
        for _ in range(5):
            # Whether its answer was out before the read: a confirmation written while the read was out
            # takes it from ``sent``, and the read, older, shows no deliveredAt yet.
            was_sent = (ns, name) in self.sent
            obj, seen = seen or await kube.get("approvals", name), None
            if obj is None:
                self._disarm(ns, name)
                return
            ap = Approval.model_validate(obj)
            phase = ap.status.phase
            if phase is None:
                return  # not (yet) one the operator requested: nothing to deliver
            if phase in APPROVAL_DONE:
                self._disarm(ns, name)
                self.pending.drop(ns, session, name)
                if phase != "Withdrawn" and ap.status.delivered_at is None and not was_sent:
                    await self._resend(ns, obj)
                return
            # One look at the session serves both questions (is its sandbox gone? is it held for Tower?).
            s_obj, cached = await self._session(ns, session)
            gone = gone_reason(s_obj, ap)
            if gone and cached:  # the cache only says where to look: what is gone is read before acting
                s_obj, cached = await kube.get("sessions", session), False
                gone = gone_reason(s_obj, ap)
            if gone:
                if await self._withdraw(ns, obj, gone):
                    return
                continue
            held = held_by(s_obj, name)
            if ap.spec.decision is not None:
                by = ap.spec.decided_by or field_manager(obj) or "unknown"
                # Tower's decision comes through the webhook (decidedBy tower:<who>) like a person's.
                resolver = "tower" if by.startswith("tower:") else "person"
                if await self._decide(ns, obj, ap.spec.decision, by, ap.spec.message, resolver, held):
                    return
                continue
            # Listed while it waits: a record queued but lost to a restart is written again (none when listed).
            self.pending.add(ns, session, listed(ap))
            if held:
                self._disarm(ns, name)  # a suspended call waits for Tower, not for the ask deadline
                return
            deadline = ap.status.deadline
            if deadline is not None and deadline <= datetime.now(UTC):
                if await self._expire(ns, obj):
                    return
                continue
            if deadline is not None:
                self.arm(ns, name, session, deadline)
            return

    async def _session(self, ns: str, session: str) -> tuple[Obj | None, bool]:
        """The session as the operator's cache holds it (True), else as read (False): current for its
        sandbox and suspension, which only the operator writes, each write put in the cache (``cache.py``)."""
        s_obj = await self.ctx.cached(ns, "sessions", session)
        # From the cache when it is the cache's own object (a read returns a new one).
        return s_obj, s_obj is not None and s_obj is self.ctx.cache.get("sessions", ns, session)

    def _run_id(self, ns: str, ap: Approval) -> str:
        run = self.ctx.run_of(ns, ap.labels.get(L.RUN))
        return run.id if run else ""

    async def _decide(
        self,
        ns: str,
        obj: Obj,
        decision: str,
        by: str,
        message: str | None,
        resolver: str,
        held: bool | None = None,
    ) -> bool:
        ap = Approval.model_validate(obj)
        now = datetime.now(UTC)
        status: dict[str, Any] = {
            "phase": move(APPROVAL, "Pending", "denied" if decision == "deny" else "allowed"),
            "decision": decision,
            "by": by,
            "resolvedBy": resolver,
            "decidedAt": iso(now),
        }
        if message:
            status["message"] = message
        kube = self.ctx.kube_in(ns)
        if held is None:
            held = await self.held(kube, ap.spec.session or "", ap.name)
        agent_message = None
        if decision == "deny":
            agent_message = message or f"Denied by {by} (approvals: {ap.spec.policy})"
        if held:
            # A suspended call's prompt was answered when it was paused: its sandbox is gone. An allow
            # reaches the resumed turn's driver as a pre-cleared call instead.
            if not await self._cas_status(kube, obj, status):
                return False
        else:
            # The decision is recorded (spec.decision, a compare-and-set the API made): the agent gets it
            # while the status is written, not a round trip later. Delivered once all the same: the driver
            # executes the command id once, and a status write that loses its compare-and-set (someone
            # changed the Approval meanwhile) is looked at again under this lock and sends the same id.
            # Everything that ends an approval otherwise (withdraw, expire) runs under this session's lock.
            # A decide again after a lost compare-and-set sends nothing again: the answer is queued at the
            # gateway until the driver confirms it, and one sent after that reached the driver twice.
            # The status is written once the driver says the CLI has the answer (``delivery.py``: its
            # deliveredAt in the same write, and the apiserver left alone while the answer is on its way).
            if (ns, ap.name) not in self.sent:
                run = self._run_id(ns, ap)
                if self.ctx.gateway.connected(run):
                    self.deliveries.expect(ns, ap.name)
                await self.answer(ns, run, ap.name, ap.spec.request_id, decision, agent_message)
            delivered = await self.deliveries.heard(ns, ap.name)
            if delivered is not None:
                status["deliveredAt"] = iso(delivered)
            if not await self._cas_status(kube, obj, status):
                return False
            self.deliveries.written(ns, ap.name, delivered is not None)
        await self._resolved(ns, obj, decision, resolver, now, by)
        if held and self.on_held_decision is not None:
            await self.on_held_decision(ns, ap.spec.session or "", ap.name)
        return True

    async def _expire(self, ns: str, obj: Obj) -> bool:
        ap = Approval.model_validate(obj)
        requested, deadline = ap.status.requested_at, ap.status.deadline
        waited = int((deadline - requested).total_seconds()) if deadline and requested else 0
        text = f"Denied by hangar: no decision within {waited} s (approvals: {ap.spec.policy})"
        now = datetime.now(UTC)
        status = {
            "phase": move(APPROVAL, "Pending", "expired"),
            "decision": "deny",
            "by": "hangar",
            "message": text,
            "resolvedBy": "timeout",
            "decidedAt": iso(now),
        }
        kube = self.ctx.kube_in(ns)
        if not await self._cas_status(kube, obj, status):
            return False
        await self.answer(ns, self._run_id(ns, ap), ap.name, ap.spec.request_id, "deny", text)
        await self._resolved(ns, obj, "deny", "timeout", now)
        await self.ctx.events.emit(kube, obj, "Warning", "ApprovalTimedOut", f"{ap.spec.tool}: {text}")
        s_obj = await kube.get("sessions", ap.spec.session or "")
        await self.ctx.events.emit(
            kube, s_obj, "Warning", "ApprovalTimedOut", f"approval {ap.name} ({ap.spec.tool}): {text}"
        )
        return True

    async def _resend(self, ns: str, obj: Obj) -> None:
        """A decision recorded but not confirmed by the driver (an operator restart): send it again, with the
        same command id, so the driver executes it once."""
        ap = Approval.model_validate(obj)
        if (ns, ap.name) in self.sent:
            return
        s_obj = await self.ctx.kube_in(ns).get("sessions", ap.spec.session or "")
        run_pod = ap.labels.get(L.RUN)
        if not run_pod or s_obj is None or Session.model_validate(s_obj).status.sandbox.run != run_pod:
            return
        sus = Session.model_validate(s_obj).status.suspended
        if sus is not None and sus.approval == ap.name:
            return  # its prompt was answered when the call was paused; the resumed run gets the allow
        decision = ap.status.decision or "deny"
        message = ap.status.message if decision == "deny" else None
        await self.answer(ns, self._run_id(ns, ap), ap.name, ap.spec.request_id, decision, message)

    async def _resolved(
        self, ns: str, obj: Obj, decision: str, resolver: str, at: datetime, by: str | None = None
    ) -> None:
        ap = Approval.model_validate(obj)
        session = ap.spec.session or ""
        self._disarm(ns, ap.name)
        metrics.APPROVALS.labels(policy=ap.spec.policy, outcome=decision, resolver=resolver).inc()
        if ap.status.requested_at is not None:
            metrics.APPROVAL_PENDING_SECONDS.labels(resolver=resolver).observe(
                max(0.0, (at - ap.status.requested_at).total_seconds())
            )
        person = resolver in ("person", "tower")
        # The session's record is queued (written after the lock is let go: the agent's next request waits
        # for it); the activity event is written here, so it comes before the events of the call it decided.
        self.pending.drop(ns, session, ap.name)
        await self.ctx.activity(
            ns,
            session,
            "approval_decided",
            {
                "approval": ap.name,
                "tool": ap.spec.tool,
                "command": ap.spec.command,
                "decision": decision,
                "resolved_by": resolver,
                "by": (by or ap.spec.decided_by or field_manager(obj) or "unknown") if person else "hangar",
                "message": ap.spec.message if person else ap.status.message,
            },
            ap.spec.turn,
        )

    async def tower_decided(self, ns: str, name: str, decision: str, by: str, reason: str | None) -> bool:
        """Tower's decision read by the operator (kept by the webhook before the receipt was recorded, or
        re-read): decided like one the webhook wrote, resolved by ``tower``. False when it no longer waits."""
        kube = self.ctx.kube_in(ns)
        obj = await kube.get("approvals", name)
        session = Approval.model_validate(obj).spec.session if obj else None
        if obj is None or not session:
            return False
        async with self.ctx.lock(ns, session):
            for _ in range(5):
                obj = await kube.get("approvals", name)
                if obj is None:
                    return False
                ap = Approval.model_validate(obj)
                if ap.status.phase != "Pending" or ap.spec.decision is not None:
                    return False
                if await self._decide(ns, obj, decision, f"tower:{by}", reason, "tower"):
                    return True
        return False

    # --- withdrawal ---------------------------------------------------------------------------------------
    async def _withdraw(self, ns: str, obj: Obj, why: str) -> bool:
        status = {"phase": move(APPROVAL, "Pending", "withdrawn"), "reason": why, "decidedAt": iso()}
        if not await self._cas_status(self.ctx.kube_in(ns), obj, status):
            return False
        ap = Approval.model_validate(obj)
        self._disarm(ns, ap.name)
        self.pending.drop(ns, ap.spec.session or "", ap.name)
        metrics.APPROVALS.labels(policy=ap.spec.policy, outcome="withdrawn", resolver="none").inc()
        if self.on_withdrawn is not None:
            await self.on_withdrawn(ns, obj, why)
        await self.ctx.activity(
            ns,
            ap.spec.session or "",
            "approval_withdrawn",
            {"approval": ap.name, "reason": why},
            ap.spec.turn,
        )
        return True

    async def withdraw_one(self, ns: str, name: str, why: str, held: bool = False) -> None:
        """Withdraw a pending approval; one a suspended session waits on only when ``held`` says so."""
        kube = self.ctx.kube_in(ns)
        for _ in range(5):
            obj = await kube.get("approvals", name)
            if obj is None or not waiting(Approval.model_validate(obj)):
                return
            if not held and await self.held(kube, Approval.model_validate(obj).spec.session or "", name):
                return  # its turn ended and its sandbox went on purpose: it waits for Tower
            if await self._withdraw(ns, obj, why):
                return

    async def _withdraw_where(self, ns: str, selector: str, why: str) -> None:
        for obj in await self.ctx.kube_in(ns).list("approvals", label_selector=selector):
            # Pending, or shown as pending since its create (its status write failed for good).
            if waiting(Approval.model_validate(obj)):
                await self.withdraw_one(ns, obj["metadata"]["name"], why)

    async def withdraw_turn(self, ns: str, turn: str, why: str) -> None:
        """Every approval of ``turn`` still pending is withdrawn (the turn ended, the sandbox went)."""
        await self._withdraw_where(ns, f"{L.TURN}={turn}", why)

    async def withdraw_run(self, ns: str, run_pod: str, why: str) -> None:
        """Every approval the sandbox ``run_pod`` asked for and still pending is withdrawn (the sandbox went)."""
        await self._withdraw_where(ns, f"{L.RUN}={run_pod}", why)

    # --- timers -------------------------------------------------------------------------------------------
    def arm(self, ns: str, name: str, session: str, deadline: datetime) -> None:
        task = self.timers.get((ns, name))
        if task is not None and not task.done():
            return
        self.timers[(ns, name)] = asyncio.create_task(self._timer(ns, name, session, deadline))

    def armed(self, ns: str, name: str) -> bool:
        task = self.timers.get((ns, name))
        return task is not None and not task.done()

    def _disarm(self, ns: str, name: str) -> None:
        self.deliveries.early.pop((ns, name), None)
        task = self.timers.pop((ns, name), None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _timer(self, ns: str, name: str, session: str, deadline: datetime) -> None:
        delay = (deadline - datetime.now(UTC)).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)
        if self.timers.get((ns, name)) is asyncio.current_task():
            self.timers.pop((ns, name), None)  # so that the reconcile may arm a new one
        backoff = 1.0
        while True:
            try:
                async with self.ctx.lock(ns, session):
                    await self._reconcile(ns, session, name)
                return
            except Exception:  # tried again: an approval past its deadline is never left pending
                log.exception("expiring approval %s failed", name, extra=resource(ns, name))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    async def environment(self, ns: str, session: str) -> EnvironmentSpec | None:
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        if s_obj is None:
            return None
        env = await kube.get("environments", Session.model_validate(s_obj).spec.environment)
        return EnvironmentSpec.model_validate(env["spec"]) if env else None
