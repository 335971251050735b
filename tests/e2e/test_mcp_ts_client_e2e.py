"""hangar's MCP server with a client it was not built beside: the official TypeScript SDK's ``Client``
(``tests/clients/mcp-ts``, pinned by its package-lock.json; ``tools/test.sh`` installs it) over real HTTP, in
the handshake era it negotiates (an ``Mcp-Session-Id``, SSE), against a real Claude Code session. That
client checks every tool's ``structuredContent`` against the tool's ``outputSchema``: a call that answered
at all answered in the shape it declared."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import clis_installed
from .test_mcp_e2e import CREATED, claude_env
from .test_mcp_e2e import _cleanup as _cleanup  # the autouse fixture deleting what a test made

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "mcp-ts"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


def test_the_typescript_sdk_client_runs_a_session_through_hangars_mcp_server(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    sdk = CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
    assert sdk.exists(), (
        f"the TypeScript MCP SDK is not installed: npm ci --prefix {CLIENT} (tools/test.sh does)"
    )
    node = shutil.which("node")
    assert node, "node is needed"
    model.add(Step(text="FINAL: hello from the session."), Step(text="FINAL: goodbye."))
    claude_env(cluster, "mcp-ts-env", model)
    CREATED.append("mcp-ts")
    url, token = f"{stack.api_url}/mcp", stack.token_for("mcp-client")
    run = subprocess.run(
        [node, str(CLIENT / "client.mjs"), url, token, "mcp-ts-env", "mcp-ts"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    steps = out["steps"]

    assert out["protocol"] == "2025-11-25" and out["server"]["name"] == "hangar", out
    assert out["capabilities"]["resources"]["subscribe"] is True
    assert {"new_session", "send_to_session", "wait_for_turn", "exec", "get_session"} <= set(steps["tools"])
    assert "hangar://sessions/{name}" in steps["templates"]

    created = steps["new_session"]
    assert not created["isError"] and created["structured"]["name"] == "mcp-ts", created
    for key, message in (("wait_1", "say hello"), ("wait_2", "say goodbye")):
        waited = steps[key]
        assert not waited["isError"], waited
        got = waited["structured"]
        assert got["done"] and not got["timed_out"], got
        assert got["turn"]["message"] == message and got["turn"]["phase"] == "Completed", got
        assert got["state"] == "Idle", "the answer said the session still runs a turn after it ended"
    assert steps["send"]["structured"]["turn"]["index"] == 2, steps["send"]
    assert steps["exec"]["structured"]["stdout"] == "from-ts\n", steps["exec"]
    assert steps["session"]["phase"] == "Idle" and [t["index"] for t in steps["session"]["turns"]] == [1, 2]
    assert steps["inbox"] == {"items": [], "counts": {}}, steps["inbox"]

    # Refusals say why, in the protocol's terms: a tool's as an error result, a resource's as -32602.
    bad = steps["bad_name"]
    assert bad["isError"] and bad["text"].startswith("invalid: name:"), bad
    assert steps["unknown_resource"]["code"] == -32602, steps["unknown_resource"]

    # Subscribed on the client's session: the server notified both URIs as the turns ran.
    assert steps["subscribe_inbox"] == {} and steps["subscribe_session"] == {} and steps["unsubscribe"] == {}
    assert out["updates"] == ["hangar://inbox", "hangar://sessions/mcp-ts"], out["updates"]
