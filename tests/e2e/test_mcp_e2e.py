"""hangar's MCP server end to end: the official SDK ``Client`` over real HTTP (both protocol eras) → the API
sidecar's ``/mcp`` → resources → operator → driver → the real Claude Code CLI against a ScriptedModel."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    BlobResourceContents,
    CallToolResult,
    ElicitRequestFormParams,
    ElicitResult,
    Implementation,
    InputRequiredResult,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, wait, workspace

pytestmark = [pytest.mark.e2e]
needs_clis = pytest.mark.skipif(
    not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"
)
MODERN = "2026-07-28"
# A tool that runs long enough to steer it (Claude refuses a bare `sleep N` on its own).
SLOW = "python3 -c 'import time; time.sleep({s})'"

Answer = Callable[[ElicitRequestFormParams], ElicitResult]


# --- helpers ------------------------------------------------------------------------------------------------
@asynccontextmanager
async def connect(
    stack: Stack,
    subject: str | None = "mcp-client",
    *,
    mode: str = MODERN,
    answer: Answer | None = None,
    asked: list[ElicitRequestFormParams] | None = None,
    name: str | None = None,
    delay: float = 0,
) -> AsyncIterator[Client]:
    """The SDK's Client on the stack's /mcp, with ``subject``'s token. With ``answer`` it declares
    elicitation and answers each form with it (recording the forms in ``asked``), after ``delay`` seconds
    (a person reading the form). ``name`` is its clientInfo name."""
    headers = {"Authorization": f"Bearer {stack.token_for(subject)}"} if subject else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=900), follow_redirects=True)

    async def elicit(_: Any, params: Any) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams), params
        if asked is not None:
            asked.append(params)
        assert answer is not None
        await asyncio.sleep(delay)
        return answer(params)

    async with (
        http,
        Client(
            streamable_http_client(f"{stack.api_url}/mcp", http_client=http),
            mode=mode,
            elicitation_callback=elicit if answer else None,
            client_info=Implementation(name=name, version="1") if name else None,
        ) as client,
    ):
        yield client


def data(r: CallToolResult) -> dict[str, Any]:
    assert not r.is_error, text(r)
    assert isinstance(r.structured_content, dict), r
    return r.structured_content


def text(r: CallToolResult) -> str:
    return "\n".join(c.text for c in r.content if isinstance(c, TextContent))


def refused(r: CallToolResult, *needles: str) -> str:
    msg = text(r)
    assert r.is_error, msg
    for n in needles:
        assert n in msg, msg
    return msg


def claude_env(cluster: Cluster, name: str, model: ScriptedModel, approvals: str | None = None) -> None:
    environment(
        cluster,
        name,
        {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        approvals,
    )


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def pending(api: Api, session: str) -> list[dict[str, Any]]:
    r = api.get(f"/api/sessions/{session}/approvals")
    assert r.status_code == 200, r.text
    return list(r.json()["pending"])


def answering(decision: str, message: str | None = None) -> Answer:
    def answer(params: ElicitRequestFormParams) -> ElicitResult:
        content: dict[str, Any] = {"decision": decision}
        if message:
            content["message"] = message
        return ElicitResult(action="accept", content=content)

    return answer


CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _cleanup(stack: Stack, cluster: Cluster) -> Any:
    yield
    api = Api(stack)
    while CREATED:
        name = CREATED.pop()
        api.delete(f"/api/sessions/{name}")
        cluster.kubectl("delete", "job.hangar.dev", name, "--wait=false", "--ignore-not-found", check=False)


def new_session(api: Api, name: str, env: str, message: str, **extra: Any) -> None:
    r = api.post("/api/sessions", {"name": name, "environment": env, "message": message, **extra})
    assert r.status_code == 201, r.text
    CREATED.append(name)


# --- server and auth ----------------------------------------------------------------------------------------
async def test_no_or_unknown_token_is_401_and_the_tools_are_listed(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        hdrs = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN}
        r = await http.post("/mcp", json=body, headers={**hdrs, "Mcp-Method": "tools/list"})
        assert r.status_code == 401 and "Bearer" in r.headers.get("www-authenticate", ""), r.text
        r = await http.post(
            "/mcp", json=body, headers={**hdrs, "Mcp-Method": "tools/list", "Authorization": "Bearer nope"}
        )
        assert r.status_code == 401, r.text
        # REST is unchanged beside it.
        assert (await http.get("/healthz")).text == "ok"
    with pytest.raises(Exception):  # noqa: B017 - the SDK reports the 401 its own way
        async with connect(stack, None) as client:
            await client.list_tools()
    for mode in (MODERN, "legacy"):
        async with connect(stack, mode=mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) >= {
                "get_session",
                "get_job",
                "send_to_session",
                "new_session",
                "follow_up_job",
                "steer_turn",
                "answer_approval",
                "wait_for_turn",
            }
            schema = tools["answer_approval"].input_schema
            assert schema["properties"]["decision"]["enum"] == ["allow", "deny", "allow_always"]
            assert set(schema["required"]) == {"ref", "approval", "decision"}
            assert tools["wait_for_turn"].input_schema["properties"]["timeout_seconds"]["maximum"] == 600


async def test_bad_input_is_a_tool_error_with_the_reason_and_changes_nothing(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(Step(text="FINAL: hello."))
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    new_session(api, "mcp-bad", "mcp-env-plain", "say hello")
    await in_thread(api.wait_turn, "mcp-bad", 1)
    async with connect(stack) as client:
        refused(await client.call_tool("get_session", {"name": "mcp-nope"}), "not found", "mcp-nope")
        refused(await client.call_tool("wait_for_turn", {"ref": "mcp-nope"}), "not found")
        refused(await client.call_tool("wait_for_turn", {"ref": "mcp-bad", "timeout_seconds": 601}), "600")
        refused(await client.call_tool("send_to_session", {"name": "mcp-bad", "message": ""}), "message")
        refused(
            await client.call_tool(
                "answer_approval", {"ref": "mcp-bad", "approval": "ap-0", "decision": "maybe"}
            ),
            "decision",
        )
        refused(
            await client.call_tool(
                "answer_approval", {"ref": "mcp-bad", "approval": "ap-000000000000", "decision": "allow"}
            ),
            "not found",
            "has no approval 'ap-000000000000'",
        )
        refused(await client.call_tool("steer_turn", {"ref": "mcp-bad"}), "needs a message")
        refused(
            await client.call_tool("steer_turn", {"ref": "mcp-bad", "message": "hello?"}),
            "refused",
            "no running turn to steer",
        )
        refused(
            await client.call_tool(
                "new_session", {"name": "mcp-bad", "environment": "mcp-env-plain", "message": "again"}
            ),
            "refused",
            "already exists",
        )
        refused(
            await client.call_tool(
                "new_session", {"name": "mcp-new", "environment": "mcp-env-nope", "message": "x"}
            ),
            "unknown environment",
        )
        s = data(await client.call_tool("get_session", {"name": "mcp-bad"}))
    assert [t["index"] for t in s["turns"]] == [1], "nothing was sent"
    assert api.get("/api/sessions/mcp-new").status_code == 404
    assert s["pending_approvals"] == [] and s["turns"][0]["phase"] == "Completed"


# --- approvals through wait_for_turn ------------------------------------------------------------------------
@needs_clis
async def test_2026_client_allows_an_approval_through_an_input_required_round(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-allowed.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-allow", "mcp-env-ask", "write it")
    asked: list[ElicitRequestFormParams] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async with connect(stack, answer=answering("allow"), asked=asked) as client:
        # The wire: one input_required round, keyed approve-<id>, with the decision form.
        first = await client.session.call_tool(
            "wait_for_turn", {"ref": "mcp-allow", "timeout_seconds": 120}, allow_input_required=True
        )
        assert isinstance(first, InputRequiredResult), first
        [(key, req)] = (first.input_requests or {}).items()
        [a] = await in_thread(pending, api, "mcp-allow")
        assert key == f"approve-{a['id']}" and first.request_state
        form = req.params
        assert isinstance(form, ElicitRequestFormParams)
        assert "echo hi > mcp-allowed.txt" in form.message and a["id"] in form.message
        props = form.requested_schema["properties"]
        assert props["decision"]["enum"] == ["allow", "deny", "allow_always"] and "message" in props
        assert form.requested_schema["required"] == ["decision"]
        assert not (workspace(stack, "mcp-allow") / "mcp-allowed.txt").exists(), "nothing ran yet"
        # The SDK's loop answers it (the callback says allow) and retries; hangar keeps waiting to the end.
        r = await client.call_tool(
            "wait_for_turn", {"ref": "mcp-allow", "timeout_seconds": 120}, progress_callback=on_progress
        )
    out = data(r)
    assert len(asked) == 1 and a["id"] in asked[0].message
    assert out["done"] and out["phase"] == "Completed" and out["outcome"] == "completed", out
    assert "written" in out["summary"] and out["pending_approvals"] == []
    assert out["approval"] == {
        "id": a["id"],
        "outcome": "answered",
        "decision": "allow",
        "message": None,
    }, out
    assert (workspace(stack, "mcp-allow") / "mcp-allowed.txt").read_text().strip() == "hi"
    rec = next(x for x in api.get("/api/sessions/mcp-allow/approvals").json()["recent"] if x["id"] == a["id"])
    assert rec["phase"] == "Allowed" and rec["by"] == "mcp-client" and rec["resolved_by"] == "person"
    assert progress and all(total == 120 for _, total, _ in progress) and "mcp-allow-1" in str(progress[-1])


@needs_clis
async def test_2025_client_denies_with_a_message_through_elicitation_create(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-denied.txt"),
        Step(when="not in this repo", text="FINAL: understood, not writing."),
        Step(when="tool_result", text="FINAL: understood, not writing."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-deny", "mcp-env-ask", "write it")
    asked: list[ElicitRequestFormParams] = []
    async with connect(
        stack, mode="legacy", answer=answering("deny", "not in this repo"), asked=asked
    ) as client:
        out = data(await client.call_tool("wait_for_turn", {"ref": "mcp-deny", "timeout_seconds": 120}))
    assert len(asked) == 1 and "echo hi > mcp-denied.txt" in asked[0].message
    assert out["done"] and out["phase"] == "Completed", out
    assert out["approval"]["outcome"] == "answered" and out["approval"]["decision"] == "deny", out
    assert any(req.contains("not in this repo") for req in model.requests[1:]), "the agent got the message"
    assert not (workspace(stack, "mcp-deny") / "mcp-denied.txt").exists()
    rec = api.get("/api/sessions/mcp-deny/approvals").json()["recent"][0]
    assert rec["phase"] == "Denied" and rec["message"] == "not in this repo" and rec["by"] == "mcp-client"


@needs_clis
async def test_a_client_without_elicitation_sees_pending_approvals_and_answers_them(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-manual.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-manual", "mcp-env-ask", "write it")
    async with connect(stack) as client:
        out = data(await client.call_tool("wait_for_turn", {"ref": "mcp-manual", "timeout_seconds": 120}))
        assert not out["done"] and out["phase"] == "Running" and out["approval"] is None, out
        [p] = out["pending_approvals"]
        assert "echo hi > mcp-manual.txt" in p["command"] and p["phase"] == "Pending"
        s = data(await client.call_tool("get_session", {"name": "mcp-manual"}))
        assert [x["id"] for x in s["pending_approvals"]] == [p["id"]]
        args = {"ref": "mcp-manual", "approval": p["id"]}
        refused(await client.call_tool("answer_approval", {**args, "decision": "maybe"}), "decision")
        assert [x["id"] for x in await in_thread(pending, api, "mcp-manual")] == [p["id"]], "still pending"
        decided = data(await client.call_tool("answer_approval", {**args, "decision": "allow"}))
        assert decided["decision"] == "allow" and decided["by"] == "mcp-client"
        refused(
            await client.call_tool("answer_approval", {**args, "decision": "deny"}),
            "refused",
            "already decided: allow by mcp-client",
        )
        out = data(await client.call_tool("wait_for_turn", {"ref": "mcp-manual", "timeout_seconds": 120}))
    assert out["done"] and out["phase"] == "Completed" and out["pending_approvals"] == [], out
    assert (workspace(stack, "mcp-manual") / "mcp-manual.txt").exists()


@needs_clis
async def test_a_declined_approval_is_not_asked_of_that_client_again_and_stays_pending(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-declined.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-decline", "mcp-env-ask", "write it")
    [p] = await in_thread(wait, lambda: pending(api, "mcp-decline"), 120, "the approval")
    asked: list[ElicitRequestFormParams] = []
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    def decline(_: ElicitRequestFormParams) -> ElicitResult:
        return ElicitResult(action="decline")

    args = {"ref": "mcp-decline", "timeout_seconds": 6}
    # The person takes 5 s over the form: timeout_seconds counts from the first round, not again. Restarted,
    # the call would take 11 s or more; 5 s of slack keeps this true on a loaded machine.
    async with connect(stack, answer=decline, asked=asked, name="ide-a", delay=5) as client:
        start = time.monotonic()
        out = data(await client.call_tool("wait_for_turn", args, progress_callback=on_progress))
        took = time.monotonic() - start
    assert len(asked) == 1, "asked once, not again after the decline"
    assert 6 <= took < 11, took
    assert progress == sorted(progress) and progress[-1] <= 6, progress
    assert out["timed_out"] and not out["done"] and out["phase"] == "Running", out
    assert out["approval"] == {"id": p["id"], "outcome": "declined"}
    # A later call of the same client, in either era, is not asked again either; the approval stays pending.
    for mode in (MODERN, "legacy"):
        async with connect(stack, mode=mode, answer=decline, asked=asked, name="ide-a") as client:
            out = data(await client.call_tool("wait_for_turn", {**args, "timeout_seconds": 2}))
        assert len(asked) == 1 and out["timed_out"], (mode, out)
        assert [x["id"] for x in out["pending_approvals"]] == [p["id"]]
    assert [x["id"] for x in await in_thread(pending, api, "mcp-decline")] == [p["id"]]
    # Another client is asked, and its answer decides it.
    async with connect(stack, answer=answering("allow"), asked=asked, name="ide-b") as client:
        out = data(await client.call_tool("wait_for_turn", {**args, "timeout_seconds": 120}))
    assert len(asked) == 2 and out["done"] and out["phase"] == "Completed", out
    assert out["approval"] == {"id": p["id"], "outcome": "answered", "decision": "allow", "message": None}


# --- a question ---------------------------------------------------------------------------------------------
QUESTION = "Use the streaming parser or load the whole file?"


@needs_clis
async def test_a_question_is_answered_through_the_form_once(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Asking.", command=f'hangar-agent ask "{QUESTION}"'),
        Step(when="tool_result", text="FINAL: waiting for your answer."),
        Step(when="streaming, please", text="FINAL: streaming it is."),
    )
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    new_session(api, "mcp-q", "mcp-env-plain", "parse the csv")
    args = {"ref": "mcp-q", "timeout_seconds": 120}
    async with connect(stack, answer=answering("unused")) as client:
        first = await client.session.call_tool("wait_for_turn", args, allow_input_required=True)
        assert isinstance(first, InputRequiredResult), first
        [(key, req)] = (first.input_requests or {}).items()
        assert key == "answer-1"
        form = req.params
        assert isinstance(form, ElicitRequestFormParams)
        assert form.message == f"Session mcp-q asks: {QUESTION}"
        assert form.requested_schema["properties"]["answer"]["type"] == "string"
        assert form.requested_schema["required"] == ["answer"]
        assert api.turn("mcp-q", 1)["phase"] == "NeedsInput"  # type: ignore[index]
        reply = {key: ElicitResult(action="accept", content={"answer": "streaming, please"})}
        r = await client.session.call_tool(
            "wait_for_turn",
            args,
            input_responses=reply,  # type: ignore[arg-type]
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(r, CallToolResult)
        out = data(r)
        assert out["done"] and out["turn"]["name"] == "mcp-q-2" and out["phase"] == "Completed", out
        assert "streaming it is" in out["summary"] and out["question"] is None
        assert out["elicitation"]["outcome"] == "answered" and out["elicitation"]["turns"] == ["mcp-q-2"]
        t2 = api.turn("mcp-q", 2)
        assert t2 is not None and t2["message"] == "streaming, please" and t2["class"] == "new_info"
        # The same answer again (a retry, another client): nothing is sent.
        r = await client.session.call_tool(
            "wait_for_turn",
            args,
            input_responses=reply,  # type: ignore[arg-type]
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(r, CallToolResult)
        out = data(r)
        assert out["elicitation"]["outcome"] == "stale", out
        assert out["turn"]["name"] == "mcp-q-2" and api.turn("mcp-q", 3) is None
    # A client without elicitation gets the question in the result.
    model.add(
        Step(text="Asking.", command='hangar-agent ask "Which branch?"'),
        Step(when="tool_result", text="FINAL: waiting."),
    )
    async with connect(stack) as client:
        sent = data(await client.call_tool("send_to_session", {"name": "mcp-q", "message": "now the tsv"}))
        assert sent["kind"] == "turn" and sent["turn"]["name"] == "mcp-q-3"
        out = data(await client.call_tool("wait_for_turn", args))
    assert out["done"] and out["phase"] == "NeedsInput" and out["question"] == "Which branch?", out
    assert out["elicitation"] is None
    # A handshake-era client is asked with elicitation/create, and the wait goes on with its answer.
    model.add(Step(when="main, of course", text="FINAL: on main."))
    asked: list[ElicitRequestFormParams] = []

    def on_main(_: ElicitRequestFormParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"answer": "main, of course"})

    async with connect(stack, mode="legacy", answer=on_main, asked=asked) as client:
        out = data(await client.call_tool("wait_for_turn", args))
    assert [a.message for a in asked] == ["Session mcp-q asks: Which branch?"]
    assert out["elicitation"]["outcome"] == "answered" and out["turn"]["name"] == "mcp-q-4", out
    assert out["phase"] == "Completed" and "on main" in out["summary"]


# --- steering -----------------------------------------------------------------------------------------------
@needs_clis
async def test_steer_turn_reaches_the_running_turn(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Running the slow thing.", command=SLOW.format(s=5)),
        Step(when="tool_result:STEER: keep the signature", text="FINAL: kept the signature."),
        Step(when="STEER: keep the signature", text="FINAL: kept the signature."),
        Step(when="tool_result", text="FINAL: done without the steer."),
    )
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    new_session(api, "mcp-steer", "mcp-env-plain", "move the retry logic")
    await in_thread(
        wait,
        lambda: any(e["kind"] == "tool_use" for e in api.events("mcp-steer")),
        90,
        "the tool to start",
        lambda: api.debug("mcp-steer"),
    )
    async with connect(stack) as client:
        out = data(
            await client.call_tool("steer_turn", {"ref": "mcp-steer", "message": "STEER: keep the signature"})
        )
        assert out["kind"] == "steer" and out["turn"]["name"] == "mcp-steer-1", out
        assert out["steer"]["by"] == "mcp-client" and out["steer"]["status"] == "sending"
        done = data(await client.call_tool("wait_for_turn", {"ref": "mcp-steer", "timeout_seconds": 120}))
    assert done["done"] and done["phase"] == "Completed" and "kept the signature" in done["summary"], done
    steer = done["turn"]["steers"][0]
    assert steer["id"] == out["steer"]["id"] and steer["status"] == "delivered"
    assert api.turn("mcp-steer", 2) is None


# --- jobs and who may use them ------------------------------------------------------------------------------
@needs_clis
async def test_a_jobs_token_answers_its_own_job_and_not_someone_elses(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-job.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-plain", model)
    alice = Api(stack)
    alice.http.headers["Authorization"] = f"Bearer {stack.token_for('alice')}"
    r = alice.post(
        "/api/jobs",
        {"name": "mcp-job", "prompt": "write it", "environment": "mcp-env-plain", "approvals": "ask"},
    )
    assert r.status_code == 201, r.text
    CREATED.append("mcp-job")
    await in_thread(
        wait,
        lambda: alice.get("/api/jobs/mcp-job").json()["pending_approvals"],
        120,
        "the job's approval",
        lambda: alice.get("/api/jobs/mcp-job").text,
    )
    [p] = alice.get("/api/jobs/mcp-job").json()["pending_approvals"]
    async with connect(stack, "bob", answer=answering("deny")) as client:
        for name, args in (
            ("get_job", {"job_id": "mcp-job"}),
            ("wait_for_turn", {"ref": "mcp-job", "timeout_seconds": 5}),
            ("answer_approval", {"ref": "mcp-job", "approval": p["id"], "decision": "deny"}),
            ("steer_turn", {"ref": "mcp-job", "message": "stop"}),
            ("follow_up_job", {"job_id": "mcp-job", "message": "stop"}),
        ):
            refused(await client.call_tool(name, args), "not found", "no job 'mcp-job'")
        refused(await client.call_tool("get_session", {"name": "mcp-job-a1"}), "forbidden", "jobs token")
    assert [x["id"] for x in alice.get("/api/jobs/mcp-job/approvals").json()["pending"]] == [p["id"]]
    asked: list[ElicitRequestFormParams] = []
    async with connect(stack, "alice", answer=answering("allow"), asked=asked) as client:
        j = data(await client.call_tool("get_job", {"job_id": "mcp-job"}))
        assert j["state"] == "awaiting_approval" and [x["id"] for x in j["pending_approvals"]] == [p["id"]]
        out = data(await client.call_tool("wait_for_turn", {"ref": "mcp-job", "timeout_seconds": 120}))
    assert len(asked) == 1 and "job 'mcp-job' (attempt mcp-job-a1)" in asked[0].message
    assert out["kind"] == "job" and out["done"] and out["state"] == "done", out
    assert out["approval"]["outcome"] == "answered" and out["approval"]["decision"] == "allow"
    assert (workspace(stack, "mcp-job-a1") / "mcp-job.txt").exists()
    rec = alice.get(f"/api/jobs/mcp-job/approvals/{p['id']}").json()
    assert rec["by"] == "alice" and rec["phase"] == "Allowed"


# --- resources ----------------------------------------------------------------------------------------------
async def read_json(client: Client, uri: str) -> Any:
    r = await client.read_resource(uri)
    [c] = r.contents
    assert isinstance(c, TextResourceContents) and c.mime_type == "application/json", c
    return json.loads(c.text)


@needs_clis
async def test_resources_show_sessions_jobs_and_their_events(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(Step(text="FINAL: hello."), Step(text="FINAL: hello again."))
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    new_session(api, "mcp-res", "mcp-env-plain", "say hello")
    await in_thread(api.wait_turn, "mcp-res", 1)
    alice = Api(stack)
    alice.http.headers["Authorization"] = f"Bearer {stack.token_for('alice')}"
    r = alice.post(
        "/api/jobs", {"name": "mcp-res-job", "prompt": "say hello", "environment": "mcp-env-plain"}
    )
    assert r.status_code == 201, r.text
    CREATED.append("mcp-res-job")
    await in_thread(
        wait, lambda: alice.get("/api/jobs/mcp-res-job").json()["state"] == "done", 120, "the job to finish"
    )
    async with connect(stack) as client:
        s = await read_json(client, "hangar://sessions/mcp-res")
        assert s["name"] == "mcp-res" and s["turns"][0]["summary"] == "FINAL: hello.", s
        # What the spec lists: state, turns, summaries, question, checkpoints.
        assert s["state"] == s["phase"] and s["question"] is None and isinstance(s["checkpoints"], list), s
        assert s["summaries"] == [{"turn": "mcp-res-1", "outcome": "completed", "summary": "FINAL: hello."}]
        ev = await read_json(client, "hangar://sessions/mcp-res/events")
        seqs = [e["seq"] for e in ev["events"]]
        assert seqs and ev["last_seq"] == seqs[-1] and any(e["kind"] == "turn_ended" for e in ev["events"])
        later = await read_json(client, f"hangar://sessions/mcp-res/events?since={seqs[-2]}")
        # Only what came after seqs[-2]: the last event read above first (a later one may have come since).
        got = [e["seq"] for e in later["events"]]
        assert got[:1] == [seqs[-1]] and all(x > seqs[-2] for x in got), (got, seqs[-2:])
        with pytest.raises(Exception, match="no session 'mcp-nope'"):
            await read_json(client, "hangar://sessions/mcp-nope")
        j = await read_json(client, "hangar://jobs/mcp-res-job")
        assert j["id"] == "mcp-res-job" and j["state"] == "done" and j["submitter"] == "alice"
    async with connect(stack, "alice") as client:
        j = await read_json(client, "hangar://jobs/mcp-res-job")
        assert j["turns"][0]["summary"] == "FINAL: hello again."
        # What the spec lists: state, timeline, result, attempts.
        # (the job's own timeline when the operator records one; else created / started / finished)
        assert isinstance(j["timeline"], list) and len(j["timeline"]) >= 2, j
        assert j["result"]["summary"] == "FINAL: hello again." and j["result"]["session"] == "mcp-res-job-a1"
        assert [a["session"] for a in j["attempts"]] == ["mcp-res-job-a1"], j["attempts"]
        ev = await read_json(client, "hangar://jobs/mcp-res-job/events?since=0")
        assert any(e["kind"] == "job_state" for e in ev["events"]), ev
        with pytest.raises(Exception, match="jobs token"):
            await read_json(client, "hangar://sessions/mcp-res")
    async with connect(stack, "bob") as client:
        with pytest.raises(Exception, match="no job 'mcp-res-job'"):
            await read_json(client, "hangar://jobs/mcp-res-job")


@needs_clis
async def test_handed_back_files_come_as_resource_links_and_read_back_with_their_type(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    report, png = "# Report\nall good\n", bytes(range(256))
    make = (
        "printf '# Report\\nall good\\n' > report.md && "
        "python3 -c \"open('shot.png', 'wb').write(bytes(range(256)))\" && "
        "hangar-agent artifact report.md && hangar-agent artifact shot.png"
    )
    model.add(Step(text="Handing back.", command=make), Step(when="tool_result", text="FINAL: handed back."))
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    new_session(api, "mcp-art", "mcp-env-plain", "hand back a report")
    base = "hangar://sessions/mcp-art/artifacts"
    for mode in (MODERN, "legacy"):
        async with connect(stack, mode=mode) as client:
            r = await client.call_tool("wait_for_turn", {"ref": "mcp-art", "timeout_seconds": 120})
            out = data(r)
            assert out["done"] and out["outcome"] == "completed", out
            assert sorted(a["name"] for a in out["artifacts"]) == ["report.md", "shot.png"], out
            # The same artifacts as resource_link blocks beside the structured result.
            links = {c.name: c for c in r.content if isinstance(c, ResourceLink)}
            assert set(links) == {"report.md", "shot.png"}, r.content
            md, img = links["report.md"], links["shot.png"]
            assert str(md.uri) == f"{base}/1/report.md" and md.mime_type == "text/markdown"
            assert (md.size, img.size, img.mime_type) == (len(report), 256, "image/png")
            # Read back: text as text, binary as a base64 blob, each with its MIME type.
            [c] = (await client.read_resource(str(md.uri))).contents
            assert isinstance(c, TextResourceContents) and c.text == report and c.mime_type == "text/markdown"
            [b] = (await client.read_resource(str(img.uri))).contents
            assert isinstance(b, BlobResourceContents) and b.mime_type == "image/png", b
            assert base64.b64decode(b.blob) == png
            [same] = (await client.read_resource(f"{base}/mcp-art-1/report.md")).contents
            assert isinstance(same, TextResourceContents) and same.text == report, "the turn by its name"
            # Unknown turn or file, a path that climbs out or is absolute: -32602 with the reason.
            for uri, why in (
                (f"{base}/9/report.md", "has no turn 'mcp-art-9'"),
                (f"{base}/1/nope.md", "handed back no artifact 'nope.md' (it has: report.md, shot.png)"),
                (f"{base}/1/../../etc/passwd", "climbs out"),
                (f"{base}/1/%2Fetc%2Fpasswd", "absolute"),
                ("hangar://sessions/mcp-nope/artifacts/1/report.md", "no session 'mcp-nope'"),
                ("hangar://sessions/mcp-art/patch", "has no base to diff its work against"),
                ("hangar://sessions/Bad_Name/patch", "not a session name"),
            ):
                with pytest.raises(MCPError) as e:
                    await client.read_resource(uri)
                assert e.value.error.code == INVALID_PARAMS and why in e.value.error.message, (uri, e.value)
    async with connect(stack, "alice") as client:  # a jobs token: the session's rule
        with pytest.raises(MCPError, match="jobs token"):
            await client.read_resource(f"{base}/1/report.md")
