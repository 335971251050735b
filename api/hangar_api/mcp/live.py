"""The live sandbox tools: ``exec`` (a command, its output streamed as progress with ``stream=true``) and
``process`` (background commands: start, list, read since an offset, send input, stop).

Both go api → operator (``live_client``) → the session's driver, which runs them as the agent's uid in the
workspace. Every command (an exec, a process start, an input) is judged by the session's approvals policy
like an agent's Bash call first (``exec_policy``): only ``allow`` runs. Every exec, refused or run, is
recorded as a session activity event (``exec``: who, command, policy verdict, exit code) and in the
audit log; so are process starts, inputs and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from hangar.limits import (
    EXEC_COMMAND_MAX,
    EXEC_OUTPUT_MAX,
    EXEC_TIMEOUT_MAX,
    PROCESS_READ_MAX,
    clip,
)
from hangar.models import Session
from hangar.models.limits import bounded

from .. import live_client
from ..auth import Caller
from ..exec_policy import judge
from . import common, tasks
from .common import Hub, sessions_only
from .tasks import Tasks
from .tools import NOT_BLANK, SessionName

Ctx = Context[Any, Any]
SHOWN_MAX = 2000  # bytes of a command kept in its activity event and audit entry
STATUS_SECONDS = 1.0  # an exec task's status message shows its output at most this often
TAIL_MAX = 200  # characters of the latest output a status message shows

Command = Annotated[
    str,
    Field(
        min_length=1,
        max_length=EXEC_COMMAND_MAX,
        pattern=NOT_BLANK,
        description=f"A shell command (/bin/sh -c), at most {EXEC_COMMAND_MAX} bytes",
    ),
    bounded(EXEC_COMMAND_MAX),
]
ExecTimeout = Annotated[
    int,
    Field(
        strict=True,
        ge=1,
        le=EXEC_TIMEOUT_MAX,
        description=f"Seconds before it is killed (1-{EXEC_TIMEOUT_MAX})",
    ),
]
OutputMax = Annotated[
    int,
    Field(
        strict=True,
        ge=1,
        le=EXEC_OUTPUT_MAX,
        description=f"Bytes of stdout and stderr kept together (at most {EXEC_OUTPUT_MAX}); past it cut",
    ),
]
ProcessId = Annotated[str, Field(pattern=r"^p[0-9]{1,9}$", description="The process's id (p1, p2, …)")]
Offset = Annotated[int, Field(strict=True, ge=0, le=1 << 62, description="Bytes of output already read")]
Input = Annotated[
    str,
    Field(
        max_length=EXEC_COMMAND_MAX,
        description=f"Text for its standard input, at most {EXEC_COMMAND_MAX} bytes",
    ),
    bounded(EXEC_COMMAND_MAX),
]
Flag = Annotated[bool, Field(strict=True)]
LIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


async def _session(hub: Hub, who: Caller, name: str, what: str) -> Session:
    sessions_only(who, what)
    return Session.model_validate(await common.get_session(hub, who, name))


async def _record(hub: Hub, who: Caller, session: str, kind: str, detail: dict[str, Any]) -> None:
    """The session's activity event and the audit entry of one live act."""
    entry = {"by": who.subject, **detail}
    await hub.db.append_event(f"session/{session}", kind, entry)
    await hub.db.audit(who.subject, f"session.{kind}", session, **detail)


async def _allowed(hub: Hub, who: Caller, s: Session, command: str, kind: str) -> dict[str, Any]:
    """The policy's verdict on ``command`` (audited); raises the refusal when it may not run."""
    judged = judge(s, command)
    verdict = judged.audit()
    refusal = judged.refusal
    if refusal is not None:
        await _record(
            hub,
            who,
            str(s.metadata["name"]),
            kind,
            {"command": clip(command, SHOWN_MAX), **verdict, "ran": False},
        )
        raise ToolError(refusal)
    return verdict


async def _answer(
    hub: Hub, session: str, op: str, body: dict[str, Any], on: Callable[[dict[str, Any]], Any] | None = None
) -> dict[str, Any]:
    """The driver's result for one command; ``on`` sees every frame before it (exec's streamed output)."""
    try:
        async for frame in live_client.frames(hub.db, session, op, body):
            kind = frame.get("kind")
            if kind == "result":
                if not frame.get("ok"):
                    raise ToolError(f"refused: {frame.get('error') or 'the sandbox refused it'}")
                return {k: v for k, v in frame.items() if k not in ("request", "kind", "ok")}
            if kind == "ended":
                raise ToolError(f"unavailable: {frame.get('reason') or 'the sandbox went'}")
            if on is not None:
                await on(frame)
    except live_client.LiveError as e:
        raise ToolError(e.text) from None
    raise ToolError("unavailable: the sandbox gave no answer")


