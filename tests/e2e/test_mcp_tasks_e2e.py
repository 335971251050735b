"""``wait_for_turn`` as a task (the ``io.modelcontextprotocol/tasks`` extension): the SDK's ``Client`` with a
small tasks client on its extension seams (the SDK has none), over real HTTP, against real sessions with the
real Claude Code CLI. The task turns ``input_required`` with the call's forms, answered with ``tasks/update``;
it belongs to its token; it can be cancelled. ``exec`` runs as a task too, in the session's real sandbox: its
output in the status message, a cancel stopping the command there, a refusal still an immediate error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ElicitRequestFormParams,
    InputRequiredResult,
    Request,
    RequestParams,
    Result,
)
from pydantic import ConfigDict

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, workspace
from .test_mcp_e2e import (
    MODERN,
    SLOW,
    answering,
    claude_env,
    connect,
    data,
    in_thread,
    new_session,
    refused,
)
from .test_mcp_e2e import _cleanup as _cleanup  # the autouse fixture deleting what a test made

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]
EXTENSION = "io.modelcontextprotocol/tasks"


# --- a tasks client on the SDK's extension seams ------------------------------------------------------------
class Open(Result):
    model_config = ConfigDict(extra="allow")


class TaskCreated(Open):
    """``resultType: "task"``: the task's seed state."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskState(Open):
    task_id: str
    status: str
    status_message: str | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskIdParams(RequestParams):
    task_id: str


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTask(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams
    name_param = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class TasksClient(ClientExtension):
    """Declares the extension; a ``resultType: "task"`` is polled with ``tasks/get`` to its end, its input
    requests answered through the client's elicitation callback and ``tasks/update``. Records what it saw."""

    identifier = EXTENSION

    def __init__(self) -> None:
        self.created: list[TaskCreated] = []
        self.states: list[TaskState] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self.resolve)]

    async def resolve(self, created: TaskCreated, ctx: ClaimContext) -> CallToolResult:
        self.created.append(created)
        answered: set[str] = set()
        while True:
            st = await ctx.session.send_request(
                GetTask(params=TaskIdParams(task_id=created.task_id)), TaskState
            )
            self.states.append(st)
            if st.status == "completed":
                return CallToolResult.model_validate(st.result)
            if st.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {st.status}: {st.error or st.status_message}")
            if st.status == "input_required":
                asks = InputRequiredResult.model_validate({"inputRequests": st.input_requests}).input_requests
                responses = {}
                for key, req in (asks or {}).items():
                    if key not in answered:  # asked again until the server saw the answer
                        answered.add(key)
                        rc = ClientRequestContext(session=ctx.session, request_id=key)
                        got = await ctx.session.dispatch_input_request(rc, req)
                        responses[key] = got.model_dump(mode="json", by_alias=True, exclude_none=True)
                if responses:
                    params = UpdateParams(task_id=created.task_id, input_responses=responses)
                    await ctx.session.send_request(UpdateTask(params=params), Open)
            await asyncio.sleep(0.3)


