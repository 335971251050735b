"""The MCP tools. Each is a thin layer over the REST layer's functions (``sessions``, ``jobs``, ``steering``,
``approvals``, ``views``): the same resource patches and creates, the same refusals (as tool errors, with
the reason) and the same audit entries."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import InputRequiredResult, ToolAnnotations
from pydantic import Field

from hangar.models.base import NAME_MAX, NAME_PATTERN, ApprovalPolicy, Harness
from hangar.models.job import JOB_NAME_MAX
from hangar.models.limits import MESSAGE_MAX, bounded

from .. import approvals as ap
from .. import deps, job_approvals, job_attempts, job_release, job_steering, jobs, sessions, steering
from ..auth import Caller
from ..views import job_view, session_view
from ..watch_cache import api_cache_of
from . import common
from .auth import TokensVerifier, acting, mcp_caller
from .common import Hub, refusals, sessions_only
from .waiting import wait_for_turn as wait_loop

Ctx = Context[Any, Any]
# The same rules as REST's bodies (hangar_api.sessions, .jobs, .approvals), in the tools' input schemas, so
# a client sees them before it calls; strict: a "10" is not an integer, nor "true" a boolean.
LABEL = "a DNS label: lowercase letters, digits and '-', starting with a letter"
Ref = Annotated[
    str,
    Field(
        min_length=1,
        max_length=NAME_MAX,
        pattern=NAME_PATTERN,
        description=f"A job id or a session name ({LABEL})",
    ),
]
SessionName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=NAME_MAX,
        pattern=NAME_PATTERN,
        description=f"The session's name ({LABEL}, at most {NAME_MAX} characters)",
    ),
]
JobId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=JOB_NAME_MAX,
        pattern=NAME_PATTERN,
        description=f"The job's id ({LABEL}, at most {JOB_NAME_MAX} characters)",
    ),
]
# At least one character that isn't white space: a blank message tells the agent nothing.
NOT_BLANK = r"\S"
Message = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MESSAGE_MAX,
        pattern=NOT_BLANK,
        description="What the agent is told (not blank)",
    ),
    bounded(MESSAGE_MAX),
]
ApprovalId = Annotated[str, Field(pattern=r"^ap-[0-9a-f]{12}$", description="The approval's id, ap-<12 hex>")]
Decision = Literal["allow", "deny", "allow_always"]
Timeout = Annotated[
    int, Field(strict=True, ge=1, le=600, description="Seconds to wait, at most 600 (10 minutes)")
]
Flag = Annotated[bool, Field(strict=True)]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def register(server: MCPServer[Any], hub: Hub, verifier: TokensVerifier) -> None:
    def caller(ctx: Ctx) -> Caller:
        return mcp_caller(verifier, ctx)

    @server.tool(annotations=READ)
    async def get_session(name: SessionName, ctx: Ctx) -> dict[str, Any]:
        """A session with its turns (phase, outcome, summary, result, question) and the tool approvals it
        waits on (pending_approvals), as GET /api/sessions/{name} answers."""
        who = caller(ctx)
        s = await common.get_session(hub, who, name)
        pending = await ap.waiting_on(hub.kube, [name], api_cache_of(hub.state))
        return session_view(s, await deps.session_turns(hub.kube, name), pending)

    @server.tool(annotations=READ)
    async def get_job(job_id: JobId, ctx: Ctx) -> dict[str, Any]:
        """A job with its attempts, turns, state, question and pending_approvals, as GET /api/jobs/{id}."""
        who = caller(ctx)
        j = await common.get_job(hub, who, job_id)
        with refusals():
            sessions = await job_attempts.attempt_sessions(hub.kube, j)
            names = [s["metadata"]["name"] for s in sessions]
            pending = await ap.waiting_on(hub.kube, names, api_cache_of(hub.state), attempts=True)
            return job_view(j, await job_attempts.job_turns(hub.kube, j, sessions), pending)

    @server.tool(annotations=WRITE)
    async def send_to_session(name: SessionName, message: Message, ctx: Ctx) -> dict[str, Any]:
        """Send a message to a session: it starts the next turn, or, while a Claude Code or Codex turn runs,
        it steers that turn (kind: steer). Like POST /api/sessions/{name}/messages."""
        who = caller(ctx)
        sessions_only(who, "send_to_session")
        with refusals():
            return await sessions.send(hub.kube, hub.db, hub.turns, acting(who), name, message)

    @server.tool(annotations=WRITE)
    async def new_session(
        name: SessionName,
        environment: Annotated[
            str, Field(min_length=1, max_length=253, description="The environment's name")
        ],
        message: Message,
        ctx: Ctx,
        harness: Harness = "claude",
        approvals: ApprovalPolicy | None = None,
    ) -> dict[str, Any]:
        """Create a session in an environment; the message is its first turn. approvals: auto, ask,
        deny-risky or governed (default: the environment's). Like POST /api/sessions."""
        who = caller(ctx)
        sessions_only(who, "new_session")
        body = sessions.NewSession(
            name=name, environment=environment, message=message, harness=harness, approvals=approvals
        )
        with refusals():
            return await sessions.create_session(body, acting(who), hub.kube, hub.db)

    @server.tool(annotations=WRITE)
    async def follow_up_job(job_id: JobId, message: Message, ctx: Ctx) -> dict[str, Any]:
        """Continue a job's conversation (answer its question, or ask for more): a new turn on each attempt
        that has not failed, or a steer of a running one. Like POST /api/jobs/{id}/follow_up."""
        who = caller(ctx)
        with refusals():
            return await jobs.follow_up(job_id, jobs.FollowUp(message=message), acting(who), hub.kube, hub.db)

    @server.tool(annotations=WRITE)
    async def approve_job(
        job_id: JobId,
        ctx: Ctx,
        reason: Annotated[str, Field(max_length=2000, description="Why (recorded with the release)")] = "",
    ) -> dict[str, Any]:
        """Release a job that waits in awaiting_approval for its repository's policy: its attempts start.
        Admins and the repository's policy approvers only, with a login token, never on their own job (an
        mcp-only `hangar connect` token is refused). Like POST /api/jobs/{id}/approve."""
        with refusals():
            # The caller exactly as the token says: release is a person's act, so never acting()'s reach.
            return await job_release.decide(hub.kube, hub.db, caller(ctx), job_id, "approve", reason)

    @server.tool(annotations=WRITE)
    async def reject_job(
        job_id: JobId,
        ctx: Ctx,
        reason: Annotated[str, Field(max_length=2000, description="Why (recorded with the rejection)")] = "",
    ) -> dict[str, Any]:
        """Reject a job that waits in awaiting_approval: it is cancelled without running. The same rule as
        approve_job. Like POST /api/jobs/{id}/reject."""
        with refusals():
            return await job_release.decide(hub.kube, hub.db, caller(ctx), job_id, "reject", reason)

    @server.tool(annotations=WRITE)
    async def steer_turn(
        ref: Ref,
        ctx: Ctx,
        message: Annotated[
            str | None, Field(min_length=1, max_length=MESSAGE_MAX, pattern=NOT_BLANK), bounded(MESSAGE_MAX)
        ] = None,
        interrupt: Flag = False,
    ) -> dict[str, Any]:
        """Tell a running agent something mid-turn (a steer), or with interrupt=true stop its turn (with a
        message: stop and go on with it). ref is a job id (every attempt with a running turn) or a session
        name."""
        who = caller(ctx)
        if not interrupt and not message:
            raise ToolError("invalid: a steer needs a message (or interrupt=true to stop the turn)")
        target = await common.resolve(hub, who, ref)
        rest = acting(who)
        with refusals():
            if target.kind == "job":
                if interrupt:
                    body = steering.InterruptBody(message=message) if message else None
                    return await job_steering.interrupt(target.name, rest, hub.kube, hub.db, body)
                return await job_steering.steer(
                    target.name, steering.SteerBody(message=message or ""), rest, hub.kube, hub.db
                )
            if interrupt:
                body = steering.InterruptBody(message=message) if message else None
                return await steering.interrupt(target.name, rest, hub.kube, hub.db, body)
            return await steering.steer(
                target.name, steering.SteerBody(message=message or ""), rest, hub.kube, hub.db
            )

    @server.tool(annotations=WRITE)
    async def answer_approval(
        ref: Ref,
        approval: ApprovalId,
        decision: Decision,
        ctx: Ctx,
        message: Annotated[
            str | None, Field(max_length=ap.MESSAGE_MAX, description="What the agent is told (optional)")
        ] = None,
    ) -> dict[str, Any]:
        """Decide a tool approval the agent waits on: allow, deny (the message reaches the agent) or
        allow_always (this call and calls like it for the rest of the turn). An approval is decided once:
        a second decision is refused with the first one."""
        who = caller(ctx)
        target = await common.resolve(hub, who, ref)
        body = ap.DecisionBody(decision=decision, message=message)
        with refusals():
            cache = api_cache_of(hub.state)  # told of the decision: this replica's next reads show it
            if target.kind == "job":
                return await job_approvals.decide_approval(
                    target.name, approval, body, acting(who), hub.kube, hub.db, cache
                )
            return await ap.decide_approval(target.name, approval, body, acting(who), hub.kube, hub.db, cache)

    @server.tool(annotations=WRITE)
    async def wait_for_turn(
        ref: Ref, ctx: Ctx, timeout_seconds: Timeout = 600
    ) -> dict[str, Any] | InputRequiredResult:
        """Wait for the current (or last) turn of a job or session to end, with progress notifications, and
        return it: outcome, summary, result, artifacts, pending_approvals, question. When the agent waits on
        a tool approval or asks a question, a client that can elicit is asked (a form), the answer is
        applied and the wait goes on; approval / elicitation say what happened (answered, declined,
        cancelled, stale). Other clients get pending_approvals / question and answer with answer_approval
        or send_to_session / follow_up_job."""
        who = caller(ctx)
        target = await common.resolve(hub, who, ref)
        with refusals():
            return await wait_loop(hub, who, ctx, target, float(timeout_seconds))
