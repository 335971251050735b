"""Tool approvals and taint: the operator's side of the policy engine (``hangar.approvals``).

The driver reports each permission prompt of the agent's CLI as a ``permission_request`` event; the
Runtime hands it here (under the session's lock). What happens depends on the turn's policy:

- ``auto``: allowed at once, nothing recorded (the CLI runs with its checks off anyway).
- ``deny-risky``: :func:`hangar.approvals.decide` answers at once. A denial, like every hand-back
  exemption, is recorded as an ``Approval`` resolved by ``policy``; a call no rule flags is allowed and
  shows only as an ``approval_decided`` event and in the metrics (an Approval per harmless call would
  flood the apiserver).
- ``ask`` (and ``governed`` for what its rules flag): an ``Approval`` is created, pending, with a deadline;
  it shows in the session's ``status.pendingApprovals`` and as an ``approval_request`` event. A decision
  written to ``spec.decision`` (REST, CLI, ``kubectl patch``) reaches :meth:`Approvals.reconcile` through
  the kopf handler and is delivered to the driver (command id ``answer-<approval>``, so a re-send after an
  operator restart is executed once). Unanswered at the deadline, it is denied (``resolvedBy: timeout``).

Every move of an Approval out of ``Pending`` is a compare-and-set on its resourceVersion, and the REST
API's decision is one too, so an approval is decided exactly once: by a person, the policy, the timeout,
or withdrawn when the CLI takes its prompt back (an interrupt, the turn's end, the sandbox gone).

Taint: a web tool's result (WebFetch/WebSearch, Codex ``web_search``) or an untrusted MCP server's
result taints the turn and the session (sticky: nothing clears it), the driver is told with the signed
``taint`` command, and the policy engine counts pushes, network calls and MCP write tools as risky from
then on. A session created with ``spec.tainted`` starts tainted, and so does a fork of a tainted session.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hangar.approvals import Policy, ToolCall, Verdict, args_hash, canonical_json, decide, display_command
from hangar.approvals import shell_command as call_command
from hangar.kube import ApiException, Obj, owner_ref
from hangar.models import GROUP, VERSION
from hangar.models.environment import EnvironmentSpec

from . import metrics

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("hangar.operator.approvals")

AGENT_HOME = "/home/agent"
# Claude Code's and Codex's web tools: their results are untrusted content.
WEB_TOOLS = frozenset({"WebFetch", "WebSearch", "web_search", "web_fetch"})
DONE = ("Allowed", "Denied", "Expired", "Withdrawn")
MAX_TAINT_REASONS = 20
# Events the approvals side wants to see besides permission_request (which the Runtime routes itself).
EVENTS = frozenset({"permission_cancelled", "tool_use", "tool_result", "command_result", "turn_ended"})


def iso(dt: datetime | None = None) -> str:
    dt = dt or datetime.now(UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def approval_name(run: str, request_id: str) -> str:
    """``ap-<12 hex>``, the same for the same prompt: a re-applied driver event finds its Approval."""
    return "ap-" + hashlib.sha256(f"{run}\0{request_id}".encode()).hexdigest()[:12]


def shown_command(tool: str, tool_input: dict[str, Any], command: str | None) -> str:
    """What a person is shown: the shell command, else the tool and its input; at most 2,000 chars with
    both ends kept and the cut marked."""
    if command:
        return display_command(command)
    return display_command(f"{tool} {canonical_json(tool_input)}")


def mcp_server_of(tool: str) -> str | None:
    """The MCP server of a tool name: Claude ``mcp__<server>__<tool>``, Codex ``mcp:<server>.<tool>``."""
    if tool.startswith("mcp__"):
        server = tool[5:].split("__", 1)[0]
        return server or None
    if tool.startswith("mcp:"):
        server = tool[4:].split(".", 1)[0]
        return server or None
    return None


# The CLIs' own tools that read an MCP server's resource ({"server": …, "uri": …}).
MCP_RESOURCE_TOOLS = frozenset({"ReadMcpResourceTool", "read_mcp_resource"})


def resource_reader(tool: str, tool_input: Any) -> str | None:
    """A CLI tool reading an MCP server's resource, named as that server's tool (``mcp__<server>__<tool>``),
    so that its result taints like the server's own tools; None for any other tool."""
    if tool not in MCP_RESOURCE_TOOLS or not isinstance(tool_input, dict):
        return None
    server = tool_input.get("server")
    return f"mcp__{server}__{tool}" if isinstance(server, str) and server else None


