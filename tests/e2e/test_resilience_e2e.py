"""What must survive: a killed sandbox, an operator restart mid-turn, a forged driver, a curious agent."""

from __future__ import annotations

import asyncio
import time

import pytest

from hangar.devcluster.stack import Stack
from hangar.store import open_database
from hangar.testing.model_server import ScriptedModel, Step
from hangar_driver import protocol as P

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, wait, workspace

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]

SLOW = "python3 -c 'import time; time.sleep({s})' && echo done-{tag} > {tag}.txt"


def claude_env(cluster: Cluster, name: str, url: str) -> None:
    environment(cluster, name, {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test"})


def tool_running(api: Api, session: str) -> bool:
    return any(e["kind"] == "tool_use" for e in api.events(session))


def test_killing_the_sandbox_fails_the_turn_and_the_next_message_continues(
    cluster: Cluster, stack: Stack
) -> None:
    model = ScriptedModel(
        [
            Step(text="Running the slow thing.", command=SLOW.format(s=30, tag="never")),
            Step(when="tool_result", text="FINAL: slow thing done"),
            Step(when="still there", text="FINAL: yes, still here"),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "e2e-kill", url)
        api = Api(stack)
        assert (
            api.post(
                "/api/sessions",
                {"name": "cc-kill", "environment": "e2e-kill", "message": "run the slow thing"},
            ).status_code
            == 201
        )
        wait(lambda: tool_running(api, "cc-kill"), 90, "the tool to start", lambda: api.debug("cc-kill"))
        pod = api.session("cc-kill")["sandbox"]["pod"]
        assert pod == "cc-kill-r1"
        # Kill it once the CLI has saved the conversation it would resume (a CLI killed before that starts
        # over in a new conversation, which the operator handles; this test is about continuing).
        home = workspace(stack, "cc-kill").parent / "home" / ".claude" / "projects"
        wait(lambda: list(home.glob("*/*.jsonl")), 30, "the conversation saved")
        cluster.kubectl("delete", "pod", pod, "--wait=false")
        t1 = api.wait_turn("cc-kill", 1, 60)
        assert t1["phase"] == "Failed" and t1["outcome"] == "failed"
        # The driver may report its CLI's death first; the pod's fate joins the reason once the operator
        # sees the pod go.
        t1 = wait(
            lambda: (
                (t := api.turn("cc-kill", 1)) and "sandbox pod cc-kill-r1 was deleted" in t["reason"] and t
            ),
            30,
            "the pod's fate in the turn's reason",
            lambda: api.debug("cc-kill"),
        )
        assert t1["phase"] == "Failed"
        s = wait(lambda: (x := api.session("cc-kill"))["sandbox"]["pod"] is None and x, 30, "slot released")
        assert s["phase"] == "Idle" and s["conversation"]
        assert not (workspace(stack, "cc-kill") / "never.txt").exists()
        assert (
            api.post("/api/sessions/cc-kill/messages", {"message": "are you still there?"}).status_code == 202
        )
        t2 = api.wait_turn("cc-kill", 2, 90)
        assert t2["phase"] == "Completed" and "still here" in t2["summary"], api.debug("cc-kill")
        s = api.session("cc-kill")
        assert s["sandbox"]["pod"] == "cc-kill-r2" and s["counters"]["sandboxes"] == 2
        assert model.requests[-1].contains("run the slow thing"), "the new sandbox continued the conversation"
    finally:
        model.stop()


def test_operator_restart_mid_turn_loses_no_event(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Working on it.", command=SLOW.format(s=6, tag="restart")),
            Step(when="tool_result", text="FINAL: finished across a restart"),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "e2e-restart", url)
        api = Api(stack)
        assert (
            api.post(
                "/api/sessions",
                {"name": "cc-restart", "environment": "e2e-restart", "message": "work across a restart"},
            ).status_code
            == 201
        )
        wait(
            lambda: tool_running(api, "cc-restart"), 90, "the tool to start", lambda: api.debug("cc-restart")
        )
        stack.stop("operator")
        time.sleep(8)  # the tool finishes and the turn ends while no operator listens
        stack.start_operator()
        t1 = api.wait_turn("cc-restart", 1, 90)
        assert t1["phase"] == "Completed" and "finished across a restart" in t1["summary"], api.debug(
            "cc-restart"
        )
        kinds = [e["kind"] for e in api.events("cc-restart")]
        assert kinds.count("turn_started") == 1 and kinds.count("turn_ended") == 1
        assert kinds.count("tool_use") == 1 and kinds.count("tool_result") == 1
        texts = [e["text"] for e in api.events("cc-restart") if e["kind"] == "text"]
        assert texts == ["Working on it.", "FINAL: finished across a restart"]
        assert (workspace(stack, "cc-restart") / "restart.txt").exists()
    finally:
        model.stop()


def test_forged_driver_messages_are_refused_and_the_agent_cannot_read_the_run_key(
    cluster: Cluster, stack: Stack
) -> None:
    probe = (
        "cat /var/run/hangar/key/run-key " + str(stack.root) + "/runner/pods/*/volumes/run-key/run-key"
        " > probe.txt 2>&1; for p in /proc/[0-9]*; do grep -l HANGAR_RUN_ID $p/environ; done >> probe.txt 2>&1;"
        " id -u >> probe.txt"
    )
    model = ScriptedModel(
        [
            Step(text="Looking around.", command=probe),
            Step(when="tool_result", text="FINAL: looked"),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "e2e-hostile", url)
        api = Api(stack)
        assert (
            api.post(
                "/api/sessions",
                {"name": "cc-hostile", "environment": "e2e-hostile", "message": "look for secrets"},
            ).status_code
            == 201
        )
        t1 = api.wait_turn("cc-hostile", 1, 90)
        assert t1["phase"] == "Completed", api.debug("cc-hostile")
        out = (workspace(stack, "cc-hostile") / "probe.txt").read_text()
        assert "Permission denied" in out
        key = cluster.kubectl("get", "secret", "cc-hostile-r1-key", "-o", "jsonpath={.data.run-key}").stdout
        import base64

        secret = base64.b64decode(key).decode()
        assert secret not in out
        assert out.strip().splitlines()[-1] == "1001", "the agent runs under its own uid"

        async def forge() -> bytes:
            port = int(stack.env()["HANGAR_GATEWAY_PORT"])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            frame = P.sign(
                P.new_run_key(), P.make_frame("cc-hostile-r1", P.D2G, P.HELLO, {"run": "cc-hostile-r1"})
            )
            writer.write(P.encode(frame))
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return data

        assert asyncio.run(forge()) == b"", "the gateway closes a connection with a bad signature"

        async def audited() -> list[dict[str, object]]:
            db = await open_database(stack.database_url)
            try:
                return await db.audit_entries("driver.rejected")
            finally:
                await db.close()

        entries = wait(
            lambda: [e for e in asyncio.run(audited()) if e["target"] == "cc-hostile-r1"], 10, "audit"
        )
        assert "bad signature" in str(entries[0]["reason"])
        # The real driver is unaffected.
        assert api.session("cc-hostile")["sandbox"]["connected"]
    finally:
        model.stop()
