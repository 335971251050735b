"""Idle sessions give their sandbox back (issue 10, item 11), with the real CLIs: past the Environment's
idle time the session is checkpointed and suspended (pod gone, no slot held); the next message resumes it
from its volume, the agent remembers the conversation and finds its files. The person sees a slower first
answer, never an error."""

from __future__ import annotations

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, model_env, new_session, wait, workspace

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_an_idle_session_is_suspended_and_the_next_message_resumes_it(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    model.add(Step(when="FIRST", text="Noting.", command="echo kept > idle.txt"))
    model.add(Step(when="tool_result", text="FINAL: the word is PELICAN"))
    model.add(Step(when="AGAIN", text="Reading.", command="cat idle.txt"))
    model.add(Step(when="tool_result", text="FINAL: still here"))
    name, env = f"idle-{harness}", f"idle-env-{harness}"
    environment(cluster, env, model_env(harness, model), idleSuspendSeconds=3)
    api = Api(stack)
    try:
        new_session(api, name, env, harness, "FIRST note something")
        assert api.wait_turn(name, 1)["phase"] == "Completed", api.debug(name)
        s = wait(lambda: (x := api.session(name))["phase"] == "Suspended" and x, 90, "idle suspension")
        assert s["suspended"]["reason"] == "idle" and not (s.get("sandbox") or {}).get("pod"), s
        assert [c["reason"] for c in s["checkpoints"]] == ["idle"]
        pods = cluster.kubectl("get", "pods", "-l", f"hangar.dev/session={name}", "-o", "name").stdout
        wait(
            lambda: (
                not cluster.kubectl(
                    "get", "pods", "-l", f"hangar.dev/session={name}", "-o", "name"
                ).stdout.strip()
            ),
            60,
            "the pod gone",
            lambda: pods,
        )
        # The next message: no error, a slower answer, the same conversation and the same files.
        r = api.post(f"/api/sessions/{name}/messages", {"message": "AGAIN what is in idle.txt?"})
        assert r.status_code == 202, r.text
        t2 = api.wait_turn(name, 2, timeout=180)
        assert t2["phase"] == "Completed" and "still here" in t2["summary"], api.debug(name)
        resumed = next(r for r in model.requests if r.contains("AGAIN what is in"))
        assert resumed.contains("PELICAN"), "the agent remembers the conversation"
        assert any("kept" in t for r in model.requests for t in r.tool_results), "the file survived"
        assert (workspace(stack, name) / "idle.txt").read_text() == "kept\n"
        assert api.session(name)["counters"]["sandboxes"] == 2
    finally:
        cluster.kubectl("delete", "session.hangar.dev", name, "--wait=false", check=False)