def untrusted_source(tool: str, env: EnvironmentSpec | None) -> str | None:
    """Why reading this tool's result taints the turn, or None."""
    if tool in WEB_TOOLS:
        return f"read web content ({tool})"
    server = mcp_server_of(tool)
    if server is None:
        return None
    trust = "untrusted"
    for name, entry in (env.mcp if env else {}).items():
        spelled = {name, "".join(c if c.isalnum() or c in "_-" else "_" for c in name)}
        if server in spelled:
            trust = entry.trust
            break
    if trust == "trusted":
        return None
    return f"read a result of untrusted MCP server {server} ({tool})"


class Approvals:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.timers: dict[str, asyncio.Task[None]] = {}
        # (run, tool id) -> tool name, to know which tool a tool_result belongs to.
        self.tools: dict[tuple[str, str], str] = {}
        # Approvals whose answer this process sent: only the others are re-sent (after a restart).
        self.sent: set[str] = set()

    @property
    def kube(self) -> Any:
        return self.rt.kube

    def stop(self) -> None:
        for t in self.timers.values():
            t.cancel()
        self.timers.clear()

    # --- driver events (called by the Runtime under the session's lock) -------------------------------
    async def on_event(self, session: str, run: str, name: str, p: dict[str, Any], turn: str | None) -> None:
        if name == "permission_cancelled" and turn:
            rid = str(p.get("request_id") or "")
            if rid:
                await self._withdraw_one(session, approval_name(run, rid), "the agent withdrew the request")
        elif name == "tool_use":
            tid, tool = str(p.get("id") or ""), str(p.get("tool") or "")
            if tid and tool:
                self.tools[(run, tid)] = resource_reader(tool, p.get("input")) or tool
        elif name == "tool_result" and turn:
            tool = self.tools.pop((run, str(p.get("id") or "")), "")
            if tool and not p.get("is_error") and (tool in WEB_TOOLS or mcp_server_of(tool)):
                env = await self._environment(session)
                why = untrusted_source(tool, env)
                if why:
                    await self.taint(session, turn, why)
        elif name == "command_result" and p.get("op") == "answer":
            cid = str(p.get("command_id") or "")
            if cid.startswith("answer-ap-") and p.get("ok"):
                await self._delivered(cid[len("answer-") :])
        elif name == "turn_ended" and turn:
            await self.withdraw_turn(session, turn, "the turn ended")
            for key in [k for k in self.tools if k[0] == run]:
                del self.tools[key]

    async def on_permission(self, session: str, turn_name: str, p: dict[str, Any]) -> None:
        started = time.perf_counter()
        turn = await self.kube.get("turns", turn_name)
        s = await self.kube.get("sessions", session)
        if turn is None or s is None:
            return
        tstatus = turn.get("status") or {}
        sstatus = s.get("status") or {}
        run = (sstatus.get("sandbox") or {}).get("run")
        request_id = str(p.get("request_id") or "")
        if not run or not request_id:
            return
        policy: Policy = tstatus.get("policy") or "auto"
        if policy == "auto":
            await self._answer(run, approval_name(run, request_id), request_id, "allow", None)
            return
        tool = str(p.get("tool") or "")
        raw_input = p.get("input")
        tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
        raw_command = p.get("command")
        tainted = bool((tstatus.get("taint") or {}).get("tainted")) or bool(
            (sstatus.get("taint") or {}).get("tainted")
        )
        env = await self._environment_of(s)
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
        name = approval_name(run, request_id)
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
        if verdict.decision in ("allow", "deny"):
            # hangar answers at once: the agent waits on this, the records come after.
            decision = verdict.decision
            message = verdict.reason if decision == "deny" else None
            await self._answer(run, name, request_id, decision, message)
            metrics.APPROVAL_DECISION_SECONDS.observe(time.perf_counter() - started)
            keep = verdict.rule == "handback" or decision == "deny"
            if keep:
                await self._record_resolved(s, run, name, record, verdict)
            metrics.APPROVALS.labels(policy=policy, outcome=decision, resolver="policy").inc()
            await self.rt.event(
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
        await self._request(s, env, run, name, record, verdict)

    # --- records ----------------------------------------------------------------------------------------
    def _body(self, s: Obj, run: str, name: str, spec: dict[str, Any]) -> Obj:
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Approval",
            "metadata": {
                "name": name,
                "labels": {
                    "hangar.dev/session": spec["session"],
                    "hangar.dev/turn": spec["turn"],
                    "hangar.dev/run": run,
                    "app.kubernetes.io/part-of": "hangar",
                },
                "ownerReferences": [owner_ref(s)],
            },
            "spec": spec,
        }

    async def _create(self, s: Obj, run: str, name: str, spec: dict[str, Any]) -> Obj:
        try:
            out: Obj = await self.kube.create("approvals", self._body(s, run, name, spec))
            return out
        except ApiException as e:
            if e.status != 409:
                raise
            existing: Obj | None = await self.kube.get("approvals", name)
            if existing is None:
                raise
            return existing

    async def _record_resolved(self, s: Obj, run: str, name: str, spec: dict[str, Any], v: Verdict) -> None:
        obj = await self._create(s, run, name, spec)
        if (obj.get("status") or {}).get("phase"):
            return
        now = iso()
        await self.kube.patch_status(
            "approvals",
            name,
            {
                "phase": "Allowed" if v.decision == "allow" else "Denied",
                "decision": v.decision,
                "by": "hangar",
                "message": v.reason,
                "resolvedBy": "policy",
                "requestedAt": now,
                "decidedAt": now,
                "reason": v.reason,
            },
        )
        await self._count(s["metadata"]["name"])

    async def _request(
        self, s: Obj, env: EnvironmentSpec | None, run: str, name: str, spec: dict[str, Any], v: Verdict
    ) -> None:
        session = s["metadata"]["name"]
        obj = await self._create(s, run, name, spec)
        status = obj.get("status") or {}
        if status.get("phase"):
            return  # the event was applied before (an operator restart): nothing to do twice
        timeout = (env.approval_timeout_seconds if env else None) or self.rt.settings.approval_timeout
        now = datetime.now(UTC)
        deadline = now + timedelta(seconds=timeout)
        await self.kube.patch_status(
            "approvals",
            name,
            {"phase": "Pending", "requestedAt": iso(now), "deadline": iso(deadline), "reason": v.reason},
        )
        await self._set_pending(
            session,
            add={"id": name, "turn": spec["turn"], "tool": spec["tool"], "command": spec["command"]},
            count=True,
        )
        await self.rt.event(
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
        self._arm(name, session, deadline)

    async def _count(self, session: str) -> None:
        s = await self.kube.get("sessions", session)
        counters = dict(((s or {}).get("status") or {}).get("counters") or {})
        counters["approvals"] = int(counters.get("approvals") or 0) + 1
        await self.kube.patch_status("sessions", session, {"counters": counters})

    async def _set_pending(
        self, session: str, add: dict[str, Any] | None = None, drop: str | None = None, count: bool = False
    ) -> None:
        """Add to or drop from the session's pendingApprovals (and count a new approval), in one patch."""
        s = await self.kube.get("sessions", session)
        if s is None:
            return
        status = s.get("status") or {}
        pending = list(status.get("pendingApprovals") or [])
        before = list(pending)
        if drop:
            pending = [x for x in pending if x.get("id") != drop]
        if add and not any(x.get("id") == add["id"] for x in pending):
            pending.append(add)
        patch: dict[str, Any] = {}
        if pending != before:
            patch["pendingApprovals"] = pending
        if count:
            counters = dict(status.get("counters") or {})
            counters["approvals"] = int(counters.get("approvals") or 0) + 1
            patch["counters"] = counters
        if patch:
            await self.kube.patch_status("sessions", session, patch)

    async def _cas_status(self, obj: Obj, status: dict[str, Any]) -> bool:
        """Patch the Approval's status only if nothing changed it since ``obj`` was read."""
        try:
            await self.kube.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self.kube.namespace,
                "approvals",
                obj["metadata"]["name"],
                {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status},
                _content_type="application/merge-patch+json",
            )
            return True
        except ApiException as e:
            if e.status in (404, 409):
                return False
            raise

    async def _answer(self, run: str, name: str, request_id: str, decision: str, message: str | None) -> None:
        body: dict[str, Any] = {"request_id": request_id, "decision": decision}
        if message:
            body["message"] = message
        self.sent.add(name)
        await self.rt.gateway.send(run, "answer", body, command_id=f"answer-{name}")

    async def _delivered(self, name: str) -> None:
        self.sent.discard(name)
        obj = await self.kube.get("approvals", name)
        status = (obj or {}).get("status") or {}
        if (
            obj is None
            or status.get("deliveredAt")
            or status.get("phase") not in ("Allowed", "Denied", "Expired")
        ):
            return
        await self.kube.patch_status("approvals", name, {"deliveredAt": iso()})

    # --- decisions ----------------------------------------------------------------------------------------
    async def reconcile(self, obj: Obj) -> None:
        """kopf's entry (create, update of spec, resume): deliver a decision, expire, or re-arm the timer."""
        session = (obj.get("spec") or {}).get("session")
        if not session:
            return
        name = obj["metadata"]["name"]
        async with self.rt.lock(session):
            await self._reconcile(session, name)

    async def _reconcile(self, session: str, name: str) -> None:
        for _ in range(5):
            obj = await self.kube.get("approvals", name)
            if obj is None:
                self._disarm(name)
                return
            status = obj.get("status") or {}
            spec = obj.get("spec") or {}
            phase = status.get("phase")
            if phase is None:
                return  # not (yet) one the operator requested: nothing to deliver
            if phase in DONE:
                self._disarm(name)
                if phase in ("Allowed", "Denied", "Expired") and not status.get("deliveredAt"):
                    await self._resend(obj)
                return
            # Pending.
            gone = await self._gone_reason(session, obj)
            if gone:
                if await self._withdraw(obj, gone):
                    return
                continue
            decision = spec.get("decision")
            if decision in ("allow", "deny", "allow_always"):
                by = str(spec.get("decidedBy") or _manager(obj) or "unknown")
                if await self._decide(obj, decision, by, spec.get("message"), "person"):
                    return
                continue
            deadline = parse_time(status.get("deadline"))
            if deadline is not None and deadline <= datetime.now(UTC):
                if await self._expire(obj):
                    return
                continue
            if deadline is not None:
                self._arm(name, session, deadline)
            return

    async def _gone_reason(self, session: str, obj: Obj) -> str | None:
        """Why a pending approval can no longer be answered (its sandbox or turn is gone), or None."""
        run = (obj["metadata"].get("labels") or {}).get("hangar.dev/run")
        s = await self.kube.get("sessions", session)
        if s is None:
            return "the session is gone"
        if ((s.get("status") or {}).get("sandbox") or {}).get("run") != run:
            return "the sandbox that asked is gone"
        # A turn that ended withdrew its approvals when its turn_ended was applied.
        return None

    async def _decide(self, obj: Obj, decision: str, by: str, message: Any, resolver: str) -> bool:
        spec = obj["spec"]
        name = obj["metadata"]["name"]
        session = spec["session"]
        text = str(message) if isinstance(message, str) and message else None
        now = datetime.now(UTC)
        status: dict[str, Any] = {
            "phase": "Denied" if decision == "deny" else "Allowed",
            "decision": decision,
            "by": by,
            "resolvedBy": resolver,
            "decidedAt": iso(now),
        }
        if text:
            status["message"] = text
        if not await self._cas_status(obj, status):
            return False
        run = (obj["metadata"].get("labels") or {}).get("hangar.dev/run", "")
        agent_message = None
        if decision == "deny":
            agent_message = text or f"Denied by {by} (approvals: {spec.get('policy')})"
        await self._answer(run, name, spec["requestId"], decision, agent_message)
        await self._resolved(session, obj, decision, resolver, now)
        return True

    async def _expire(self, obj: Obj) -> bool:
        spec = obj["spec"]
        name = obj["metadata"]["name"]
        session = spec["session"]
        requested = parse_time((obj.get("status") or {}).get("requestedAt"))
        deadline = parse_time((obj.get("status") or {}).get("deadline"))
        waited = int((deadline - requested).total_seconds()) if deadline and requested else 0
        text = f"Denied by hangar: no decision within {waited} s (approvals: {spec.get('policy')})"
        now = datetime.now(UTC)
        status = {
            "phase": "Expired",
            "decision": "deny",
            "by": "hangar",
            "message": text,
            "resolvedBy": "timeout",
            "decidedAt": iso(now),
        }
        if not await self._cas_status(obj, status):
            return False
        run = (obj["metadata"].get("labels") or {}).get("hangar.dev/run", "")
        await self._answer(run, name, spec["requestId"], "deny", text)
        await self._resolved(session, obj, "deny", "timeout", now)
        return True

    async def _resend(self, obj: Obj) -> None:
        """A decision recorded but not confirmed by the driver (an operator restart): send it again, with the
        same command id, so the driver executes it once."""
        spec, status = obj["spec"], obj.get("status") or {}
        if obj["metadata"]["name"] in self.sent:
            return
        labels = obj["metadata"].get("labels") or {}
        run = labels.get("hangar.dev/run", "")
        s = await self.kube.get("sessions", spec["session"])
        if not run or ((s or {}).get("status") or {}).get("sandbox", {}).get("run") != run:
            return
        decision = status.get("decision") or "deny"
        message = status.get("message") if decision == "deny" else None
        await self._answer(run, obj["metadata"]["name"], spec["requestId"], decision, message)

    async def _resolved(self, session: str, obj: Obj, decision: str, resolver: str, at: datetime) -> None:
        name = obj["metadata"]["name"]
        spec = obj["spec"]
        self._disarm(name)
        await self._set_pending(session, drop=name)
        metrics.APPROVALS.labels(policy=spec.get("policy", ""), outcome=decision, resolver=resolver).inc()
        requested = parse_time((obj.get("status") or {}).get("requestedAt"))
        if requested is not None:
            metrics.APPROVAL_PENDING_SECONDS.labels(resolver=resolver).observe(
                max(0.0, (at - requested).total_seconds())
            )
        status = obj.get("status") or {}
        await self.rt.event(
            session,
            "approval_decided",
            {
                "approval": name,
                "tool": spec.get("tool"),
                "command": spec.get("command"),
                "decision": decision,
                "resolved_by": resolver,
                "by": "hangar"
                if resolver != "person"
                else (spec.get("decidedBy") or _manager(obj) or "unknown"),
                "message": spec.get("message") if resolver == "person" else status.get("message"),
            },
            spec.get("turn"),
        )

    # --- withdrawal ---------------------------------------------------------------------------------------
    async def _withdraw(self, obj: Obj, why: str) -> bool:
        if not await self._cas_status(obj, {"phase": "Withdrawn", "reason": why, "decidedAt": iso()}):
            return False
        name = obj["metadata"]["name"]
        spec = obj["spec"]
        self._disarm(name)
        await self._set_pending(spec["session"], drop=name)
        metrics.APPROVALS.labels(policy=spec.get("policy", ""), outcome="withdrawn", resolver="none").inc()
        await self.rt.event(
            spec["session"], "approval_withdrawn", {"approval": name, "reason": why}, spec.get("turn")
        )
        return True

    async def _withdraw_one(self, session: str, name: str, why: str) -> None:
        for _ in range(5):
            obj = await self.kube.get("approvals", name)
            if obj is None or (obj.get("status") or {}).get("phase") != "Pending":
                return
            if await self._withdraw(obj, why):
                return

    async def withdraw_turn(self, session: str, turn: str, why: str) -> None:
        """Every approval of ``turn`` still pending is withdrawn (the turn ended, the sandbox went)."""
        for obj in await self.kube.list("approvals", label_selector=f"hangar.dev/turn={turn}"):
            if (obj.get("status") or {}).get("phase") == "Pending":
                await self._withdraw_one(session, obj["metadata"]["name"], why)

    async def withdraw_run(self, session: str, run: str, why: str) -> None:
        """Every approval the sandbox ``run`` asked for and still pending is withdrawn (the sandbox went)."""
        for obj in await self.kube.list("approvals", label_selector=f"hangar.dev/run={run}"):
            if (obj.get("status") or {}).get("phase") == "Pending":
                await self._withdraw_one(session, obj["metadata"]["name"], why)

    # --- timers -------------------------------------------------------------------------------------------
    def _arm(self, name: str, session: str, deadline: datetime) -> None:
        if name in self.timers and not self.timers[name].done():
            return
        self.timers[name] = asyncio.create_task(self._timer(name, session, deadline))

    def _disarm(self, name: str) -> None:
        task = self.timers.pop(name, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _timer(self, name: str, session: str, deadline: datetime) -> None:
        delay = (deadline - datetime.now(UTC)).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)
        self.timers.pop(name, None)
        try:
            async with self.rt.lock(session):
                await self._reconcile(session, name)
        except Exception:
            log.exception("expiring approval %s failed", name)

    # --- taint --------------------------------------------------------------------------------------------
    async def taint(self, session: str, turn: str | None, reason: str) -> None:
        """Taint the session and the turn (sticky) and tell the driver. Caller holds the session's lock."""
        s = await self.kube.get("sessions", session)
        if s is None:
            return
        now = iso()
        st = (s.get("status") or {}).get("taint") or {}
        was = bool(st.get("tainted"))
        reasons = list(st.get("reasons") or [])
        if reason not in reasons and len(reasons) < MAX_TAINT_REASONS:
            reasons.append(reason)
        if not was or reasons != list(st.get("reasons") or []):
            await self.kube.patch_status(
                "sessions",
                session,
                {"taint": {"tainted": True, "reasons": reasons, "since": st.get("since") or now}},
            )
        if turn:
            t = await self.kube.get("turns", turn)
            if t is not None:
                tt = (t.get("status") or {}).get("taint") or {}
                treasons = list(tt.get("reasons") or [])
                if not tt.get("tainted") or reason not in treasons:
                    if reason not in treasons and len(treasons) < MAX_TAINT_REASONS:
                        treasons.append(reason)
                    await self.kube.patch_status(
                        "turns",
                        turn,
                        {"taint": {"tainted": True, "reasons": treasons, "since": tt.get("since") or now}},
                    )
        run = ((s.get("status") or {}).get("sandbox") or {}).get("run")
        if run and not was:
            await self.rt.gateway.send(run, "taint", {}, command_id=f"taint-{run}")
        if not was:
            metrics.TAINTED.inc()
            await self.rt.event(session, "taint", {"reason": reason}, turn)

    async def sync_spec_taint(self, s: Obj, forked: str | None = None) -> bool:
        """``spec.tainted``, or ``forked`` (why: a fork of a tainted session): the session starts tainted.
        True when the status was changed now."""
        st = (s.get("status") or {}).get("taint") or {}
        reasons = ["the session started tainted (spec.tainted)"] if s["spec"].get("tainted") else []
        reasons += [forked] if forked else []
        if not reasons or st.get("tainted"):
            return False
        await self.kube.patch_status(
            "sessions",
            s["metadata"]["name"],
            {"taint": {"tainted": True, "reasons": reasons, "since": iso()}},
        )
        metrics.TAINTED.inc()
        return True

    async def sandbox_never_connected(self, session: str, pod: Obj, lost: str) -> None:
        """A sandbox whose driver never connected can run no turn, live or not: fail the first queued turn
        with why, instead of starting sandbox after sandbox for it. The usual cause is an image without
        python3 3.8+ (the driver's interpreter): the container can't start, or the driver exits at once."""
        detail = ""
        for cs in ((pod.get("status") or {}).get("containerStatuses")) or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if cs.get("name") == "sandbox" and term:
                detail = f" (exit {term.get('exitCode')}"
                detail += f": {term['message']})" if term.get("message") else ")"
        turns = await self.kube.list("turns", label_selector=f"hangar.dev/session={session}")
        queued = sorted(
            (t for t in turns if (t.get("status") or {}).get("phase", "Queued") == "Queued"),
            key=lambda t: int(t["spec"].get("index", 0)),
        )
        if not queued:
            return
        name = queued[0]["metadata"]["name"]
        reason = (
            f"the sandbox never connected: {lost}{detail}. hangar's driver runs on the environment image's "
            "python3, which must be 3.8 or later, with ctypes"
        )
        await self.kube.patch_status(
            "turns",
            name,
            {
                "phase": "Failed",
                "outcome": "failed",
                "exitStatus": 1,
                "finishedAt": iso(),
                "reason": reason[:2000],
            },
        )
        metrics.TURNS.labels(outcome="failed").inc()
        await self.rt.event(session, "turn_failed", {"reason": reason[:2000]}, name)

    async def _environment(self, session: str) -> EnvironmentSpec | None:
        return await self._environment_of(await self.kube.get("sessions", session))

    async def _environment_of(self, s: Obj | None) -> EnvironmentSpec | None:
        env_name = ((s or {}).get("spec") or {}).get("environment")
        if not env_name:
            return None
        env = await self.kube.get("environments", env_name)
        return EnvironmentSpec.model_validate(env["spec"]) if env else None


def _manager(obj: Obj) -> str | None:
    """Who set spec.decision when the writer didn't say (kubectl patch): the field manager."""
    for entry in obj["metadata"].get("managedFields") or []:
        fields = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:decision" in fields and entry.get("manager"):
            return f"{entry['manager']} (field manager)"
    return None
