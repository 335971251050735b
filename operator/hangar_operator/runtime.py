"""The operator's live side: sessions, their sandboxes and turns, driven by resources and driver events.

Every entry point (a kopf handler, a driver event, a pod event, a timer) ends in an idempotent
``reconcile_*`` that reads the resources and moves them one step on, under a per-session lock. So a
restart of the operator, a repeated event or a lost watch never does anything twice.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from hangar.config import Settings
from hangar.kube import ApiException, Kube, Obj
from hangar.models import LIVE_HARNESSES
from hangar.models.environment import EnvironmentSpec
from hangar.models.session import ForkOrigin, SessionStatus
from hangar.store import Database
from hangar.turns import create_turn, turn_index

from . import metrics
from .approvals import EVENTS as APPROVAL_EVENTS
from .approvals import Approvals
from .gateway import Gateway
from .jobs import Jobs
from .sandbox import pvc_name, run_key_secret, sandbox_pod, workspace_pvc
from .steering import EVENTS as STEERING_EVENTS
from .steering import Steering

log = logging.getLogger("hangar.operator")

# What the CLIs say when asked to resume a conversation they never saved.
LOST_CONVERSATION = ("No conversation found with session ID", "no rollout found for thread id")
RUN_RE = re.compile(r"^(?P<session>[a-z][-a-z0-9]*)-r(?P<n>\d+)$")
ACTIVE_PHASES = ("Starting", "Idle", "Running")
# Activity the users see; the rest of the driver's events only move resources.
SHOWN = {
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


def iso(ts: float | None = None) -> str:
    dt = datetime.fromtimestamp(ts, UTC) if ts is not None else datetime.now(UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_of_run(run: str) -> str | None:
    m = RUN_RE.match(run)
    return m.group("session") if m else None


class Runtime:
    def __init__(self, kube: Kube, db: Database, settings: Settings) -> None:
        self.kube = kube
        self.db = db
        self.settings = settings
        self.locks: dict[str, asyncio.Lock] = {}
        # Run keys of the sandboxes this process started or has verified: a driver's hello (signed or not)
        # costs no apiserver read. Dropped when the sandbox is released.
        self.run_keys: dict[str, bytes] = {}
        self.slot_lock = asyncio.Lock()
        self.gateway = Gateway(
            host=settings.gateway_host,
            port=settings.gateway_port,
            key_for_run=self.key_for_run,
            on_event=self.on_event,
            on_connect=self.on_connect,
            on_disconnect=self.on_disconnect,
            on_rejected=self.on_rejected,
            acked_for_run=self.db.driver_acked,
        )
        self.gateway_port = 0
        self.approvals = Approvals(self)
        self.steering = Steering(self)
        self.jobs = Jobs(self)

    async def start(self) -> None:
        self.gateway_port = await self.gateway.start()
        log.info("driver gateway listening on %s:%s", self.settings.gateway_host, self.gateway_port)

    async def stop(self) -> None:
        self.steering.stop()
        self.approvals.stop()
        await self.gateway.stop()

    def gateway_address(self) -> str:
        return self.settings.gateway_address or f"127.0.0.1:{self.gateway_port}"

    def lock(self, session: str) -> asyncio.Lock:
        return self.locks.setdefault(session, asyncio.Lock())

    async def event(self, session: str, kind: str, payload: dict[str, Any], turn: str | None = None) -> None:
        await self.db.append_event(f"session/{session}", kind, payload, turn)

    # --- the gateway's callbacks ------------------------------------------------------------------------
    async def key_for_run(self, run: str) -> bytes | None:
        if run in self.run_keys:
            return self.run_keys[run]
        session = session_of_run(run)
        if session is None:
            return None
        s = await self.kube.get("sessions", session)
        if s is None or (s.get("status") or {}).get("sandbox", {}).get("run") != run:
            return None  # a driver of a sandbox this session no longer has
        try:
            secret = await self.kube.core.read_namespaced_secret(f"{run}-key", self.kube.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        import base64

        data = (secret.data or {}).get("run-key")
        if not data:
            return None
        self.run_keys[run] = base64.b64decode(data)
        return self.run_keys[run]

    async def on_rejected(self, who: str, reason: str) -> None:
        metrics.DRIVER_REJECTED.labels(reason=reason.split(":")[0][:40]).inc()
        log.warning("driver message refused from %s: %s", who, reason)
        await self.db.audit("gateway", "driver.rejected", who, reason=reason)
        session = session_of_run(who)
        if session:
            await self.event(session, "driver_rejected", {"reason": reason})

    async def on_connect(self, run: str, hello: dict[str, Any]) -> None:
        session = session_of_run(run)
        if not session:
            return
        async with self.lock(session):
            s = await self.kube.get("sessions", session)
            if not s:
                return
            st = SessionStatus.model_validate(s.get("status") or {})
            if st.sandbox.run != run:
                return
            patch: dict[str, Any] = {"sandbox": {"connected": True}}
            if st.phase == "Starting":
                patch.update(phase="Idle", reason="", message="sandbox connected")
                started = st.sandbox.started_at
                if started is not None:
                    metrics.SANDBOX_CONNECT.observe(max(0.0, time.time() - started.timestamp()))
            await self.kube.patch_status("sessions", session, patch)
        await self.event(
            session,
            "driver_connected",
            {"run": run, "driver": hello.get("driver_version", ""), "pid": hello.get("pid")},
        )
        await self.reconcile_session(session)

    async def on_disconnect(self, run: str) -> None:
        session = session_of_run(run)
        if not session:
            return
        async with self.lock(session):
            s = await self.kube.get("sessions", session)
            if s and (s.get("status") or {}).get("sandbox", {}).get("run") == run:
                await self.kube.patch_status("sessions", session, {"sandbox": {"connected": False}})

    async def on_event(self, run: str, seq: int, name: str, payload: dict[str, Any]) -> None:
        """A signed driver event: apply its effect (idempotent), then record it once. Raising = no ack."""
        session = session_of_run(run)
        if session is None:
            return
        if await self.db.driver_acked(run) >= seq:
            return
        turn = payload.get("turn") if isinstance(payload.get("turn"), str) else None
        async with self.lock(session):
            turn = turn or await self._current_turn(session)
            await self._apply(session, run, name, payload, turn)
        if name in SHOWN:
            await self.db.record_driver_event(run, seq, f"session/{session}", name, payload, turn)
        else:
            await self.db.mark_driver_event(run, seq)
        if name in ("turn_ended", "steer", "driver_ready", "command_result"):
            await self.reconcile_session(session)

    async def _current_turn(self, session: str) -> str | None:
        s = await self.kube.get("sessions", session)
        return ((s or {}).get("status") or {}).get("currentTurn")

    async def _apply(self, session: str, run: str, name: str, p: dict[str, Any], turn: str | None) -> None:
        if name in APPROVAL_EVENTS:
            await self.approvals.on_event(session, run, name, p, turn)
        if name in STEERING_EVENTS:
            await self.steering.on_event(session, name, p, turn)
        if name == "conversation" and p.get("id"):
            await self.kube.patch_status("sessions", session, {"conversation": str(p["id"])})
        elif name == "usage" and turn:
            await self.kube.patch_status(
                "turns",
                turn,
                {
                    "usage": {
                        "inputTokens": int(p.get("input_tokens") or 0),
                        "outputTokens": int(p.get("output_tokens") or 0),
                    },
                    **({"costUsd": float(p["cost_usd"])} if p.get("cost_usd") is not None else {}),
                },
            )
        elif name == "turn_ended" and turn:
            await self._turn_ended(session, turn, p)
        elif name == "handback" and turn:
            await self._handback(session, turn, p)
        elif name == "permission_request" and turn:
            await self._permission(session, turn, p)
        elif name == "command_result" and turn:
            await self._command_result(session, turn, p)

    # --- turn outcomes ----------------------------------------------------------------------------------
    async def _turn_ended(self, session: str, turn_name: str, p: dict[str, Any]) -> None:
        turn = await self.kube.get("turns", turn_name)
        if turn is None:
            return
        status = turn.get("status") or {}
        if status.get("phase") in ("Completed", "Failed", "Interrupted"):
            return
        raw = p.get("outcome")
        outcome = raw if isinstance(raw, str) and raw in ("completed", "failed", "interrupted") else "failed"
        phase = {"completed": "Completed", "failed": "Failed", "interrupted": "Interrupted"}[outcome]
        code = p.get("exit_status")
        exit_status = int(code) if isinstance(code, int) else (130 if outcome == "interrupted" else 0)
        if outcome == "failed" and await self._conversation_lost(session, turn, str(p.get("error") or "")):
            return
        usage = p.get("usage") or {}
        patch: dict[str, Any] = {
            "phase": phase,
            "outcome": outcome,
            "exitStatus": exit_status,
            "summary": str(p.get("summary") or "")[:4000],
            "reason": str(p.get("error") or "")[:2000],
            "finishedAt": iso(),
            "usage": {
                "inputTokens": int(usage.get("input_tokens") or 0),
                "outputTokens": int(usage.get("output_tokens") or 0),
            },
        }
        if p.get("cost_usd") is not None:
            patch["costUsd"] = float(p["cost_usd"])
        if status.get("question"):
            patch["phase"] = "NeedsInput"
        patch.update(self.steering.end_patch(turn_name, status))
        await self.kube.patch_status("turns", turn_name, patch)
        await self.steering.after_end(session, turn_name)
        metrics.TURNS.labels(outcome=outcome).inc()
        started = status.get("startedAt")
        if started:
            metrics.TURN_SECONDS.observe(max(0.0, time.time() - datetime.fromisoformat(started).timestamp()))
        s = await self.kube.get("sessions", session)
        if s is None:
            return
        st = SessionStatus.model_validate(s.get("status") or {})
        counters = st.counters.model_copy()
        counters.input_tokens += patch["usage"]["inputTokens"]
        counters.output_tokens += patch["usage"]["outputTokens"]
        counters.cost_usd = round(counters.cost_usd + float(p.get("cost_usd") or 0.0), 6)
        spatch: dict[str, Any] = {"lastTurn": turn_name, "counters": counters.dump()}
        if st.current_turn == turn_name:
            spatch["currentTurn"] = None
            if st.phase == "Running":
                spatch["phase"] = "Idle"
        await self.kube.patch_status("sessions", session, spatch)

    async def _conversation_lost(self, session: str, turn: Obj, error: str) -> bool:
        """A CLI killed before it saved its conversation can't resume it: the turn restarts, once, in a new
        conversation instead of failing every turn after it."""
        if not any(m in error for m in LOST_CONVERSATION) or (turn.get("status") or {}).get("restarted"):
            return False
        name = turn["metadata"]["name"]
        s = await self.kube.get("sessions", session)
        lost = ((s or {}).get("status") or {}).get("conversation")
        await self.kube.patch_status(
            "sessions", session, {"conversation": None, "currentTurn": None, "phase": "Idle"}
        )
        await self.kube.patch_status(
            "turns",
            name,
            {
                "phase": "Queued",
                "restarted": True,
                "startedAt": None,
                "run": None,
                "reason": f"the conversation {lost} was lost with its sandbox; the turn restarted in a new one",
            },
        )
        await self.event(session, "conversation_lost", {"conversation": lost, "error": error[:500]}, name)
        return True

    async def _handback(self, session: str, turn_name: str, p: dict[str, Any]) -> None:
        kind = p.get("kind")
        if kind == "result" and isinstance(p.get("result"), dict):
            await self.kube.patch_status("turns", turn_name, {"result": p["result"]})
        elif kind == "ask" and p.get("question"):
            await self.kube.patch_status("turns", turn_name, {"question": str(p["question"])[:4000]})
        elif kind == "artifact" and p.get("name"):
            turn = await self.kube.get("turns", turn_name)
            arts = list(((turn or {}).get("status") or {}).get("artifacts") or [])
            if not any(a.get("name") == p["name"] for a in arts):
                arts.append(
                    {
                        "name": str(p["name"]),
                        "path": str(p.get("path", "")),
                        "size": int(p.get("size") or 0),
                        "sha256": str(p.get("sha256") or ""),
                    }
                )
                await self.kube.patch_status("turns", turn_name, {"artifacts": arts})

    async def _permission(self, session: str, turn_name: str, p: dict[str, Any]) -> None:
        """The turn's approvals policy answers, or a person does (approvals.py)."""
        await self.approvals.on_permission(session, turn_name, p)

    async def _command_result(self, session: str, turn_name: str, p: dict[str, Any]) -> None:
        op = p.get("op")
        if op == "start_turn" and not p.get("ok") and "the sandbox is shutting down" in str(p.get("error")):
            # The sandbox is going away: the turn (a queued steer's, say) runs in the next one, never here.
            turn = await self.kube.get("turns", turn_name)
            if turn and (turn.get("status") or {}).get("phase") == "Running":
                await self.kube.patch_status(
                    "turns", turn_name, {"phase": "Queued", "run": None, "startedAt": None, "policy": None}
                )
                await self.kube.patch_status(
                    "sessions",
                    session,
                    {"phase": "Idle", "currentTurn": None, "sandbox": {"connected": False}},
                )
                self.steering.forget_sent(turn_name)
                await self.event(session, "turn_requeued", {"reason": str(p.get("error"))}, turn_name)
        elif op == "start_turn" and not p.get("ok"):
            # The driver refused to start it (a turn already runs, the harness can't take the policy…).
            turn = await self.kube.get("turns", turn_name)
            if turn and (turn.get("status") or {}).get("phase") == "Running":
                await self.kube.patch_status(
                    "turns",
                    turn_name,
                    {
                        "phase": "Failed",
                        "outcome": "failed",
                        "exitStatus": 1,
                        "finishedAt": iso(),
                        "reason": f"the sandbox refused to start the turn: {p.get('error') or 'no reason given'}",
                    },
                )
                await self.kube.patch_status("sessions", session, {"phase": "Idle", "currentTurn": None})

    # --- turns ------------------------------------------------------------------------------------------
    async def create_turn(
        self,
        session: str,
        message: str,
        *,
        by: str = "",
        from_steer: str | None = None,
        klass: str = "unclassified",
    ) -> str:
        return await create_turn(self.kube, session, message, by=by, from_steer=from_steer, klass=klass)

    async def reconcile_turn(self, turn: Obj) -> None:
        """Delivers what the Turn's spec asks for and its status doesn't show yet (steering.py)."""
        session = turn["spec"].get("session")
        if not session:
            return
        async with self.lock(session):
            await self.steering.reconcile(session, turn["metadata"]["name"])

    # --- sessions ---------------------------------------------------------------------------------------
    async def reconcile_session(self, name: str) -> None:
        async with self.lock(name):
            await self._reconcile_session(name)

    async def _reconcile_session(self, name: str) -> None:
        s = await self.kube.get("sessions", name)
        if s is None or s["metadata"].get("deletionTimestamp"):
            self.locks.pop(name, None)
            return
        spec = s["spec"]
        st = SessionStatus.model_validate(s.get("status") or {})
        if st.phase in ("Failed",):
            return
        if spec.get("stopped"):
            if st.phase != "Stopped":
                await self._stop(name, st)
            return
        if spec.get("forkOf") and st.forked_from is None:
            forked = await self._record_fork(s)
            if forked is None:
                return
            s = forked
            st = SessionStatus.model_validate(s.get("status") or {})
        env_obj = await self.kube.get("environments", spec["environment"])
        if env_obj is None:
            await self.kube.patch_status(
                "sessions",
                name,
                {
                    "phase": "Pending",
                    "reason": "EnvironmentNotFound",
                    "message": f"environment {spec['environment']!r} does not exist",
                },
            )
            return
        env = EnvironmentSpec.model_validate(env_obj["spec"])
        inherited = st.forked_from.policy if st.forked_from else None  # a fork keeps its parent's policy
        policy = spec.get("approvals") or inherited or env.approvals or self.settings.approvals or "auto"
        if await self.approvals.sync_spec_taint(s):
            st.taint.tainted = True
        if st.policy != policy:
            await self.kube.patch_status("sessions", name, {"policy": policy})
            st.policy = policy
        if spec.get("prompt") and st.counters.turns == 0 and not st.current_turn:
            turns = await self.kube.list("turns", label_selector=f"hangar.dev/session={name}")
            if not turns:
                await self.create_turn(name, spec["prompt"], by="session.spec.prompt")
        turns = sorted(
            await self.kube.list("turns", label_selector=f"hangar.dev/session={name}"), key=turn_index
        )
        queued = [t for t in turns if (t.get("status") or {}).get("phase", "Queued") == "Queued"]
        await self._sync_counters(name, st, turns)
        if st.sandbox.pod is None:
            wants = st.counters.sandboxes == 0 or bool(queued)
            if wants:
                await self._start_sandbox(s, st, env)
            return
        if st.sandbox.connected and st.current_turn is None and queued:
            await self._start_turn(s, st, queued[0], policy, env)

    async def _record_fork(self, s: Obj) -> Obj | None:
        """A fork takes, once, what its parent has now: conversation, policy in force and taint (so the
        parent may go on or go away afterwards). None while the parent doesn't exist (the timer retries)."""
        name, parent_name = s["metadata"]["name"], s["spec"]["forkOf"]
        parent = await self.kube.get("sessions", parent_name) if parent_name != name else None
        if parent is None or parent["metadata"].get("deletionTimestamp"):
            msg = f"parent session {parent_name!r} does not exist: a fork starts from an existing session"
            if parent_name == name:
                msg = "a session can't be a fork of itself (spec.forkOf names the session)"
            if (s.get("status") or {}).get("message") != msg:
                await self.kube.patch_status(
                    "sessions", name, {"phase": "Pending", "reason": "ParentNotFound", "message": msg}
                )
            return None
        pst = SessionStatus.model_validate(parent.get("status") or {})
        pspec = parent["spec"]
        policy = pst.policy or pspec.get("approvals") or (pst.forked_from.policy if pst.forked_from else None)
        tainted = pst.taint.tainted or bool(pspec.get("tainted"))
        # A conversation id means nothing to another CLI: a fork to another harness starts a new one.
        same_cli = pspec.get("harness", "claude") == s["spec"].get("harness", "claude")
        conversation = pst.conversation if same_cli else None
        # The taint and the workspace clone go before forkedFrom: a restart in between records the fork
        # again (the clone's create is then a 409), never loses either.
        if tainted:
            why = "; ".join(pst.taint.reasons) or "the session started tainted (spec.tainted)"
            await self.approvals.sync_spec_taint(s, f"forked from {parent_name} (tainted: {why})"[:1000])
        # The clone is asked for now, not at the fork's first sandbox, so the parent's later turns stay out of
        # it (with a WaitForFirstConsumer storage class the volume is still only cut when a pod needs it).
        try:
            pvc = workspace_pvc(s, self.settings, await self._clone_source(name, parent_name))
            await self.kube.core.create_namespaced_persistent_volume_claim(self.kube.namespace, pvc)
        except ApiException as e:
            if e.status != 409:
                raise
        origin = ForkOrigin(
            session=parent_name,
            conversation=conversation,
            policy=policy,
            tainted=tainted,
            at=datetime.now(UTC),
        )
        await self.kube.patch_status(
            "sessions", name, {"forkedFrom": origin.dump(), "conversation": conversation}
        )
        await self.event(
            name,
            "forked",
            {"parent": parent_name, "conversation": conversation, "policy": policy, "tainted": tainted},
        )
        return await self.kube.get("sessions", name)

    async def _sync_counters(self, name: str, st: SessionStatus, turns: list[Obj]) -> None:
        n_turns = len(turns)
        n_steers = sum(len(t["spec"].get("steers", [])) for t in turns)
        n_int = sum(len(t["spec"].get("interrupts", [])) for t in turns)
        c = st.counters
        if (c.turns, c.steers, c.interrupts) != (n_turns, n_steers, n_int):
            c.turns, c.steers, c.interrupts = n_turns, n_steers, n_int
            await self.kube.patch_status("sessions", name, {"counters": c.dump()})

    async def _start_turn(
        self, s: Obj, st: SessionStatus, turn: Obj, policy: str, env: EnvironmentSpec
    ) -> None:
        name = s["metadata"]["name"]
        tname = turn["metadata"]["name"]
        harness = s["spec"].get("harness", "claude")
        run = st.sandbox.run
        assert run is not None
        if policy != "auto" and harness not in LIVE_HARNESSES:
            await self.kube.patch_status(
                "turns",
                tname,
                {
                    "phase": "Failed",
                    "outcome": "failed",
                    "exitStatus": 1,
                    "policy": policy,
                    "finishedAt": iso(),
                    "reason": f"approvals {policy!r} needs a live turn, and {harness} runs one-shot: "
                    "refusing to run with permission checks off",
                },
            )
            await self.event(name, "turn_failed", {"reason": "policy needs a live harness"}, tname)
            return
        await self.kube.patch_status(
            "turns",
            tname,
            {
                "phase": "Running",
                "policy": policy,
                "run": run,
                "startedAt": iso(),
                "taint": st.taint.dump(),
            },
        )
        await self.kube.patch_status("sessions", name, {"phase": "Running", "currentTurn": tname})
        await self.gateway.send(
            run,
            "start_turn",
            {
                "turn": tname,
                "message": turn["spec"]["message"],
                "model": s["spec"].get("model"),
                "conversation": st.conversation,
                # A fork's first turn: the CLI copies the parent's conversation rather than continue it.
                "fork": bool(
                    st.conversation and st.forked_from and st.conversation == st.forked_from.conversation
                ),
                "approvals": policy,
                "tainted": st.taint.tainted or bool(s["spec"].get("tainted")),
                "extra": env.harness_options,
            },
            command_id=f"start-{tname}",
        )
        await self.event(name, "turn_requested", {"message": turn["spec"]["message"][:2000]}, tname)
        await self.steering.reconcile(name, tname)  # steers or interrupts written while it was queued

    async def _start_sandbox(self, s: Obj, st: SessionStatus, env: EnvironmentSpec) -> None:
        name = s["metadata"]["name"]
        async with self.slot_lock:
            sessions = await self.kube.list("sessions")
            in_use = sum(
                1
                for x in sessions
                if (x.get("status") or {}).get("sandbox", {}).get("pod") and x["metadata"]["name"] != name
            )
            if in_use >= self.settings.max_sandboxes:
                msg = f"waiting for a sandbox slot ({in_use} of {self.settings.max_sandboxes} in use)"
                if st.message != msg:
                    await self.kube.patch_status(
                        "sessions", name, {"phase": "Pending", "reason": "NoSandboxSlot", "message": msg}
                    )
                return
            n = st.counters.sandboxes + 1
            run = f"{name}-r{n}"
            secret, key = run_key_secret(s, run)
            core = self.kube.core
            ns = self.kube.namespace
            try:
                await core.create_namespaced_secret(ns, secret)
                self.run_keys[run] = key.encode()
            except ApiException as e:
                if e.status != 409:  # an earlier attempt made it: its key is read on the driver's hello
                    raise
            try:
                # A fork's volume exists already: it was cloned when the fork was recorded.
                await core.create_namespaced_persistent_volume_claim(ns, workspace_pvc(s, self.settings))
            except ApiException as e:
                if e.status != 409:
                    raise
            pod = sandbox_pod(s, env, run, run, self.settings, self.gateway_address())
            try:
                await core.create_namespaced_pod(ns, pod)
            except ApiException as e:
                if e.status != 409:
                    raise
            counters = st.counters.model_copy()
            counters.sandboxes = n
            await self.kube.patch_status(
                "sessions",
                name,
                {
                    "phase": "Starting",
                    "reason": "",
                    "message": f"starting sandbox {run}",
                    "sandbox": {"pod": run, "run": run, "connected": False, "startedAt": iso()},
                    "counters": counters.dump(),
                },
            )
            metrics.SANDBOXES_STARTED.inc()
        await self.event(name, "sandbox_starting", {"pod": run})

    async def _clone_source(self, name: str, parent: str) -> Obj | None:
        """The parent's workspace PVC, which the fork's volume is a clone of; None when the parent has none
        (it never ran, or is gone): the fork then starts with an empty workspace, and a new conversation if
        its CLI can't find the old one."""
        try:
            src = await self.kube.core.read_namespaced_persistent_volume_claim(
                pvc_name(parent), self.kube.namespace
            )
        except ApiException as e:
            if e.status != 404:
                raise
            why = f"session {parent!r} has no workspace volume to clone: the fork starts with an empty one"
            await self.event(name, "fork_workspace_empty", {"reason": why})
            return None
        out: Obj = self.kube.api.sanitize_for_serialization(src)
        return out

    async def _release_sandbox(self, name: str, why: str, keep_phase: str = "Idle") -> None:
        """Deletes the sandbox pod and its run key; the workspace volume (and the conversation) stays."""
        s = await self.kube.get("sessions", name)
        if s is None:
            return
        sb = (s.get("status") or {}).get("sandbox") or {}
        pod, run = sb.get("pod"), sb.get("run")
        core, ns = self.kube.core, self.kube.namespace
        if pod:
            try:
                await core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        if run:
            self.run_keys.pop(run, None)
            try:
                await core.delete_namespaced_secret(f"{run}-key", ns)
            except ApiException as e:
                if e.status != 404:
                    raise
        await self.kube.patch_status(
            "sessions",
            name,
            {
                "phase": keep_phase,
                "message": why,
                "currentTurn": None,
                "sandbox": {"pod": None, "run": None, "connected": False, "startedAt": None},
            },
        )
        await self.event(name, "sandbox_released", {"pod": pod, "reason": why})
        if run:
            await self.approvals.withdraw_run(name, run, f"the sandbox was released: {why}")

    async def _stop(self, name: str, st: SessionStatus) -> None:
        if st.current_turn:
            turn = await self.kube.get("turns", st.current_turn)
            if turn and (turn.get("status") or {}).get("phase") in ("Running", "NeedsInput"):
                await self.kube.patch_status(
                    "turns",
                    st.current_turn,
                    {
                        "phase": "Interrupted",
                        "outcome": "interrupted",
                        "exitStatus": 130,
                        "reason": "the session was stopped",
                        "finishedAt": iso(),
                    },
                )
                await self.steering.after_end(name, st.current_turn, lost="the session was stopped")
        await self._release_sandbox(name, "stopped", keep_phase="Stopped")

    async def pod_gone(self, pod: Obj, why: str) -> None:
        """The sandbox pod was deleted or ended: fail the running turn, free the slot; the next turn restarts."""
        labels = pod["metadata"].get("labels") or {}
        session = labels.get("hangar.dev/session")
        run = labels.get("hangar.dev/run")
        if not session or not run:
            return
        async with self.lock(session):
            s = await self.kube.get("sessions", session)
            if s is None:
                return
            st = SessionStatus.model_validate(s.get("status") or {})
            if st.sandbox.run != run:
                return
            lost = f"sandbox pod {pod['metadata']['name']} {why}"
            for turn in await self.kube.list("turns", label_selector=f"hangar.dev/session={session}"):
                tstatus = turn.get("status") or {}
                if tstatus.get("run") != run:
                    continue
                tname = turn["metadata"]["name"]
                if tstatus.get("phase") == "Running" and not await self.db.has_event(
                    f"session/{session}", tname, "turn_started"
                ):
                    # start_turn went to a sandbox on its way out (the turn before it ended as the pod went,
                    # and this one was next in line, e.g. a queued steer): the agent never had it. Run it in
                    # the next sandbox rather than fail it.
                    await self.kube.patch_status(
                        "turns",
                        tname,
                        {"phase": "Queued", "run": None, "startedAt": None, "policy": None, "reason": ""},
                    )
                    await self.event(
                        session, "turn_requeued", {"reason": f"{lost} before the turn started"}, tname
                    )
                    self.steering.forget_sent(tname)  # its requests go to the next sandbox's driver
                    continue
                if tstatus.get("phase") in ("Running", "NeedsInput"):
                    await self.kube.patch_status(
                        "turns",
                        tname,
                        {
                            "phase": "Failed",
                            "outcome": "failed",
                            "exitStatus": 1,
                            "finishedAt": iso(),
                            "reason": lost,
                        },
                    )
                    metrics.TURNS.labels(outcome="failed").inc()
                elif tstatus.get("phase") == "Failed" and lost not in tstatus.get("reason", ""):
                    # The driver saw its CLI die as the pod went: say why it died.
                    reason = f"{lost}: {tstatus.get('reason', '')}".rstrip(": ")
                    await self.kube.patch_status("turns", tname, {"reason": reason[:2000]})
                await self.steering.after_end(session, tname, lost=lost)
            if st.phase == "Starting" and why != "was deleted":
                await self.approvals.sandbox_never_connected(session, pod, lost)
            await self._release_sandbox(session, f"sandbox pod {pod['metadata']['name']} {why}")
        await self.reconcile_session(session)

    async def check_sandbox(self, name: str) -> None:
        """After a restart, or periodically: a sandbox whose pod is gone is released."""
        s = await self.kube.get("sessions", name)
        st = SessionStatus.model_validate(((s or {}).get("status")) or {})
        if not st.sandbox.pod:
            return
        try:
            pod = await self.kube.core.read_namespaced_pod(st.sandbox.pod, self.kube.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            await self.pod_gone(
                {
                    "metadata": {
                        "name": st.sandbox.pod,
                        "labels": {"hangar.dev/session": name, "hangar.dev/run": st.sandbox.run},
                    }
                },
                "was deleted",
            )
            return
        phase = pod.status.phase if pod.status else None
        if phase in ("Failed", "Succeeded"):
            await self.pod_gone(
                {"metadata": {"name": st.sandbox.pod, "labels": pod.metadata.labels or {}}},
                f"ended ({phase})",
            )
        elif st.phase == "Starting" and st.sandbox.started_at is not None:
            if time.time() - st.sandbox.started_at.timestamp() > self.settings.connect_timeout:
                await self.pod_gone(
                    {"metadata": {"name": st.sandbox.pod, "labels": pod.metadata.labels or {}}},
                    f"did not connect within {self.settings.connect_timeout:.0f}s",
                )


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


Callback = Callable[..., Awaitable[None]]
__all__ = ["Runtime", "new_id", "pvc_name", "session_of_run"]
