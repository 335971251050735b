"""Two API replicas behind one address (a round-robin TCP proxy, a new connection per request) serve one MCP
client: a 2026-07-28 ``input_required`` retry that lands on the other replica is applied (the shared
``HANGAR_MCP_STATE_KEY``), and a subscriber on replica A hears a change made through replica B (changes come
from the apiserver's watches, events from the shared database). The SDK's ``Client`` over real HTTP, the
real Claude Code CLI against a ScriptedModel."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from hangar.devcluster.controlplane import free_port, stop_process
from hangar.devcluster.stack import Stack, wait_http
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, wait
from .test_mcp_e2e import MODERN, claude_env, data, in_thread, new_session, pending
from .test_mcp_e2e import _cleanup as _cleanup  # the autouse fixture deleting what a test made
from .test_mcp_subscriptions_e2e import Heard, listening
from .test_mcp_tasks_e2e import (
    EXTENSION,
    CancelTask,
    Open,
    TaskCreated,
    TaskIdParams,
    TasksClient,
    TaskState,
    UpdateParams,
    UpdateTask,
    get_task,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


@contextmanager
def replicas(
    stack: Stack, n: int = 2, procs: list[subprocess.Popen[bytes]] | None = None
) -> Iterator[list[int]]:
    """``n`` more API processes on the stack's apiserver and database, with one MCP state key (``procs``:
    filled with their processes, for a test that kills one)."""
    root = Path(tempfile.mkdtemp(prefix="hangar-replicas-", dir="/tmp"))
    key = secrets.token_urlsafe(32)
    procs = [] if procs is None else procs
    ports = [free_port() for _ in range(n)]
    try:
        for i, port in enumerate(ports):
            env = {**stack.env(), "HANGAR_API_PORT": str(port), "HANGAR_MCP_STATE_KEY": key}
            log = root / f"api-{i}.log"
            with log.open("ab") as fh:
                p = subprocess.Popen(
                    [*stack.hangar(), "api", "--host", "127.0.0.1"],
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=str(root),
                )
            procs.append(p)
            wait_http(f"http://127.0.0.1:{port}/readyz", 60, p, log)
        yield ports
    finally:
        for p in procs:
            if p.poll() is None:
                stop_process(p.pid, p, grace=10)
        shutil.rmtree(root, ignore_errors=True)


class RoundRobin:
    """A TCP proxy sending each new connection to the next port in turn; ``served`` records where."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.served: list[int] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = self.ports[len(self.served) % len(self.ports)]
        self.served.append(port)
        up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))

    async def __aenter__(self) -> RoundRobin:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.close()


@asynccontextmanager
async def client_at(
    stack: Stack, url: str, *, fresh_connections: bool = False, **kw: Any
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {stack.token_for('mcp-client')}"}
    if fresh_connections:
        headers["Connection"] = "close"  # every request a new connection: the proxy alternates replicas
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), **kw) as client:
        yield client


