"""Sessions end to end: REST → resources → operator → sandbox pod → driver → the real CLI → status."""

from __future__ import annotations

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, wait, workspace

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


def test_claude_turn_runs_a_command_and_the_next_turn_remembers(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="I will write the file.", command="echo hello-from-claude > hello.txt"),
            Step(when="tool_result", text="FINAL: wrote hello.txt"),
            Step(when="what did you write", text="FINAL: earlier I wrote hello.txt"),
        ]
    )
    url = model.start()
    try:
        environment(cluster, "e2e-claude", {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test"})
        api = Api(stack)
        r = api.post(
            "/api/sessions",
            {
                "name": "cc-basic",
                "environment": "e2e-claude",
                "harness": "claude",
                "message": "please write hello.txt",
            },
        )
        assert r.status_code == 201, r.text
        t1 = api.wait_turn("cc-basic", 1)
        assert t1["phase"] == "Completed", api.debug("cc-basic")
        assert t1["exit_status"] == 0 and "FINAL: wrote hello.txt" in t1["summary"]
        assert (workspace(stack, "cc-basic") / "hello.txt").read_text().strip() == "hello-from-claude"
        s = wait(lambda: (x := api.session("cc-basic"))["phase"] == "Idle" and x, 10, "session idle")
        assert s["sandbox"]["connected"] and s["conversation"]
        r = api.post("/api/sessions/cc-basic/messages", {"message": "what did you write?"})
        assert r.status_code == 202, r.text
        t2 = api.wait_turn("cc-basic", 2)
        assert t2["phase"] == "Completed" and "earlier I wrote hello.txt" in t2["summary"]
        # The second request carried the first turn: the same conversation.
        last = model.requests[-1]
        assert last.contains("please write hello.txt") and last.contains("what did you write?")
        kinds = [e["kind"] for e in api.events("cc-basic")]
        assert kinds.count("turn_ended") == 2 and "tool_use" in kinds
        out = cluster.kubectl("get", "hangar").stdout
        assert "session.hangar.dev/cc-basic" in out and "turn.hangar.dev/cc-basic-2" in out
    finally:
        model.stop()


def test_codex_turn_runs_a_command_and_the_next_turn_remembers(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="I will write the file.", command="echo hello-from-codex > hello.txt"),
            Step(when="tool_result", text="FINAL: wrote hello.txt"),
            Step(when="what did you write", text="FINAL: earlier I wrote hello.txt"),
        ]
    )
    model.start()
    try:
        environment(
            cluster, "e2e-codex", {"OPENAI_BASE_URL": model.openai_base_url, "OPENAI_API_KEY": "sk-test"}
        )
        api = Api(stack)
        r = api.post(
            "/api/sessions",
            {
                "name": "cx-basic",
                "environment": "e2e-codex",
                "harness": "codex",
                "model": "fake-model",
                "message": "please write hello.txt",
            },
        )
        assert r.status_code == 201, r.text
        t1 = api.wait_turn("cx-basic", 1)
        assert t1["phase"] == "Completed", api.debug("cx-basic")
        assert "FINAL: wrote hello.txt" in t1["summary"]
        assert (workspace(stack, "cx-basic") / "hello.txt").read_text().strip() == "hello-from-codex"
        assert t1["usage"]["input_tokens"] > 0  # the Turn status' wire form, as the API serves it
        assert (
            api.post("/api/sessions/cx-basic/messages", {"message": "what did you write?"}).status_code == 202
        )
        t2 = api.wait_turn("cx-basic", 2)
        assert t2["phase"] == "Completed" and "earlier I wrote hello.txt" in t2["summary"]
        last = model.requests[-1]
        assert last.contains("please write hello.txt") and last.contains("what did you write?")
    finally:
        model.stop()


def test_antigravity_one_shot_command_runs_a_turn(cluster: Cluster, stack: Stack) -> None:
    environment(
        cluster,
        "e2e-oneshot",
        harnessOptions={
            "command": [
                "sh",
                "-c",
                'echo "$1" > asked.txt; echo "antigravity did: $1"',
                "antigravity",
            ]
        },
    )
    api = Api(stack)
    r = api.post(
        "/api/sessions",
        {
            "name": "ag-basic",
            "environment": "e2e-oneshot",
            "harness": "antigravity",
            "message": "tidy the imports",
        },
    )
    assert r.status_code == 201, r.text
    t1 = api.wait_turn("ag-basic", 1)
    assert t1["phase"] == "Completed" and t1["exit_status"] == 0, api.debug("ag-basic")
    assert "antigravity did: tidy the imports" in t1["summary"]
    assert (workspace(stack, "ag-basic") / "asked.txt").read_text().strip() == "tidy the imports"


def test_one_shot_harness_refuses_a_policy_that_needs_prompts(cluster: Cluster, stack: Stack) -> None:
    environment(
        cluster,
        "e2e-oneshot-ask",
        approvals="ask",
        harnessOptions={"command": ["sh", "-c", "touch ran.txt", "x"]},
    )
    api = Api(stack)
    r = api.post(
        "/api/sessions",
        {
            "name": "ag-ask",
            "environment": "e2e-oneshot-ask",
            "harness": "antigravity",
            "message": "do something",
        },
    )
    assert r.status_code == 201, r.text
    t1 = api.wait_turn("ag-ask", 1)
    assert t1["phase"] == "Failed" and "needs a live turn" in t1["reason"], t1
    assert not (workspace(stack, "ag-ask") / "ran.txt").exists()