def task_status(sent: int, tail: str) -> str:
    """An exec task's status message while it runs: tasks carry no progress notifications, so the output
    streamed so far is summed up here (its size and its latest line)."""
    if not sent:
        return "running: no output yet"
    lines = [line for line in tail.splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    last = last if len(last) <= TAIL_MAX else "…" + last[-TAIL_MAX:]
    return f"running: {sent} characters of output so far" + (f"; the latest: {last}" if last else "")


def exec_call(meta: FuncMetadata, arguments: dict[str, Any]) -> tuple[str, str] | None:
    """The session and command of an exec call whose arguments pass the tool's input schema, else None."""
    try:
        args = meta.validate_arguments(arguments)
    except ValidationError:
        return None
    return str(args["session"]), str(args["command"])


def register_live(
    server: MCPServer[Any], hub: Hub, caller: Callable[[Ctx], Caller], tasks_ext: Tasks
) -> None:
    @server.tool(name="exec", annotations=LIVE)
    async def exec_tool(
        session: SessionName,
        command: Command,
        ctx: Ctx,
        stream: Flag = False,
        timeout_seconds: ExecTimeout = 60,
        max_output_bytes: OutputMax = EXEC_OUTPUT_MAX,
    ) -> dict[str, Any]:
        """Run a shell command in the session's sandbox, as the agent's user in the workspace, and return its
        exit_code, stdout and stderr. The session's approvals policy judges it like an agent's Bash call:
        refused unless it allows it. stream=true sends the output as progress notifications while it runs.
        Output past max_output_bytes is cut (truncated: true); it is killed after timeout_seconds."""
        who = caller(ctx)
        s = await _session(hub, who, session, "exec")
        verdict = await _allowed(hub, who, s, command, "exec")
        task = tasks.running()
        if task is not None:
            await task.working(f"running: {clip(command, TAIL_MAX)}")
        sent, tail, shown = 0, "", 0.0

        async def progress(frame: dict[str, Any]) -> None:
            nonlocal sent, tail, shown
            data = str(frame.get("data", ""))
            if frame.get("kind") != "output" or not data:
                return
            sent += len(data)
            if task is None:
                await ctx.report_progress(sent, None, data)
                return
            tail = (tail + data)[-4 * TAIL_MAX :]
            if time.monotonic() - shown >= STATUS_SECONDS:  # a database write each: at most once a second
                shown = time.monotonic()
                await task.working(task_status(sent, tail))

        body = {
            "command": command,
            "timeout": timeout_seconds,
            "max_output": max_output_bytes,
            "stream": stream,
        }
        try:
            result = await _answer(hub, session, "exec", body, progress if stream else None)
        except asyncio.CancelledError:
            # A cancelled task or call: the operator stops the command in the sandbox once this request
            # goes (live_work); the record says it was cut short.
            detail = {"command": clip(command, SHOWN_MAX), **verdict, "ran": True, "cancelled": True}
            with contextlib.suppress(Exception):
                await asyncio.shield(_record(hub, who, session, "exec", detail))
            raise
        except ToolError as e:
            await _record(
                hub,
                who,
                session,
                "exec",
                {"command": clip(command, SHOWN_MAX), **verdict, "ran": False, "error": str(e)},
            )
            raise
        await _record(
            hub,
            who,
            session,
            "exec",
            {
                "command": clip(command, SHOWN_MAX),
                **verdict,
                "ran": True,
                "exit_code": result.get("exit_code"),
                "timed_out": bool(result.get("timed_out")),
                "truncated": bool(result.get("truncated")),
            },
        )
        if result.get("truncated"):
            result["note"] = f"output past {max_output_bytes} bytes was cut"
        if result.get("timed_out"):
            result["note"] = (result.get("note", "") + "; " if result.get("note") else "") + (
                f"killed after {timeout_seconds} s"
            )
        return result

    meta = Tool.from_function(exec_tool, name="exec").fn_metadata

    async def exec_as_task(who: Caller, arguments: dict[str, Any]) -> bool:
        """An exec runs as a task only when it would run: its arguments are valid, the session is the
        caller's to use and its policy allows the command. Else it runs as an ordinary call, which refuses
        it at once with the usual text and audit (no task made, nothing run)."""
        call = exec_call(meta, arguments)
        if call is None:
            return False
        try:
            s = await _session(hub, who, call[0], "exec")
        except ToolError:
            return False
        return judge(s, call[1]).allowed

    tasks_ext.gate("exec", exec_as_task)

    @server.tool(annotations=LIVE)
    async def process(
        session: SessionName,
        action: Literal["start", "list", "read", "input", "stop"],
        ctx: Ctx,
        command: Command | None = None,
        id: ProcessId | None = None,
        offset: Offset = 0,
        input: Input | None = None,
        eof: Flag = False,
    ) -> dict[str, Any]:
        """Background commands in the session's sandbox (the agent's user, the workspace): start (command;
        judged by the approvals policy like exec) returns its id; list; read (id, offset: the next_offset of
        the last read) returns output since offset; input (id, input, eof to close its stdin; judged like a
        command); stop (id). At most 8 run at once per sandbox; the newest 1 MiB of each one's output is
        kept (a read past what was let go says dropped: true)."""
        who = caller(ctx)
        s = await _session(hub, who, session, "process")
        body: dict[str, Any] = {"action": action}
        need_id = action in ("read", "input", "stop")
        if need_id and id is None:
            raise ToolError(f"invalid: id: process {action} needs the process's id (from start or list)")
        if id is not None:
            body["id"] = id
        if action == "start":
            if command is None:
                raise ToolError("invalid: command: process start needs a command")
            verdict = await _allowed(hub, who, s, command, "process")
            body["command"] = command
            result = await _answer(hub, session, "process", body)
            await _record(
                hub,
                who,
                session,
                "process",
                {
                    "step": "start",
                    "id": result.get("id"),
                    "command": clip(command, SHOWN_MAX),
                    **verdict,
                    "ran": True,
                },
            )
            return result
        if action == "input":
            if input is None:
                raise ToolError("invalid: input: process input needs the text to send")
            verdict = await _allowed(hub, who, s, input, "process") if input.strip() else {}
            body.update({"data": input, "eof": eof})
            result = await _answer(hub, session, "process", body)
            await _record(
                hub,
                who,
                session,
                "process",
                {"step": "input", "id": id, "command": clip(input, SHOWN_MAX), "eof": eof, **verdict},
            )
            return result
        if action == "read":
            body.update({"offset": offset, "limit": PROCESS_READ_MAX})
        result = await _answer(hub, session, "process", body)
        if action == "stop":
            await _record(
                hub,
                who,
                session,
                "process",
                {"step": "stop", "id": id, "exit_code": result.get("exit_code")},
            )
        return result