async def test_two_replicas_behind_one_address_serve_one_client(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-rep.txt"),
        Step(when="tool_result", text="FINAL: written."),
        Step(when="and again", text="FINAL: again."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-rep", "mcp-env-ask", "write it")
    [p] = await in_thread(wait, lambda: pending(api, "mcp-rep"), 120, "the approval")
    uri = "hangar://sessions/mcp-rep"
    args = {"ref": "mcp-rep", "timeout_seconds": 120}

    async def allow(_: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"decision": "allow"})

    with replicas(stack) as (port_a, port_b):
        a_url, b_url = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
        heard = Heard()
        async with (
            RoundRobin([port_a, port_b]) as proxy,
            client_at(stack, a_url, mode="auto") as on_a,
            listening(on_a, [uri], heard),
            client_at(
                stack,
                f"http://127.0.0.1:{proxy.port}",
                fresh_connections=True,
                mode=MODERN,
                elicitation_callback=allow,
            ) as client,
        ):
            first = await client.session.call_tool("wait_for_turn", args, allow_input_required=True)
            assert isinstance(first, InputRequiredResult), first
            asked_on = proxy.served[-1]
            [key] = list(first.input_requests or {})
            assert key == f"approve-{p['id']}"
            reply = {key: ElicitResult(action="accept", content={"decision": "allow"})}
            before = len(proxy.served)
            r = await client.session.call_tool(
                "wait_for_turn",
                args,
                input_responses=reply,  # type: ignore[arg-type]
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert proxy.served[before] != asked_on, "the retry reached the other replica"
            assert isinstance(r, CallToolResult)
            out = data(r)
            assert out["done"] and out["phase"] == "Completed", out
            assert out["approval"] == {
                "id": p["id"],
                "outcome": "answered",
                "decision": "allow",
                "message": None,
            }
            # A change made through replica B reaches the subscriber on replica A.
            await asyncio.sleep(1)
            start = time.monotonic()
            async with httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {stack.token}"}, timeout=30
            ) as b:
                sent = await b.post(f"{b_url}/api/sessions/mcp-rep/messages", json={"message": "and again"})
                assert sent.status_code in (200, 201, 202), sent.text
            await heard.next(uri, start, timeout=30)
    assert (await in_thread(api.wait_turn, "mcp-rep", 2))["phase"] == "Completed"


# --- tasks across replicas ----------------------------------------------------------------------------------
async def until_status(client: Client, task_id: str, status: str, timeout: float = 60) -> TaskState:
    deadline = time.monotonic() + timeout
    while True:
        st = await get_task(client, task_id)
        if st.status == status or time.monotonic() > deadline:
            assert st.status == status, st
            return st
        await asyncio.sleep(0.3)


async def listen_tasks(
    stack: Stack,
    url: str,
    task_ids: list[str],
    heard: list[dict[str, Any]],
    acked: asyncio.Event,
    declare: bool,
) -> dict[str, Any] | None:
    """A raw 2026-07-28 ``subscriptions/listen`` with ``taskIds`` (the SDK's listen has no such filter):
    records each ``notifications/tasks`` until every task is final; returns the JSON-RPC error if refused."""
    caps: dict[str, Any] = {"extensions": {EXTENSION: {}}} if declare else {}
    body = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"taskIds": task_ids},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "raw-listener", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": caps,
            },
        },
    }
    headers = {
        "Authorization": f"Bearer {stack.token_for('mcp-client')}",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
        "Accept": "application/json, text/event-stream",
    }
    final: set[str] = set()
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        http.stream("POST", f"{url}/mcp", json=body, headers=headers) as resp,
    ):
        async for line in resp.aiter_lines():
            if not line.startswith("data:") and not line.startswith("{"):
                continue
            msg = json.loads(line.removeprefix("data:"))
            if "error" in msg:
                return dict(msg["error"])
            if msg.get("method") == "notifications/subscriptions/acknowledged":
                assert msg["params"]["notifications"]["taskIds"] == task_ids, msg
                acked.set()
            elif msg.get("method") == "notifications/tasks":
                assert msg["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 41, msg
                heard.append(msg["params"])
                if msg["params"]["status"] in ("completed", "failed", "cancelled"):
                    final.add(msg["params"]["taskId"])
                if final == set(task_ids):
                    return None
    return None


async def never(_: Any, params: Any) -> ElicitResult:
    raise AssertionError(f"a task's form is answered with tasks/update, not asked here: {params}")


async def test_a_task_run_by_one_replica_is_followed_answered_and_cancelled_through_the_other(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-rep-task.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-rep-task", "mcp-env-ask", "write it")
    [p] = await in_thread(wait, lambda: pending(api, "mcp-rep-task"), 120, "the approval")
    args = {"ref": "mcp-rep-task", "timeout_seconds": 120}
    with replicas(stack) as (port_a, port_b):
        a_url, b_url = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
        async with (
            # It can elicit: its task asks the forms (answered here with tasks/update, by hand).
            client_at(
                stack, a_url, mode=MODERN, extensions=[TasksClient()], elicitation_callback=never
            ) as on_a,
            client_at(stack, b_url, mode=MODERN, extensions=[TasksClient()]) as on_b,
        ):
            # Two tasks made (and run) on replica A.
            kept = await on_a.session.call_tool("wait_for_turn", args, allow_claimed=True)
            dropped = await on_a.session.call_tool("wait_for_turn", args, allow_claimed=True)
            assert isinstance(kept, TaskCreated) and isinstance(dropped, TaskCreated), (kept, dropped)
            # A listener on replica B follows the one A runs; without the extension it is refused (-32021).
            refused = await listen_tasks(stack, b_url, [kept.task_id], [], asyncio.Event(), declare=False)
            assert refused is not None and refused["code"] == -32021, refused
            heard: list[dict[str, Any]] = []
            acked = asyncio.Event()
            listener = asyncio.create_task(listen_tasks(stack, b_url, [kept.task_id], heard, acked, True))
            await asyncio.wait_for(acked.wait(), 30)
            # Replica B reads the form A's task asks, and cancels the other task: cancelled on every replica.
            st = await until_status(on_b, kept.task_id, "input_required")
            [key] = list(st.input_requests or {})
            assert key == f"approve-{p['id']}", st
            await on_b.session.send_request(CancelTask(params=TaskIdParams(task_id=dropped.task_id)), Open)
            assert (await get_task(on_a, dropped.task_id)).status == "cancelled"
            # Answered through B, applied by A's task, which completes with the tool's result.
            answer = {key: {"action": "accept", "content": {"decision": "allow"}}}
            await on_b.session.send_request(
                UpdateTask(params=UpdateParams(task_id=kept.task_id, input_responses=answer)), Open
            )
            done = await until_status(on_b, kept.task_id, "completed", timeout=120)
            out = (done.result or {})["structuredContent"]
            assert out["done"] and out["phase"] == "Completed", out
            assert out["approval"] == {
                "id": p["id"],
                "outcome": "answered",
                "decision": "allow",
                "message": None,
            }
            assert await asyncio.wait_for(listener, 30) is None
            # The cancelled task stays cancelled (A's runner stopped; nothing overwrote it).
            assert (await get_task(on_b, dropped.task_id)).status == "cancelled"
    statuses = [n["status"] for n in heard]
    assert "input_required" in statuses and statuses[-1] == "completed", statuses
    assert heard[-1]["result"] == done.result and heard[-1]["taskId"] == kept.task_id
    rec = next(
        x for x in api.get("/api/sessions/mcp-rep-task/approvals").json()["recent"] if x["id"] == p["id"]
    )
    assert rec["phase"] == "Allowed" and rec["by"] == "mcp-client"


async def test_a_task_whose_replica_died_is_failed_by_the_other(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    """Replica A runs a task and is killed (no cancel written, no beat any more): replica B fails it with the
    reason once A's last beat is 30 s old, instead of showing it working until its TTL (an hour)."""
    model.add(
        Step(text="Writing.", command="echo hi > mcp-rep-dead.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-rep-dead", "mcp-env-ask", "write it")
    await in_thread(wait, lambda: pending(api, "mcp-rep-dead"), 120, "the approval")
    procs: list[subprocess.Popen[bytes]] = []
    with replicas(stack, procs=procs) as (port_a, port_b):
        a_url, b_url = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
        args = {"ref": "mcp-rep-dead", "timeout_seconds": 600}
        async with client_at(
            stack, a_url, mode=MODERN, extensions=[TasksClient()], elicitation_callback=never
        ) as on_a:
            made = await on_a.session.call_tool("wait_for_turn", args, allow_claimed=True)
            assert isinstance(made, TaskCreated), made
        async with client_at(stack, b_url, mode=MODERN, extensions=[TasksClient()]) as on_b:
            await until_status(on_b, made.task_id, "input_required")
            os.kill(procs[0].pid, signal.SIGKILL)
            await in_thread(procs[0].wait)
            killed = time.monotonic()
            st = await until_status(on_b, made.task_id, "failed", timeout=120)
            waited = time.monotonic() - killed
            assert "stopped (no heartbeat for 30 s)" in (st.error or {}).get("message", ""), st
            assert "call the tool again" in (st.status_message or ""), st
            assert 20 < waited < 90, waited  # its last beat's age, not the task's hour
