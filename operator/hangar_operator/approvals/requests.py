"""Permission requests: the turn's policy answers a tool call at once, or an Approval waits for a person.

- ``auto``: allowed at once, nothing recorded (the CLI runs with its checks off anyway).
- ``deny-risky``: :func:`hangar.approvals.decide` answers at once. A denial, like every hand-back exemption,
  is recorded as an ``Approval`` resolved by ``policy``; a call no rule flags is allowed and shows only as
  an ``approval_decided`` event and in the metrics (an Approval per harmless call would flood the apiserver).
- ``ask`` (and ``governed`` for what its rules flag): an ``Approval`` is created, ``Pending``, with a
  deadline; the Approval controller (``controller.py``) delivers its decision or expires it.

Tower (``HANGAR_GOVERNANCE``, kind ``approval``): under ``governed``, what the rules flag, and under ``ask``
the risky calls (a rule or the taint gate flagged them), are filed with Tower (``spec.tower``). In
``enforce`` Tower decides the call (a person still may); in ``shadow`` hangar decides as it would without
Tower (``governed`` as ``deny-risky``) and Tower's answer is only recorded beside it. A call the driver
reports pre-cleared (Tower allowed it while the session was suspended) was allowed by the driver itself:
it is recorded, resolved by ``tower``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from hangar.approvals import Policy, ToolCall, Verdict, args_hash, decide
from hangar.approvals import shell_command as call_command
from hangar.kube import ApiException, Kube, Obj, owner_ref
from hangar.models import API_VERSION, Approval, Session, Turn
from hangar.models import labels as L
from hangar.models.approval import asked_times
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec

from .. import metrics
from ..context import Context
from ..lifecycle import APPROVAL, move
from ..status import patch_status
from .asked_order import RequestClock
from .controller import Approvals
from .pending_writer import listed
from .policy import AGENT_HOME, approval_name, sandbox_time, shown_command


class Filer(Protocol):
    def file(self, ns: str, name: str) -> None: ...


class PermissionRequests:
    def __init__(self, ctx: Context, approvals: Approvals, tower: Filer | None = None) -> None:
        self.ctx = ctx
        self.approvals = approvals
        self.tower = tower
        self.clock = RequestClock()  # requestedAt, in the order taken (the pending list sorts on it)

    async def on_permission(
        self, ns: str, session: str, turn_name: str, p: dict[str, Any], received: datetime | None = None
    ) -> None:
        """The turn's approvals policy answers, or a person does. ``received``: when the gateway had the
        event (it bounds the time the sandbox says its agent asked)."""
        started = time.perf_counter()
        received = received or datetime.now(UTC)
        kube = self.ctx.kube_in(ns)
        # The session from the operator's cache (its status — sandbox, taint — is written by the operator
        # alone, each write put in the cache, and the caller holds the session's lock); the turn is read.
        # Both at once when the cache can't say: the agent waits on this answer.
        t_obj, s_obj = await asyncio.gather(
            kube.get("turns", turn_name), self.ctx.cached(ns, "sessions", session)
        )
        if t_obj is None or s_obj is None:
            return
        turn, s = Turn.model_validate(t_obj), Session.model_validate(s_obj)
        asked = sandbox_time(p.get("asked_at"), received, turn.status.started_at)
        # Written beside the operator's own times: the sandbox's word, for measuring only.
        claimed = {"sandboxAskedAt": iso(asked)} if asked is not None else {}
        run = self.ctx.run_of(ns, s.status.sandbox.run)
        request_id = str(p.get("request_id") or "")
        if run is None or not request_id:
            return
        name = approval_name(run.id, request_id)
        policy: Policy = turn.status.policy or "auto"
        if isinstance(p.get("precleared"), dict):
            await self._precleared(ns, s_obj, turn_name, run.pod, name, p)
            return
        if policy == "auto":
            await self.approvals.answer(ns, run.id, name, request_id, "allow", None)
            return
        tool = str(p.get("tool") or "")
        raw_input, raw_command = p.get("input"), p.get("command")
        tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
        tainted = turn.status.taint.tainted or s.status.taint.tainted
        # The Environment matters to the verdict only for a tainted call (its MCP write tools): an untainted
        # one is answered without reading it, and it is read only if a request is filed (below).
        env = await self._environment(kube, s) if tainted else None
        call = ToolCall(
            tool=tool,
            input=tool_input,
            command=raw_command if isinstance(raw_command, str) else None,
            cwd=str(p.get("cwd") or "/workspace"),
            home=str(p.get("home") or AGENT_HOME),
            hangar_io=str(p.get("io") or ""),
            tainted=tainted,
        )
        write_tools = {k: v.write_tools for k, v in (env.mcp if env else {}).items() if v.write_tools}
        verdict = decide(policy, call, mcp_write_tools=write_tools)
        tower_mode = self.ctx.settings.governance_mode("approval")
        flagged = verdict.governed or (
            policy == "ask" and verdict.decision == "ask" and verdict.rule != "ask"
        )
        tower = tower_mode if flagged and tower_mode != "off" and self.tower is not None else None
        if verdict.governed and tower_mode == "shadow":
            # Shadow: nothing waits on Tower; the call is decided as under deny-risky, Tower only asked.
            verdict = decide("deny-risky", call, mcp_write_tools=write_tools)
        command = shown_command(tool, tool_input, call_command(call))
        record: dict[str, Any] = {
            "session": session,
            "turn": turn_name,
            "requestId": request_id,
            "tool": tool,
            "command": command,
            "argsHash": args_hash(tool, tool_input),
            "policy": policy,
            "tainted": tainted,
            "why": verdict.reason,
            "rule": verdict.rule,
            "governed": verdict.governed,
        }
        if tower is not None:
            record["tower"] = tower
        if verdict.decision in ("allow", "deny"):
            # hangar answers at once: the agent waits on this, the records come after.
            decision = verdict.decision
            await self.approvals.answer(
                ns, run.id, name, request_id, decision, verdict.reason if decision == "deny" else None
            )
            metrics.APPROVAL_DECISION_SECONDS.observe(time.perf_counter() - started)
            keep = verdict.rule == "handback" or decision == "deny" or tower is not None
            if keep:
                await self._record_resolved(kube, s_obj, run.pod, name, record, verdict, claimed)
                await self._governance(ns, name, tower)
            metrics.APPROVALS.labels(policy=policy, outcome=decision, resolver="policy").inc()
            await self.ctx.activity(
                ns,
                session,
                "approval_decided",
                {
                    "approval": name if keep else None,
                    "tool": tool,
                    "command": command,
                    "decision": decision,
                    "rule": verdict.rule,
                    "reason": verdict.reason,
                    "resolved_by": "policy",
                    "tainted": tainted,
                },
                turn_name,
            )
            return
        await self._request(ns, s_obj, env, run.pod, name, record, verdict, claimed)
        await self._governance(ns, name, tower)

    @staticmethod
    async def _environment(kube: Kube, s: Session, cached: Context | None = None) -> EnvironmentSpec | None:
        """The session's Environment, read; with ``cached``, as that context's watch cache holds it (for
        the timeout of a call that asks: nothing is allowed by it)."""
        name = s.spec.environment
        env_obj = await (
            cached.cached(kube.namespace, "environments", name) if cached else kube.get("environments", name)
        )
        return EnvironmentSpec.model_validate(env_obj["spec"]) if env_obj else None

    async def _governance(self, ns: str, name: str, tower: str | None) -> None:
        """A call for Tower is filed (in the background, retried); a session's call is timed for suspension."""
        if tower is None or self.tower is None:
            return
        self.tower.file(ns, name)
        for hook in self.approvals.hooks:
            await hook(ns, name)

    async def _precleared(
        self, ns: str, s_obj: Obj, turn_name: str, run_pod: str, name: str, p: dict[str, Any]
    ) -> None:
        """The driver allowed the call Tower cleared while the session was suspended: recorded once."""
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        r = s.status.resuming
        tool = str(p.get("tool") or "")
        raw = p.get("input")
        tool_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
        h = args_hash(tool, tool_input)
        matched = r is not None and r.turn == turn_name and r.tool == tool and r.args_hash == h
        await self.ctx.db.audit(
            "tower",
            "governance.precleared_call" if matched else "governance.precleared_unmatched",
            s.name,
            turn=turn_name,
            tool=tool,
            args_hash=h,
            approval=r.approval if r else None,
            tower=r.tower if r else None,
        )
        if r is None or not matched:
            return
        now = iso()
        spec = {
            "session": s.name,
            "turn": turn_name,
            "requestId": str(p.get("request_id") or ""),
            "tool": tool,
            "command": shown_command(
                tool, tool_input, p.get("command") if isinstance(p.get("command"), str) else None
            ),
            "argsHash": h,
            "policy": s.status.policy or "governed",
            "why": f"pre-cleared: Tower allowed approval {r.tower} while the session was suspended",
            "rule": "precleared",
            "tower": "enforce",
        }
        obj = await self.create(kube, s_obj, run_pod, name, spec)
        if Approval.model_validate(obj).status.phase is None:
            await patch_status(
                kube,
                "approvals",
                obj,
                {
                    "phase": move(APPROVAL, None, "policy_allowed"),
                    "decision": "allow",
                    "by": f"tower:{r.decided_by or ''}",
                    "resolvedBy": "tower",
                    "receipt": r.tower,
                    "requestedAt": now,
                    "decidedAt": now,
                    "deliveredAt": now,
                    "reason": spec["why"],
                },
            )
        s_obj = await kube.get("sessions", s.name) or s_obj
        await patch_status(kube, "sessions", s_obj, {"resuming": None})
        await self.ctx.activity(
            ns,
            s.name,
            "approval_decided",
            {
                "approval": name,
                "tool": tool,
                "command": spec["command"],
                "decision": "allow",
                "resolved_by": "tower",
                "precleared": True,
                "tower": r.tower,
            },
            turn_name,
        )

    # --- records ----------------------------------------------------------------------------------------
    def body(
        self, s_obj: Obj, run_pod: str, name: str, spec: dict[str, Any], stamps: dict[str, str] | None = None
    ) -> Obj:
        meta: dict[str, Any] = {
            "name": name,
            "labels": {L.SESSION: spec["session"], L.TURN: spec["turn"], L.RUN: run_pod, **L.part_of()},
            "ownerReferences": [owner_ref(s_obj)],
        }
        if stamps:
            meta["annotations"] = stamps
        return {"apiVersion": API_VERSION, "kind": "Approval", "metadata": meta, "spec": spec}

    async def create(
        self,
        kube: Kube,
        s_obj: Obj,
        run_pod: str,
        name: str,
        spec: dict[str, Any],
        stamps: dict[str, str] | None = None,
    ) -> Obj:
        """``stamps``: a call that asks, pending from this write on (``labels.REQUESTED_AT``, ``DEADLINE``)."""
        try:
            return await kube.create("approvals", self.body(s_obj, run_pod, name, spec, stamps))
        except ApiException as e:
            if e.status != 409:
                raise
            existing = await kube.get("approvals", name)
            if existing is None:
                raise
            return existing

    async def _record_resolved(
        self,
        kube: Kube,
        s_obj: Obj,
        run_pod: str,
        name: str,
        spec: dict[str, Any],
        v: Verdict,
        claimed: dict[str, Any],
    ) -> None:
        obj = await self.create(kube, s_obj, run_pod, name, spec)
        if Approval.model_validate(obj).status.phase is not None:
            return
        now = iso()
        event = "policy_allowed" if v.decision == "allow" else "policy_denied"
        await patch_status(
            kube,
            "approvals",
            obj,
            {
                "phase": move(APPROVAL, None, event),
                "decision": v.decision,
                "by": "hangar",
                "message": v.reason,
                "resolvedBy": "policy",
                "requestedAt": now,
                "decidedAt": now,
                "reason": v.reason,
                **claimed,
            },
        )
        self.approvals.pending.count(kube.namespace, spec["session"])

    async def _request(
        self,
        ns: str,
        s_obj: Obj,
        env: EnvironmentSpec | None,
        run_pod: str,
        name: str,
        spec: dict[str, Any],
        v: Verdict,
        claimed: dict[str, Any],
    ) -> None:
        kube = self.ctx.kube_in(ns)
        session = spec["session"]
        if env is None:
            # The Environment (its timeout) as the operator's cache holds it: the agent waits on this.
            env = await self._environment(kube, Session.model_validate(s_obj), self.ctx)
        timeout = (env.approval_timeout_seconds if env else None) or self.ctx.settings.approval_timeout
        now = self.clock.now(run_pod)
        deadline = now + timedelta(seconds=timeout)
        # Stamped on the Approval as it is created: it is pending from this one write on (the API lists it),
        # and its status, with the same times, follows without a read.
        stamps = {L.REQUESTED_AT: iso(now), L.DEADLINE: iso(deadline)}
        if "sandboxAskedAt" in claimed:  # shown from the create too (the pending view's every time)
            stamps[L.SANDBOX_ASKED_AT] = claimed["sandboxAskedAt"]
        obj = await self.create(kube, s_obj, run_pod, name, spec, stamps)
        ap = Approval.model_validate(obj)
        if ap.status.phase is not None:
            return  # the event was applied before (an operator restart): nothing to do twice
        # Created before (the event applied again after a failed status write): the times it is shown with.
        first, until = asked_times(ap.status, ap.metadata)
        if first is not None and until is not None:
            now, deadline = first, until
        # Armed before the status write: its watch event then needs no look under the session's lock.
        self.approvals.arm(ns, name, session, deadline)
        written = await patch_status(
            kube,
            "approvals",
            obj,
            {
                "phase": move(APPROVAL, None, "requested"),
                "requestedAt": iso(now),
                "deadline": iso(deadline),
                "reason": v.reason,
                **claimed,
            },
        )
        self.approvals.deliveries.requested(ns, name, written)
        # Pending in its status too. The session's record of it is queued (written after the lock is let go:
        # the decision waits for it); the activity event is written here, before the decision's.
        self.approvals.pending.add(ns, session, listed(ap), count=True)
        await self._requested_event(ns, session, name, spec, v, deadline)

    async def _requested_event(
        self, ns: str, session: str, name: str, spec: dict[str, Any], v: Verdict, deadline: datetime
    ) -> None:
        await self.ctx.activity(
            ns,
            session,
            "approval_request",
            {
                "approval": name,
                "tool": spec["tool"],
                "command": spec["command"],
                "why": v.reason,
                "rule": v.rule,
                "policy": spec["policy"],
                "tainted": spec["tainted"],
                "governed": v.governed,
                "deadline": iso(deadline),
            },
            spec["turn"],
        )
