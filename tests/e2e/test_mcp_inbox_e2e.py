"""``hangar://inbox`` end to end: what needs the caller, scoped to its token, read and subscribed to in both
eras with the SDK's ``Client`` over real HTTP, against a real session waiting on an approval (the real
Claude Code CLI against a ScriptedModel)."""

from __future__ import annotations

import asyncio
import time

import pytest
from mcp.shared.exceptions import MCPError

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, wait
from .test_mcp_e2e import MODERN, claude_env, in_thread, new_session, pending, read_json
from .test_mcp_e2e import _cleanup as _cleanup  # the autouse fixture deleting what a test made
from .test_mcp_subscriptions_e2e import Heard, connect, listening

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed"),
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]
INBOX = "hangar://inbox"


async def test_the_inbox_shows_what_waits_for_the_token_and_subscribers_hear_it_change(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > mcp-inbox.txt"),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "mcp-env-ask", model, approvals="ask")
    api = Api(stack)
    new_session(api, "mcp-inbox", "mcp-env-ask", "write it")
    [p] = await in_thread(wait, lambda: pending(api, "mcp-inbox"), 120, "the approval")
    modern, legacy = Heard(), Heard()
    async with (
        connect(stack, "mcp-client", MODERN) as c1,
        listening(c1, [INBOX], modern),
        connect(stack, "mcp-client", "legacy", legacy) as c2,
    ):
        await c2.subscribe_resource(INBOX)
        box = await read_json(c1, INBOX)
        [item] = [i for i in box["items"] if i["ref"] == "mcp-inbox"]
        assert item["kind"] == "approval" and item["approval"]["id"] == p["id"], item
        assert "echo hi > mcp-inbox.txt" in item["approval"]["command"]
        assert box["counts"]["approval"] >= 1
        other_era = await read_json(c2, INBOX)
        assert [i for i in other_era["items"] if i["ref"] == "mcp-inbox"] == [item], other_era
        await asyncio.sleep(1)  # the watches' first listing passes
        start = time.monotonic()
        r = await in_thread(api.post, f"/api/sessions/mcp-inbox/approvals/{p['id']}", {"decision": "allow"})
        assert r.status_code == 200, r.text
        for heard in (modern, legacy):
            await heard.next(INBOX, start, timeout=30)
        await in_thread(api.wait_turn, "mcp-inbox", 1)
        box = await read_json(c2, INBOX)
        assert not [i for i in box["items"] if i["ref"] == "mcp-inbox"], box
    # A jobs token sees its own jobs only: not this session's approval.
    async with connect(stack, "alice", MODERN) as client:
        box = await read_json(client, INBOX)
        assert all(i["kind"] != "approval" or i["ref"] != "mcp-inbox" for i in box["items"]), box
        async with listening(client, [INBOX], Heard()):
            pass  # anyone may subscribe to their own inbox
    async with connect(stack, "mcp-client", "legacy") as client:
        with pytest.raises(MCPError, match="cannot subscribe"):
            await client.subscribe_resource("hangar://inbox/other")
