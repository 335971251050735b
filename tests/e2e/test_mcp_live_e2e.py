"""Live sandbox work over MCP end to end: the SDK's ``Client`` over real HTTP → the api's ``exec`` /
``process`` tools and ``hangar://sandboxes/<session>/watch`` → the operator's live channel → the gateway →
the real driver in the local pod runner's sandbox of a real session (its turn 1 by the real Claude Code CLI
against a ScriptedModel). And the bad input: each a clear MCP error, nothing changed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from hangar.devcluster.stack import Stack
from hangar.limits import EXEC_OUTPUT_MAX
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, workspace
from .test_mcp_e2e import MODERN, claude_env, connect, data, in_thread, new_session, read_json, refused
from .test_mcp_e2e import _cleanup as _cleanup  # the autouse fixture deleting what a test made
from .test_mcp_subscriptions_e2e import Heard, listening
from .test_mcp_subscriptions_e2e import connect as sub_connect

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


def events(api: Api, name: str, kind: str) -> list[dict[str, Any]]:
    r = api.get(f"/api/sessions/{name}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] == kind]


async def test_exec_process_and_watch_in_a_real_sandbox(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    name = "mcp-live"
    model.add(Step(text="FINAL: ready."))
    claude_env(cluster, "mcp-env-live", model)
    api = Api(stack)
    new_session(api, name, "mcp-env-live", "get ready", approvals="deny-risky")
    await in_thread(api.wait_turn, name, 1)
    ws = workspace(stack, name)
    async with connect(stack, "mcp-client", mode=MODERN) as client:
        # exec(stream=true): the output arrives as progress notifications while it runs, then the result.
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        command = (
            "for i in 1 2 3; do echo line$i; sleep 0.3; done; echo oops >&2; echo made > made.txt; exit 4"
        )
        r = await client.call_tool(
            "exec", {"session": name, "command": command, "stream": True}, progress_callback=on_progress
        )
        out = data(r)
        assert (
            out["exit_code"] == 4 and out["stdout"] == "line1\nline2\nline3\n" and out["stderr"] == "oops\n"
        ), out
        assert not out["truncated"] and not out["timed_out"]
        assert "".join(m or "" for _, m in progress).count("line") == 3, progress
        assert [v for v, _ in progress] == sorted(v for v, _ in progress)  # progress never goes back
        assert (ws / "made.txt").read_text() == "made\n"  # it ran in the session's workspace
        [audit] = await in_thread(events, api, name, "exec")
        assert audit["by"] == "mcp-client" and audit["command"] == command and audit["exit_code"] == 4, audit
        assert audit["verdict"] == "allow" and audit["policy"] == "deny-risky" and audit["ran"] is True

        # A background process: start, send input, read its output since an offset, list, stop.
        started = data(
            await client.call_tool("process", {"session": name, "action": "start", "command": "cat -n"})
        )
        pid = started["id"]
        assert started["running"], started
        data(
            await client.call_tool(
                "process", {"session": name, "action": "input", "id": pid, "input": "ping\n"}
            )
        )
        got = ""
        deadline = time.monotonic() + 30
        offset = 0
        while "ping" not in got:
            assert time.monotonic() < deadline, got
            page = data(
                await client.call_tool(
                    "process", {"session": name, "action": "read", "id": pid, "offset": offset}
                )
            )
            got += page["data"]
            offset = page["next_offset"]
            await asyncio.sleep(0.2)
        assert got.split() == ["1", "ping"], got
        listed = data(await client.call_tool("process", {"session": name, "action": "list"}))
        assert [p["id"] for p in listed["processes"]] == [pid]
        stopped = data(await client.call_tool("process", {"session": name, "action": "stop", "id": pid}))
        assert not stopped["running"], stopped

        # A watch: subscribed, a file made under the directory is notified and read back.
        made = await client.call_tool("exec", {"session": name, "command": "mkdir -p src"})  # as the agent
        assert data(made)["exit_code"] == 0, made
        uri = f"hangar://sandboxes/{name}/watch?path=src"
        heard = Heard()
        async with listening(client, [uri], heard):
            start = time.monotonic()
            wrote = await client.call_tool(
                "exec", {"session": name, "command": "echo x > src/new.txt && echo y > top.txt"}
            )
            assert data(wrote)["exit_code"] == 0, wrote
            await heard.next(uri, start, timeout=30)
            body = await read_json(client, uri)
            assert body["watching"] and body["path"] == "src", body
            assert [(c["path"], c["change"]) for c in body["changes"]] == [("new.txt", "created")], body
            assert (await read_json(client, f"{uri}&since={body['last_seq']}"))["changes"] == []

    # The handshake era: exec(stream) with progress, and a watch by resources/subscribe.
    legacy_heard = Heard()
    async with sub_connect(stack, "mcp-client", "legacy", legacy_heard) as client:
        chunks: list[str] = []

        async def on_chunk(value: float, total: float | None, message: str | None) -> None:
            chunks.append(message or "")

        r = await client.call_tool(
            "exec",
            {"session": name, "command": "echo one; sleep 0.3; echo two", "stream": True},
            progress_callback=on_chunk,
        )
        assert data(r)["stdout"] == "one\ntwo\n" and "".join(chunks) == "one\ntwo\n", (r, chunks)
        uri = f"hangar://sandboxes/{name}/watch?path=/workspace/src"
        await client.subscribe_resource(uri)
        start = time.monotonic()
        assert (
            data(await client.call_tool("exec", {"session": name, "command": "rm src/new.txt"}))["exit_code"]
            == 0
        )
        await legacy_heard.next(uri, start, timeout=30)
        body = await read_json(client, uri)
        assert [(c["path"], c["change"]) for c in body["changes"]] == [("new.txt", "deleted")], body
        await client.unsubscribe_resource(uri)


async def test_bad_live_input_is_a_clear_error_and_changes_nothing(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    name = "mcp-live-bad"
    model.add(Step(text="FINAL: ready."))
    claude_env(cluster, "mcp-env-live", model)
    api = Api(stack)
    new_session(api, name, "mcp-env-live", "get ready", approvals="deny-risky")
    await in_thread(api.wait_turn, name, 1)
    ws = workspace(stack, name)
    async with connect(stack, "mcp-client", mode=MODERN) as client:
        # An unknown session.
        refused(
            await client.call_tool("exec", {"session": "mcp-nope", "command": "true"}),
            "not found",
            "mcp-nope",
        )
        refused(await client.call_tool("process", {"session": "mcp-nope", "action": "list"}), "not found")
        # An exec the policy denies: refused with the policy's reason; nothing of it ran; audited.
        msg = refused(
            await client.call_tool("exec", {"session": name, "command": "touch denied.txt && rm -rf /"}),
            "refused: ",
            "deny-risky",
        )
        assert not msg.startswith("Error executing tool"), msg
        refused(
            await client.call_tool("process", {"session": name, "action": "start", "command": "rm -rf /"}),
            "deny-risky",
        )
        assert not (ws / "denied.txt").exists()
        denied = await in_thread(events, api, name, "exec")
        assert [(e["verdict"], e["ran"]) for e in denied] == [("deny", False)], denied
        # Oversized output: a bound over the limit is refused by the schema; output past the bound is cut.
        refused(
            await client.call_tool(
                "exec", {"session": name, "command": "touch big.txt", "max_output_bytes": EXEC_OUTPUT_MAX + 1}
            ),
            "invalid",
            "max_output_bytes",
        )
        assert not (ws / "big.txt").exists()
        cut = data(
            await client.call_tool(
                "exec",
                {"session": name, "command": "head -c 5000 /dev/zero | tr '\\0' a", "max_output_bytes": 1000},
            )
        )
        assert cut["truncated"] and len(cut["stdout"]) == 1000 and "cut" in cut["note"], cut
        # A watch outside the workspace: -32602 with the reason, to subscribe and to read; nothing starts.
        for bad in ("../..", "/etc", "src/../../x"):
            uri = f"hangar://sandboxes/{name}/watch?path={bad}"
            with pytest.raises(MCPError, match="outside the workspace") as e:
                async with client.listen(resource_subscriptions=[uri]):
                    pass
            assert e.value.error.code == INVALID_PARAMS
            with pytest.raises(MCPError, match="outside the workspace") as e:
                await client.read_resource(uri)
            assert e.value.error.code == INVALID_PARAMS
        # A watch of a symlink that leads out: the driver refuses it (-32602 too).
        (ws / "out").symlink_to("/etc")
        with pytest.raises(MCPError, match="outside the workspace") as e:
            async with client.listen(resource_subscriptions=[f"hangar://sandboxes/{name}/watch?path=out"]):
                pass
        assert e.value.error.code == INVALID_PARAMS
        # A process id that isn't there.
        refused(
            await client.call_tool("process", {"session": name, "action": "read", "id": "p99"}), "no process"
        )