@asynccontextmanager
async def tasks_client(
    stack: Stack, tasks: TasksClient, subject: str = "mcp-client", asked: list[Any] | None = None
) -> AsyncIterator[Client]:
    """The SDK's Client declaring the tasks extension (and elicitation: every form is answered "allow")."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {stack.token_for(subject)}"}, timeout=httpx2.Timeout(30, read=300)
    )

    async def elicit(_: Any, params: Any) -> Any:
        if asked is not None:
            asked.append(params)
        return answering("allow")(params)

    async with (
        http,
        Client(
            streamable_http_client(f"{stack.api_url}/mcp", http_client=http),
            mode=MODERN,
            elicitation_callback=elicit,
            extensions=[tasks],
        ) as client,
    ):
        yield client


async def get_task(client: Client, task_id: str) -> TaskState:
    return await client.session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TaskState)


async def until_written(path: Path) -> None:
    for _ in range(300):
        if path.exists() and path.read_text().strip():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the command did not start: no {path.name}")


async def until_gone(client: Client, session: str, pid_file: str) -> None:
    """The process whose pid the file holds ends in the sandbox (its command was stopped)."""
    alive = f"kill -0 $(cat {pid_file}) 2>/dev/null && echo alive || echo gone"
    for _ in range(60):
        if data(await client.call_tool("exec", {"session": session, "command": alive}))["stdout"] == "gone\n":
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"the cancelled exec's command still runs in the sandbox ({pid_file})")


# --- the tests ----------------------------------------------------------------------------------------------
async def test_wait_for_turn_as_a_task_asks_for_the_approval_and_tasks_update_answers_it(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-task.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-task", "mcp-env-ask", "write it")
    tasks = TasksClient()
    asked: list[ElicitRequestFormParams] = []
    async with tasks_client(stack, tasks, asked=asked) as client:
        out = data(await client.call_tool("wait_for_turn", {"ref": "mcp-task", "timeout_seconds": 120}))
        [created] = tasks.created
        assert created.status == "working" and len(created.task_id) >= 20, created
        assert (await get_task(client, created.task_id)).status == "completed"
    # Someone else's task is "not found", exactly as an unknown one; a client that doesn't declare the
    # extension is told which capability it lacks.
    async with tasks_client(stack, TasksClient(), "alice") as other:
        for task_id in (created.task_id, "no-such-task"):
            with pytest.raises(MCPError) as e:
                await get_task(other, task_id)
            assert e.value.error.code == INVALID_PARAMS and "no task" in e.value.error.message, e.value.error
    async with connect(stack) as plain:
        with pytest.raises(MCPError) as e:
            await get_task(plain, created.task_id)
        assert e.value.error.code == -32021, e.value.error
        # Without the extension the same call is an ordinary call.
        assert data(await plain.call_tool("wait_for_turn", {"ref": "mcp-task", "timeout_seconds": 5}))["done"]
    ask = next(s for s in tasks.states if s.status == "input_required")
    [(key, form)] = (ask.input_requests or {}).items()
    [a] = api.get("/api/sessions/mcp-task/approvals").json()["recent"]
    assert key == f"approve-{a['id']}" and form["method"] == "elicitation/create", ask
    assert form["params"]["requestedSchema"]["properties"]["decision"]["enum"] == [
        "allow",
        "deny",
        "allow_always",
    ]
    assert len(asked) == 1 and "echo hi > mcp-task.txt" in asked[0].message
    assert out["done"] and out["phase"] == "Completed" and out["approval"]["outcome"] == "answered", out
    assert any(s.status == "working" and "mcp-task-1" in (s.status_message or "") for s in tasks.states)
    assert a["phase"] == "Allowed" and a["by"] == "mcp-client"


async def test_a_task_is_cancelled_and_the_turn_goes_on_and_exec_runs_as_a_task(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Running the slow thing.", command=SLOW.format(s=6)),
        Step(when="tool_result", text="FINAL: slow thing done."),
    )
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    name = "mcp-task-cancel"
    new_session(api, name, "mcp-env-plain", "run the slow thing", approvals="deny-risky")
    async with tasks_client(stack, TasksClient()) as client:
        created = await client.session.call_tool(
            "wait_for_turn", {"ref": "mcp-task-cancel", "timeout_seconds": 120}, allow_claimed=True
        )
        assert isinstance(created, TaskCreated) and created.status == "working", created
        await client.session.send_request(CancelTask(params=TaskIdParams(task_id=created.task_id)), Open)
        for _ in range(50):
            st = await get_task(client, created.task_id)
            if st.status != "working":
                break
            await asyncio.sleep(0.2)
        assert st.status == "cancelled" and st.result is None, st
    # Cancelling the wait doesn't stop the agent.
    assert (await in_thread(api.wait_turn, "mcp-task-cancel", 1))["phase"] == "Completed"

    # exec as a task: working (the streamed output in the status message: tasks carry no progress), then
    # completed with exec's result.
    ws = workspace(stack, name)
    tasks = TasksClient()
    async with tasks_client(stack, tasks) as client:
        command = "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; echo oops >&2; exit 3"
        out = data(await client.call_tool("exec", {"session": name, "command": command, "stream": True}))
        assert out["exit_code"] == 3 and out["stdout"] == "".join(f"line{i}\n" for i in range(1, 7)), out
        assert out["stderr"] == "oops\n" and not out["truncated"] and not out["timed_out"], out
        [created] = tasks.created
        assert created.status == "working", created
        said = [s.status_message or "" for s in tasks.states if s.status == "working"]
        assert any("characters of output so far; the latest: line" in m for m in said), said
        done = await get_task(client, created.task_id)
        assert done.status == "completed" and done.result is not None, done
        assert done.result["structuredContent"]["exit_code"] == 3, done.result

        # tasks/cancel stops the command in the sandbox, its background child too.
        created = await client.session.call_tool(
            "exec",
            {"session": name, "command": "sleep 300 & echo $! > child.pid; wait", "timeout_seconds": 600},
            allow_claimed=True,
        )
        assert isinstance(created, TaskCreated) and created.status == "working", created
        await until_written(ws / "child.pid")
        alive = "kill -0 $(cat child.pid) 2>/dev/null && echo alive || echo gone"
        assert (
            data(await client.call_tool("exec", {"session": name, "command": alive}))["stdout"] == "alive\n"
        )
        await client.session.send_request(CancelTask(params=TaskIdParams(task_id=created.task_id)), Open)
        assert (await get_task(client, created.task_id)).status == "cancelled"
        await until_gone(client, name, "child.pid")
        # So does cancelling an ordinary exec call (a client without the extension).
        async with connect(stack) as plain, anyio.create_task_group() as tg:
            long = {
                "session": name,
                "command": "sleep 300 & echo $! > plain.pid; wait",
                "timeout_seconds": 600,
            }
            tg.start_soon(plain.call_tool, "exec", long)
            await until_written(ws / "plain.pid")
            tg.cancel_scope.cancel()
        await until_gone(client, name, "plain.pid")
        audit = await in_thread(api.get, f"/api/sessions/{name}/events")
        execs = [e for e in audit.json()["events"] if e["kind"] == "exec"]
        assert any(e.get("cancelled") and "sleep 300" in e["command"] for e in execs), execs

        # A refusal stays an immediate error: no task made, nothing run.
        made = len(tasks.created)
        refused(
            await client.call_tool("exec", {"session": name, "command": "touch denied.txt && rm -rf /"}),
            "refused: ",
            "deny-risky",
        )
        refused(
            await client.call_tool(
                "exec", {"session": name, "command": "touch t.txt", "timeout_seconds": "9"}
            ),
            "invalid",
            "timeout_seconds",
        )
        refused(await client.call_tool("exec", {"session": "mcp-nope", "command": "true"}), "not found")
        assert len(tasks.created) == made and not (ws / "denied.txt").exists() and not (ws / "t.txt").exists()
