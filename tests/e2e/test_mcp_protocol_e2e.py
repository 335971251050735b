"""What other MCP clients found (issue 13), with the SDK's own ``Client`` over real HTTP in both eras and with
raw HTTP where the wire itself is the point: refusals that say why, input schemas with REST's rules, the same
capabilities in both eras, a bad ``since``, and resuming a dropped handshake-era stream (SEP-1699)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

from hangar.devcluster.stack import Stack
from hangar.models.base import NAME_PATTERN
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed
from .test_mcp_e2e import MODERN, SLOW, claude_env, connect, new_session, read_json, text
from .test_mcp_e2e import _cleanup as _cleanup  # the autouse fixture deleting what a test made

pytestmark = [pytest.mark.e2e]
needs_clis = pytest.mark.skipif(
    not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"
)


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
async def test_refusals_start_with_their_kind_and_say_why(stack: Stack, mode: str) -> None:
    api = Api(stack)
    async with connect(stack, mode=mode) as client:

        async def refusal(tool: str, args: dict[str, Any]) -> str:
            r = await client.call_tool(tool, args)
            assert r.is_error, r
            return text(r)

        env = {"environment": "mcp-env-nope", "message": "hello"}
        for bad in ("Bad_Name", "mc-x-", "x" * 41):
            msg = await refusal("new_session", {"name": bad, **env})
            assert msg.startswith("invalid: name: "), msg
            assert NAME_PATTERN in msg or "at most 40" in msg, msg
        msg = await refusal(
            "new_session", {"name": "mcp-blank", "environment": "default", "message": " \n\t"}
        )
        assert msg.startswith("invalid: message: ") and r"\S" in msg, msg
        msg = await refusal("wait_for_turn", {"ref": "mcp-x", "timeout_seconds": "10"})
        assert msg.startswith("invalid: timeout_seconds: ") and "integer" in msg, msg
        msg = await refusal("steer_turn", {"ref": "mcp-x", "interrupt": "true"})
        assert msg.startswith("invalid: interrupt: ") and "boolean" in msg, msg
        msg = await refusal("answer_approval", {"ref": "mcp-x", "approval": "ap-1", "decision": "maybe"})
        assert msg.startswith("invalid: ") and "approval: " in msg and "decision: " in msg, msg
        assert (await refusal("get_session", {"name": "mcp-nope"})) == "not found: no session 'mcp-nope'"
        msg = await refusal("steer_turn", {"ref": "mcp-x"})
        assert msg == "invalid: a steer needs a message (or interrupt=true to stop the turn)", msg
        msg = await refusal("new_session", {"name": "mcp-new", **env})
        assert msg.startswith("invalid: unknown environment 'mcp-env-nope'"), msg
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    # The schemas carry REST's rules, so a client can check before it calls.
    name = tools["new_session"]["properties"]["name"]
    assert name["pattern"] == NAME_PATTERN and name["maxLength"] == 40 and name["minLength"] == 1
    assert tools["send_to_session"]["properties"]["message"]["pattern"] == r"\S"
    assert tools["answer_approval"]["properties"]["approval"]["pattern"] == "^ap-[0-9a-f]{12}$"
    assert tools["wait_for_turn"]["properties"]["timeout_seconds"]["type"] == "integer"
    assert api.get("/api/sessions/mcp-blank").status_code == 404
    assert api.get("/api/sessions/mcp-new").status_code == 404


async def test_capabilities_are_the_same_in_both_eras_and_there_are_no_prompts(stack: Stack) -> None:
    seen = {}
    for mode in ("auto", "legacy"):  # auto: server/discover, which answers 2026-07-28
        async with connect(stack, mode=mode) as client:
            assert client.protocol_version == (MODERN if mode == "auto" else "2025-11-25")
            caps = client.server_capabilities
            seen[mode] = caps.model_dump(mode="json", exclude_none=True, by_alias=True)
            with pytest.raises(MCPError) as e:
                await client.get_prompt("anything")
            assert e.value.error.code == METHOD_NOT_FOUND, e.value.error
    # The same, but for the tasks extension: extensions exist in 2026-07-28 only (the handshake era's
    # capabilities have no such field).
    assert seen["auto"].pop("extensions") == {"io.modelcontextprotocol/tasks": {}}, seen
    assert (
        seen["auto"]
        == seen["legacy"]
        == {
            "resources": {"subscribe": True, "listChanged": False},
            "tools": {"listChanged": False},
        }
    ), seen


async def test_a_bad_since_is_invalid_params_with_the_reason(stack: Stack) -> None:
    for mode in (MODERN, "legacy"):
        async with connect(stack, mode=mode) as client:
            for uri in (
                "hangar://sessions/mcp-any/events?since=yesterday",
                "hangar://sessions/mcp-any/events?since=-1",
                "hangar://jobs/mcp-any/events?since=job:x",
            ):
                with pytest.raises(MCPError) as e:
                    await read_json(client, uri)
                assert e.value.error.code == INVALID_PARAMS, (uri, e.value.error)
                assert e.value.error.message.startswith("invalid: since="), e.value.error
            with pytest.raises(MCPError) as e:
                await read_json(client, "hangar://sessions/mcp-nope/events?since=3")
            assert e.value.error.code == INVALID_PARAMS and "no session 'mcp-nope'" in e.value.error.message


async def read_until(resp: httpx.Response, done: Callable[[dict[str, str]], bool]) -> list[dict[str, str]]:
    """The SSE events read from ``resp`` until one is ``done`` (or the stream ends)."""
    buf = ""
    async for chunk in resp.aiter_text():
        buf += chunk
        if "\n\n" not in buf.replace("\r\n", "\n"):
            continue
        events = sse_events(buf.replace("\r\n", "\n").rsplit("\n\n", 1)[0])
        if any(done(e) for e in events):
            return events
    return sse_events(buf)


def sse_events(body: str) -> list[dict[str, str]]:
    """The events of an SSE body: each a dict of its fields (id, retry, data, …)."""
    out = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                key, _, value = line.partition(":")
                fields[key] = fields.get(key, "") + value.removeprefix(" ")
        if fields:
            out.append(fields)
    return out


@needs_clis
async def test_a_2025_client_resumes_a_dropped_wait_for_turn_with_last_event_id(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Running the slow thing.", command=SLOW.format(s=8)),
        Step(when="tool_result", text="FINAL: slow thing done."),
    )
    claude_env(cluster, "mcp-env-plain", model)
    api = Api(stack)
    new_session(api, "mcp-resume", "mcp-env-plain", "run the slow thing")
    headers = {
        "Authorization": f"Bearer {stack.token_for('mcp-client')}",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx.AsyncClient(base_url=stack.api_url, headers=headers, timeout=60) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        r = await http.post("/mcp", json=init)
        assert r.status_code == 200, r.text
        session = {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        r = await http.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
        )
        assert r.status_code == 202, r.text
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "wait_for_turn",
                "arguments": {"ref": "mcp-resume", "timeout_seconds": 120},
                "_meta": {"progressToken": "p-1"},
            },
        }
        # Read the stream until the first progress notification, then drop the connection.
        async with http.stream("POST", "/mcp", json=call, headers=session) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            got = await read_until(resp, lambda e: "progress" in e.get("data", ""))
        assert got[0].get("retry") == "1000" and got[0].get("id"), got  # the priming event
        assert all(e.get("id") for e in got), got
        last = got[-1]["id"]
        # Resume as SSE clients do: GET with Last-Event-ID (again, after `retry:`, if the stream ends first).
        answer: dict[str, Any] | None = None
        for _ in range(60):
            async with http.stream("GET", "/mcp", headers={**session, "Last-Event-ID": last}) as resp:
                assert resp.status_code == 200
                more = await read_until(resp, lambda e: json.loads(e.get("data") or "{}").get("id") == 2)
            ids = [e["id"] for e in more if e.get("id")]
            assert all(int(i) > int(last) for i in ids), (last, ids)
            last = ids[-1] if ids else last
            answer = next((json.loads(e["data"]) for e in more if '"id":2' in e.get("data", "")), None)
            if answer is not None:
                break
            await asyncio.sleep(1)
    assert answer is not None
    out = answer["result"]["structuredContent"]
    assert out["done"] and out["phase"] == "Completed" and "slow thing done" in out["summary"], out
