"""The driver-event router: the gateway's callbacks, each event handed to the controller it concerns.

A signed driver event is applied (idempotently, under its session's lock) and only then recorded under
``(run, seq)``; the gateway acknowledges it after that, so a resend after a crash is applied once.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from hangar.kube import ApiException
from hangar.models import Session

from . import metrics
from .approvals.controller import EVENTS as APPROVAL_EVENTS
from .approvals.controller import Approvals
from .approvals.requests import PermissionRequests
from .context import Context, resource
from .governance.suspension import Suspensions
from .pool_objects import parse_pool_run
from .pools import Pools
from .runs import Run, parse_run
from .sandboxes import Sandboxes
from .sessions import Sessions
from .status import patch_status
from .turns.outcomes import TurnOutcomes
from .turns.steer_events import EVENTS as STEERING_EVENTS
from .turns.steering import Steering
from .work_patches import session_work

log = logging.getLogger("hangar.operator.router")

# Activity the users see; the rest of the driver's events only move resources.
SHOWN = frozenset(
    {
        "text",
        "tool_use",
        "tool_result",
        "permission_request",
        "permission_cancelled",
        "steer",
        "turn_started",
        "turn_ended",
        "handback",
        "log",
        "driver_ready",
    }
)
# After these the session may have a next step to take (a queued turn to start).
RECONCILE_AFTER = frozenset({"turn_ended", "steer", "driver_ready"})


# Event names counted by name in the failed-events metric (others count as "other": drivers name them).
KNOWN_EVENTS = SHOWN | APPROVAL_EVENTS | STEERING_EVENTS | {"conversation", "usage"}


def refused(e: BaseException) -> str | None:
    """Why applying an event failed for good (the apiserver refused the write as it is: too large,
    invalid, forbidden, gone), or None when trying again may work (a conflict, throttling, a server error,
    the connection)."""
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        if 400 <= status < 500 and status not in (408, 409, 429):
            detail = e.reason or ""
            with contextlib.suppress(Exception):
                detail = str(json.loads(e.body or b"{}").get("message") or detail)
            return f"the apiserver refused the write ({status}): {detail}"[:1000]
        return None
    if isinstance(e, (ValidationError, ValueError, TypeError, KeyError)):
        return f"the event could not be read: {type(e).__name__}: {e}"[:1000]
    return None


class Router:
    def __init__(
        self,
        ctx: Context,
        sessions: Sessions,
        sandboxes: Sandboxes,
        outcomes: TurnOutcomes,
        steering: Steering,
        approvals: Approvals,
        requests: PermissionRequests,
        suspensions: Suspensions,
    ) -> None:
        self.ctx = ctx
        self.sessions = sessions
        self.sandboxes = sandboxes
        self.outcomes = outcomes
        self.steering = steering
        self.approvals = approvals
        self.requests = requests
        self.suspensions = suspensions
        # run id -> the highest event seq this process stored for it while connected: the next event of a
        # run needs no database read to know it is new (each event waits on the one before it).
        self.stored: dict[str, int] = {}
        # A job's verify/deliver answer goes to the Job controller (set in controllers.py: jobs sit above).
        self.on_job_result: Callable[[str, str, dict[str, Any]], Awaitable[None]] | None = None

    @property
    def pools(self) -> Pools | None:
        return self.sandboxes.pools

    def _run(self, run_id: str) -> Run | None:
        run = parse_run(self.ctx.home, run_id)
        return run if run and self.ctx.serves(run.namespace) else None

    async def key_for_run(self, run_id: str) -> bytes | None:
        return await self.sandboxes.key_for_run(run_id)

    async def on_rejected(self, who: str, reason: str) -> None:
        log.warning("driver message refused from %s: %s", who, reason)
        # Audited and counted, never written into a session's activity: anyone who can reach the port
        # can cause a refusal, naming any run.
        await self.ctx.db.audit("gateway", "driver.rejected", who, reason=reason)

    async def on_connect(self, run_id: str, hello: dict[str, Any]) -> None:
        if self.pools is not None and parse_pool_run(run_id) is not None:
            await self.pools.member_connected(run_id)
            return
        run = self._run(run_id)
        if run is None:
            return
        if self.pools is not None:
            self.pools.session_connected(run_id)
        async with self.ctx.lock(run.namespace, run.session, keep_held=True):  # sandboxes.connected folds it
            # A warm claim that wrote this run connected records its connect itself (pool_claims.after_claim).
            recorded = self.pools is not None and self.pools.took_connect(run_id)
            if not await self.sandboxes.connected(run.namespace, run.session, run.pod, hello):
                return
        if not recorded:
            await self.ctx.activity(
                run.namespace,
                run.session,
                "driver_connected",
                {"run": run.pod, "driver": hello.get("driver_version", ""), "pid": hello.get("pid")},
            )
        await self.sessions.reconcile(run.namespace, run.session)

    async def on_disconnect(self, run_id: str) -> None:
        if self.pools is not None and parse_pool_run(run_id) is not None:
            self.pools.member_disconnected(run_id)
            return
        self.stored.pop(run_id, None)
        run = self._run(run_id)
        if run is None:
            return
        async with self.ctx.lock(run.namespace, run.session):
            await self.sandboxes.disconnected(run.namespace, run.session, run.pod)

    async def on_event(self, run_id: str, seq: int, name: str, payload: dict[str, Any]) -> None:
        """A signed driver event: apply its effect (idempotent), then record it once. Raising = no ack."""
        if self.pools is not None and parse_pool_run(run_id) is not None:
            await self.pools.member_event(run_id, name, payload)  # a warm sandbox: no session to tell
            return
        run = self._run(run_id)
        if run is None:
            return
        received = datetime.now(UTC)
        known = self.stored.get(run_id)
        if (known if known is not None else await self.ctx.db.driver_acked(run_id)) >= seq:
            return
        ns, session = run.namespace, run.session
        turn = payload.get("turn") if isinstance(payload.get("turn"), str) else None
        self.approvals.deliveries.arrived(ns, name, payload, received)  # a decision holding the lock waits
        async with self.ctx.lock(ns, session):
            turn = turn or await self._current_turn(ns, session)
            try:
                await self._apply(run, name, payload, turn, received)
            except Exception as e:
                why = refused(e)
                if why is None:
                    raise  # the apiserver away, a conflict: not acknowledged, the driver sends it again
                await self._failed(run, seq, name, turn, why)
                self._stored(run_id, seq)
                return
        if name in SHOWN:
            await self.ctx.db.record_driver_event(
                run_id, seq, self.ctx.scope("session", ns, session), name, payload, turn
            )
        else:
            await self.ctx.db.mark_driver_event(run_id, seq)
        self._stored(run_id, seq)
        metrics.DRIVER_EVENTS.labels(name=name if name in KNOWN_EVENTS else "other").inc()
        if name in RECONCILE_AFTER or (name == "command_result" and payload.get("op") == "start_turn"):
            await self.sessions.reconcile(ns, session)

    def _stored(self, run_id: str, seq: int) -> None:
        self.stored[run_id] = max(self.stored.get(run_id, 0), seq)

    async def _failed(self, run: Run, seq: int, name: str, turn: str | None, why: str) -> None:
        """An event the apiserver refused to apply: recorded as failed with the reason and acknowledged, so
        the events after it flow (a refusal is final; sending it again would block the run for good)."""
        metrics.DRIVER_EVENTS_FAILED.labels(name=name if name in KNOWN_EVENTS else "other").inc()
        log.warning(
            "driver event %s #%s of %s could not be applied: %s",
            name,
            seq,
            run.id,
            why,
            extra=resource(run.namespace, run.session),
        )
        scope = self.ctx.scope("session", run.namespace, run.session)
        await self.ctx.db.record_driver_event(
            run.id, seq, scope, "event_failed", {"event": name, "seq": seq, "reason": why}, turn
        )

    async def _current_turn(self, ns: str, session: str) -> str | None:
        """The turn an event that names none belongs to (a ``text`` event, say). Read from the operator's cache:
        only the operator writes ``currentTurn``, its own writes reach the cache at once, and the caller holds
        the session's lock, so the cache is current here; a read of the apiserver for each event made the
        whole operator apply at most ~100 events a second (bench/scale.py)."""
        s_obj = await self.ctx.cached(ns, "sessions", session)
        return Session.model_validate(s_obj).status.current_turn if s_obj else None

    async def _apply(
        self, run: Run, name: str, p: dict[str, Any], turn: str | None, received: datetime | None = None
    ) -> None:
        ns, session = run.namespace, run.session
        if name in APPROVAL_EVENTS:
            await self.approvals.on_event(ns, session, run.id, name, p, turn, received)
        if name in STEERING_EVENTS:
            await self.steering.on_event(ns, session, name, p, turn)
        if name == "conversation" and p.get("id"):
            kube = self.ctx.kube_in(ns)
            s_obj = await kube.get("sessions", session)
            if s_obj is not None:
                await patch_status(kube, "sessions", s_obj, {"conversation": str(p["id"])})
        elif name == "usage" and turn:
            await self.outcomes.usage(ns, turn, p)
        elif name == "turn_ended" and turn:
            await self.outcomes.turn_ended(ns, session, turn, p)
        elif name == "handback" and turn:
            await self.outcomes.handback(ns, turn, p)
        elif name == "permission_request" and turn:
            await self.requests.on_permission(ns, session, turn, p, received)
        elif name == "command_result" and p.get("op") in ("verify", "deliver") and self.on_job_result:
            await self.on_job_result(ns, session, p)
        elif name == "command_result" and p.get("op") == "checkpoint":
            await self.suspensions.checkpointed(ns, session, p)
        elif name == "command_result" and turn and p.get("op") == "start_turn" and not p.get("ok"):
            await self.outcomes.start_refused(ns, session, turn, p)
        elif name == "work_patch" and turn:
            await session_work(self.ctx, ns, session, turn, p)
        elif name == "turn_started" and turn:
            log.info("turn %s started", turn, extra=resource(ns, session))
