"""Tasks (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663) for 2026-07-28 clients that declare it.

A ``wait_for_turn`` call of such a client (a first round: no ``inputResponses`` / ``requestState``) returns a
task at once (``resultType: "task"``) and runs in the background; so does a call of a tool registered with a
gate (:meth:`Tasks.gate`: ``exec``) when its gate lets it (else it runs as an ordinary call). ``tasks/get`` shows it: ``working`` (the
status message says what the turn is doing), ``input_required`` with the same forms as the call's
``input_required`` rounds (``approve-<id>``, ``answer-<n>``), answered with ``tasks/update``; ``completed``
with the tool's result (a refusal is a result with ``isError``), ``failed`` (a JSON-RPC error), or
``cancelled`` after ``tasks/cancel``. ``subscriptions/listen`` with ``taskIds`` sends ``notifications/tasks``
(the task as ``tasks/get`` shows it) when its status changes (:meth:`Tasks.follow`).

A task belongs to the token that created it: anyone else's ``tasks/*`` is "task not found" (-32602), as for
an unknown id. Tasks are kept in the database (``hangar.store.tasks``) for :data:`TTL_MS` from their
creation, so any API replica answers ``tasks/*``: the replica that runs a task writes its status there, takes
the answers any replica recorded (within half a second), and stops when any replica recorded a cancel
(:func:`stop_when_cancelled`, within a second, whatever the work waits on). It beats every
:data:`BEAT_SECONDS` (``hangar.store.tasks``); a task whose replica has not beaten for :data:`DEAD_MS` (it
died, or lost the database that long) is failed with the reason by the first replica that looks at it
(``tasks/*``, a listen stream), instead of staying ``working`` until its TTL; its replica, should it live
on, sees the final status and stops the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import secrets
import time
from collections.abc import Awaitable, Callable
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
    ElicitRequest,
    ElicitResult,
    RequestParams,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hangar.store.tasks import TaskRow, TaskStore, now_ms

from ..auth import Caller
from .auth import TokensVerifier
from .common import Hub
from .subscriptions import header_caller

EXTENSION = "io.modelcontextprotocol/tasks"
MISSING_CAPABILITY = -32021
TASK_TOOLS = frozenset({"wait_for_turn"})  # always a task; more tools join with a gate (Tasks.gate)
TTL_MS = 60 * 60 * 1000
POLL_MS = 1000
MAX_TASKS = 10_000  # running in this process
CANCEL_CHECK_SECONDS = 1.0  # how often a running task looks for a cancel another replica recorded
FOLLOW_SECONDS = 0.5  # how often a listen stream reads the tasks it follows
PURGE_SECONDS = 60.0
BEAT_SECONDS = 5.0  # how often the running replica says it still runs a task
DEAD_MS = 30_000  # no beat for this long: the replica running it is gone (six beats missed)
GONE = "the server running this task stopped (no heartbeat for 30 s); call the tool again"

# Whether a call of a gated tool runs as a task (its caller, its arguments): False runs it as an ordinary
# call, which answers at once (a refusal stays an immediate error: no task made, nothing run).
Gate = Callable[[Caller, dict[str, Any]], Awaitable[bool]]

_running: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar("hangar_mcp_task", default=None)


def running() -> TaskRun | None:
    """The task this code runs in, if the tool call is running as one."""
    return _running.get()


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def wire(row: TaskRow) -> dict[str, Any]:
    """The task as ``tasks/get`` and ``notifications/tasks`` show it (a DetailedTask)."""
    out: dict[str, Any] = {
        "taskId": row.id,
        "status": row.status,
        "createdAt": _iso(row.created_ms),
        "lastUpdatedAt": _iso(row.updated_ms),
        "ttlMs": TTL_MS,
        "pollIntervalMs": POLL_MS,
    }
    if row.message:
        out["statusMessage"] = row.message
    if row.status == "input_required":
        out["inputRequests"] = row.requests
    if row.status == "completed" and row.result is not None:
        out["result"] = row.result
    if row.status == "failed" and row.error is not None:
        out["error"] = row.error
    return out


@dataclass
class TaskRun:
    """A task running in this process: writes its status to the store, takes the answers recorded there."""

    task_id: str
    owner: str
    store: TaskStore
    status: str = "working"
    message: str | None = None
    requests: dict[str, ElicitRequest] = field(default_factory=dict)  # outstanding input requests
    answered: set[str] = field(default_factory=set)  # keys answered: never asked again (unique keys)
    runner: asyncio.Task[None] | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _checked: float = 0.0

    async def _write(self, status: str, message: str, requests: dict[str, ElicitRequest]) -> None:
        self.status, self.message, self.requests = status, message, requests
        dumped = {k: r.model_dump(mode="json", by_alias=True, exclude_none=True) for k, r in requests.items()}
        await self.store.set_status(self.task_id, status, message, dumped)

    async def _check_cancelled(self) -> None:
        """Stops the work when a cancel was recorded (by any replica) or the task is gone (expired)."""
        if time.monotonic() - self._checked < CANCEL_CHECK_SECONDS:
            return
        self._checked = time.monotonic()
        row = await self.store.get(self.task_id)
        if row is None or row.final:
            raise asyncio.CancelledError

    async def working(self, message: str) -> None:
        await self._check_cancelled()
        if self.status != "working" or self.message != message:
            await self._write("working", message, {})

    async def ask(self, requests: dict[str, ElicitRequest], wait: float) -> dict[str, ElicitResult]:
        """Shows ``requests`` (a key already answered is not asked again) as ``input_required`` and waits up
        to ``wait`` seconds for ``tasks/update`` (on any replica); returns the responses given (possibly some
        of them, or none: the caller looks at the turn again and asks again)."""
        await self._check_cancelled()
        fresh = {k: r for k, r in requests.items() if k not in self.answered}
        if fresh.keys() != self.requests.keys() or self.status != "input_required":
            await self._write("input_required", "waiting for your answer: " + ", ".join(fresh), fresh)
        got = await self._take()
        if not got:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), wait)
            except TimeoutError:
                pass
            got = await self._take()
        if got:
            await self._write("working", "applying your answer", {})
        return got

    async def _take(self) -> dict[str, ElicitResult]:
        got: dict[str, ElicitResult] = {}
        for key, raw in (await self.store.take(self.task_id)).items():
            self.answered.add(key)
            try:
                got[key] = ElicitResult.model_validate(raw)
            except ValidationError:
                continue  # validated when recorded; fail closed on anything else
        return got

    def wake(self) -> None:
        self._arrived.set()


async def stop_when_cancelled(task: TaskRun) -> None:
    """Stops the task's work (its runner) once a cancel is recorded, by any replica, or the task is gone or
    final otherwise (failed by another replica that judged this one dead): also while the work waits on
    something else than the task (an exec's answer from the sandbox). Beats meanwhile."""
    beat = time.monotonic()
    while True:
        await asyncio.sleep(CANCEL_CHECK_SECONDS)
        try:
            if time.monotonic() - beat >= BEAT_SECONDS:
                await task.store.beat(task.task_id, now_ms())
                beat = time.monotonic()
            row = await task.store.get(task.task_id)
        except Exception:
            continue  # the database is away for a moment: look again (the work's own writes fail meanwhile)
        if row is None or row.final:
            if task.runner is not None:
                task.runner.cancel()
            return


async def judged(store: TaskStore, row: TaskRow, running_here: bool) -> TaskRow:
    """The task as a reader should see it: failed, with the reason, when it is not final and the replica
    running it stopped beating :data:`DEAD_MS` ago (never one this process runs)."""
    if row.final or running_here or row.beat_ms is None or now_ms() - row.beat_ms <= DEAD_MS:
        return row
    error = {"code": INTERNAL_ERROR, "message": GONE}
    await store.fail_if_dead(row.id, now_ms() - DEAD_MS, GONE, error)
    return await store.get(row.id) or row


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

    def __init__(self, verifier: TokensVerifier, hub: Hub) -> None:
        self.verifier = verifier
        self.hub = hub
        self._local: dict[str, TaskRun] = {}  # the tasks this process runs
        self._purged = 0.0
        self._gates: dict[str, Gate] = {}

    def gate(self, tool: str, may_run: Gate) -> None:
        """``tool`` runs as a task for a declaring client when ``may_run`` says so (else as an ordinary call)."""
        self._gates[tool] = may_run

    @property
    def store(self) -> TaskStore:
        return TaskStore(self.hub.db)  # the app's database is opened by its lifespan, after this is built

    # --- who ----------------------------------------------------------------------------------------------
    def _caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        return header_caller(self.verifier, ctx.request.headers if ctx.request is not None else None)

    def _owner(self, ctx: ServerRequestContext[Any, Any]) -> str:
        return self._caller(ctx).subject

    async def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskRow:
        if not declared(ctx):
            raise _missing()
        await self._expire()
        row = await self.store.get(task_id)
        if row is not None:
            row = await judged(self.store, row, row.id in self._local)
        expired = row is not None and now_ms() - row.created_ms > TTL_MS
        if row is None or expired or row.owner != self._owner(ctx):  # someone else's: as a missing one
            raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: no task {task_id!r} (or it expired)")
        return row

    async def _expire(self) -> None:
        """Stops this process's tasks past their TTL; drops expired tasks from the database once a minute."""
        now = now_ms()
        for task_id, task in list(self._local.items()):
            if task.runner is None or task.runner.done():
                del self._local[task_id]
        if time.monotonic() - self._purged < PURGE_SECONDS:
            return
        self._purged = time.monotonic()
        for task_id, task in list(self._local.items()):
            row = await self.store.get(task_id)
            if (row is None or now - row.created_ms > TTL_MS) and task.runner is not None:
                task.runner.cancel()
        await self.store.purge(now - TTL_MS)

    # --- tools/call ------------------------------------------------------------------------------------------
    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        first_round = params.input_responses is None and params.request_state is None
        gate = self._gates.get(params.name)
        if (params.name not in TASK_TOOLS and gate is None) or not first_round or not declared(ctx):
            return await call_next(ctx)
        if gate is not None and not await gate(self._caller(ctx), dict(params.arguments or {})):
            return await call_next(ctx)
        await self._expire()
        if len(self._local) >= MAX_TASKS:
            raise MCPError(INTERNAL_ERROR, "too many tasks on this server: try again later")
        store = self.store
        task = TaskRun(secrets.token_urlsafe(18), self._owner(ctx), store, message="started")
        # Durable before it is returned: a tasks/get on any replica finds it.
        await store.create(task.task_id, task.owner, "started", now_ms())
        await store.beat(task.task_id, now_ms())
        self._local[task.task_id] = task

        async def body() -> None:
            _running.set(task)
            watcher = asyncio.create_task(stop_when_cancelled(task))
            try:
                try:
                    out = await call_next(ctx)
                finally:
                    watcher.cancel()
                if isinstance(out, BaseModel):
                    result = out.model_dump(mode="json", by_alias=True, exclude_none=True)
                else:
                    result = dict(out or {})
                await store.set_status(task.task_id, "completed", "done", result=result)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):  # the app going away may have closed the database
                    await asyncio.shield(store.cancel(task.task_id))
                raise
            except MCPError as e:
                error = e.error.model_dump(mode="json", exclude_none=True)
                await store.set_status(task.task_id, "failed", e.error.message, error=error)
            except Exception as e:
                error = {"code": INTERNAL_ERROR, "message": f"internal error: {type(e).__name__}"}
                await store.set_status(
                    task.task_id, "failed", "internal error (the server's log has it)", error=error
                )
            finally:
                self._local.pop(task.task_id, None)

        # A context of its own: the body sees the task (and the caller's token), not the request's scope.
        task.runner = asyncio.create_task(body(), context=contextvars.copy_context())
        row = await store.get(task.task_id)
        assert row is not None
        return {"resultType": "task", **wire(row)}

    # --- tasks/* -------------------------------------------------------------------------------------------
    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        return {"resultType": "complete", **wire(await self._find(ctx, params.task_id))}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> dict[str, Any]:
        """Records the answers to outstanding keys (each once, on any replica); other keys are ignored."""
        row = await self._find(ctx, params.task_id)
        if row.final:
            return {"resultType": "complete"}
        recorded = False
        for key, raw in params.input_responses.items():
            if key not in row.requests:
                continue  # answered, superseded or never asked
            try:
                answer = ElicitResult.model_validate(raw)
            except ValidationError as e:
                raise MCPError(INVALID_PARAMS, f"invalid: inputResponses.{key}: {e}") from None
            dumped = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
            recorded = await self.store.respond(row.id, key, dumped) or recorded
        local = self._local.get(row.id)
        if recorded and local is not None:
            local.wake()
        return {"resultType": "complete"}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        row = await self._find(ctx, params.task_id)
        if not row.final:
            await self.store.cancel(row.id)  # the replica running it stops within a second
            local = self._local.get(row.id)
            if local is not None and local.runner is not None:
                local.runner.cancel()
        return {"resultType": "complete"}

    def methods(self) -> list[MethodBinding]:
        modern = frozenset({"2026-07-28"})
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, protocol_versions=modern),
            MethodBinding("tasks/update", UpdateParams, self.update, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, protocol_versions=modern),
        ]

    # --- notifications/tasks on subscriptions/listen ----------------------------------------------------------
    async def authorize(self, ctx: ServerRequestContext[Any, Any], task_ids: list[str]) -> None:
        """Before a listen stream is acknowledged: the client declares the extension (else -32021) and
        every task is its own (else -32602, as for tasks/get)."""
        for task_id in task_ids:
            await self._find(ctx, task_id)

    async def follow(self, task_ids: list[str], send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Sends each task (as ``tasks/get`` shows it) when its status or message changes, until every one is
        final. Read from the database, so a task another replica runs is followed the same way."""
        last: dict[str, tuple[str, str | None, tuple[str, ...]]] = {}
        open_ids = list(task_ids)
        while open_ids:
            for task_id in list(open_ids):
                row = await self.store.get(task_id)
                if row is None:
                    open_ids.remove(task_id)  # expired: nothing more will come
                    continue
                row = await judged(self.store, row, task_id in self._local)
                seen = (row.status, row.message, tuple(sorted(row.requests)))
                if last.get(task_id) != seen:
                    await send(wire(row))
                    last[task_id] = seen
                if row.final:
                    open_ids.remove(task_id)
            if open_ids:
                await asyncio.sleep(FOLLOW_SECONDS)

    def stop(self) -> None:
        for task in self._local.values():
            if task.runner is not None:
                task.runner.cancel()
