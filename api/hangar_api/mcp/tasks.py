"""Tasks (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663) for 2026-07-28 clients that declare it.

A ``wait_for_turn`` call of such a client (a first round: no ``inputResponses`` / ``requestState``) returns a
task at once (``resultType: "task"``) and runs in the background. ``tasks/get`` shows it: ``working`` (the
status message says what the turn is doing), ``input_required`` with the same forms as the call's
``input_required`` rounds (``approve-<id>``, ``answer-<n>``), answered with ``tasks/update``; ``completed``
with the tool's result (a refusal is a result with ``isError``), ``failed`` (a JSON-RPC error), or
``cancelled`` after ``tasks/cancel``.

A task belongs to the token that created it: anyone else's ``tasks/*`` is "task not found" (-32602), as for
an unknown id. Tasks are kept in the API process that runs them, for :data:`TTL_MS` from their creation
(``Mcp-Name`` carries the task id, for a load balancer to route ``tasks/*`` to that process).
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitResult,
    RequestParams,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .auth import TokensVerifier
from .subscriptions import header_caller

EXTENSION = "io.modelcontextprotocol/tasks"
MISSING_CAPABILITY = -32021
TASK_TOOLS = frozenset({"wait_for_turn"})
TTL_MS = 60 * 60 * 1000
POLL_MS = 1000
MAX_TASKS = 10_000

_running: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar("hangar_mcp_task", default=None)


def running() -> TaskRun | None:
    """The task this code runs in, if the tool call is running as one."""
    return _running.get()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class TaskRun:
    task_id: str
    owner: str
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    status: str = "working"
    message: str | None = None
    requests: dict[str, ElicitRequest] = field(default_factory=dict)  # outstanding input requests
    answered: set[str] = field(default_factory=set)  # keys answered: never asked again (unique keys)
    responses: dict[str, ElicitResult] = field(default_factory=dict)  # given, not yet taken by the body
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    runner: asyncio.Task[None] | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def final(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def _touch(self) -> None:
        self.updated = time.time()

    def working(self, message: str) -> None:
        if not self.final and (self.status != "working" or self.message != message):
            self.status, self.message, self.requests = "working", message, {}
            self._touch()

    async def ask(self, requests: dict[str, ElicitRequest], wait: float) -> dict[str, ElicitResult]:
        """Shows ``requests`` (a key already answered is not asked again) as ``input_required`` and waits up
        to ``wait`` seconds for ``tasks/update``; returns the responses given (possibly some of them, or none:
        the caller looks at the turn again and asks again)."""
        fresh = {k: r for k, r in requests.items() if k not in self.answered}
        if fresh.keys() != self.requests.keys() or self.status != "input_required":
            self.status, self.requests = "input_required", fresh
            self.message = "waiting for your answer: " + ", ".join(fresh)
            self._touch()
        if not self.responses:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), wait)
            except TimeoutError:
                pass
        got, self.responses = self.responses, {}
        if got:
            self.status, self.requests, self.message = "working", {}, "applying your answer"
            self._touch()
        return got

    def update(self, responses: dict[str, Any]) -> None:
        """``tasks/update``: keys not outstanding are ignored (answered, superseded, never asked)."""
        for key, raw in responses.items():
            if key not in self.requests or key in self.answered:
                continue
            try:
                self.responses[key] = ElicitResult.model_validate(raw)
            except ValidationError as e:
                raise MCPError(INVALID_PARAMS, f"invalid: inputResponses.{key}: {e}") from None
            self.answered.add(key)
        if self.responses:
            self._arrived.set()

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _iso(self.created),
            "lastUpdatedAt": _iso(self.updated),
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_MS,
        }
        if self.message:
            out["statusMessage"] = self.message
        if self.status == "input_required":
            out["inputRequests"] = {
                k: r.model_dump(mode="json", by_alias=True, exclude_none=True)
                for k, r in self.requests.items()
            }
        if self.status == "completed" and self.result is not None:
            out["result"] = self.result
        if self.status == "failed" and self.error is not None:
            out["error"] = self.error
        return out


class TaskIdParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True, extra="allow")
    task_id: str = Field(alias="taskId", min_length=1, max_length=200)


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    caps = ctx.session.client_capabilities
    return bool(caps is not None and caps.extensions is not None and EXTENSION in caps.extensions)


def _missing() -> MCPError:
    return MCPError(
        MISSING_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


class Tasks(Extension):
    identifier = EXTENSION

    def __init__(self, verifier: TokensVerifier) -> None:
        self.verifier = verifier
        self._tasks: dict[str, TaskRun] = {}

    # --- who ----------------------------------------------------------------------------------------------
    def _owner(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return header_caller(self.verifier, ctx.request.headers if ctx.request is not None else None).subject

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskRun:
        if not declared(ctx):
            raise _missing()
        self._expire()
        task = self._tasks.get(task_id)
        if task is None or task.owner != self._owner(ctx):  # someone else's is "not found", as a missing one
            raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: no task {task_id!r} (or it expired)")
        return task

    def _expire(self) -> None:
        now = time.time()
        for task_id, task in list(self._tasks.items()):
            if now - task.created > TTL_MS / 1000:
                if task.runner is not None:
                    task.runner.cancel()
                del self._tasks[task_id]

    # --- tools/call ------------------------------------------------------------------------------------------
    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        first_round = params.input_responses is None and params.request_state is None
        if params.name not in TASK_TOOLS or not first_round or not declared(ctx):
            return await call_next(ctx)
        self._expire()
        if len(self._tasks) >= MAX_TASKS:
            raise MCPError(INTERNAL_ERROR, "too many tasks on this server: try again later")
        task = TaskRun(secrets.token_urlsafe(18), self._owner(ctx))
        task.message = "started"
        self._tasks[task.task_id] = task

        async def body() -> None:
            _running.set(task)
            try:
                out = await call_next(ctx)
                if isinstance(out, CallToolResult):
                    task.result = out.model_dump(mode="json", by_alias=True, exclude_none=True)
                elif isinstance(out, BaseModel):
                    task.result = out.model_dump(mode="json", by_alias=True, exclude_none=True)
                else:
                    task.result = dict(out or {})
                task.status, task.requests = "completed", {}
                task.message = "done"
            except asyncio.CancelledError:
                task.status, task.requests, task.message = "cancelled", {}, "cancelled"
                raise
            except MCPError as e:
                task.status, task.requests = "failed", {}
                task.error = e.error.model_dump(mode="json", exclude_none=True)
                task.message = e.error.message
            except Exception as e:
                task.status, task.requests = "failed", {}
                task.error = {"code": INTERNAL_ERROR, "message": f"internal error: {type(e).__name__}"}
                task.message = "internal error (the server's log has it)"
            finally:
                task._touch()

        # A context of its own: the body sees the task (and the caller's token), not the request's scope.
        task.runner = asyncio.create_task(body(), context=contextvars.copy_context())
        return {"resultType": "task", **task.wire()}

    # --- tasks/* -------------------------------------------------------------------------------------------
    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        return {"resultType": "complete", **self._find(ctx, params.task_id).wire()}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if not task.final:
            task.update(params.input_responses)
        return {"resultType": "complete"}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if not task.final and task.runner is not None:
            task.runner.cancel()
        return {"resultType": "complete"}

    def methods(self) -> list[MethodBinding]:
        modern = frozenset({"2026-07-28"})
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=modern),
            MethodBinding("tasks/update", UpdateParams, self.update, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=modern),
        ]

    def stop(self) -> None:
        for task in self._tasks.values():
            if task.runner is not None:
                task.runner.cancel()
