"""The `hangar session` CLI against a running stack, as a person types it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import clis_installed, environment

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


def hangar(stack: Stack, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HANGAR_URL": stack.api_url, "HANGAR_TOKEN": stack.token}
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_session_new_send_get_events_list_delete(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Let me look.", command="ls > listing.txt"),
            Step(when="tool_result", text="FINAL: listed the files"),
            Step(when="and now", text="FINAL: second turn done"),
        ]
    )
    url = model.start()
    try:
        environment(cluster, "cli-env", {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test"})
        r = hangar(stack, "session", "new", "cli-demo", "list the files", "-e", "cli-env", "--wait")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "session cli-demo created" in r.stdout
        assert "turn 1: Completed (exit 0)" in r.stdout and "FINAL: listed the files" in r.stdout
        assert "tool_use: Bash" in r.stdout
        r = hangar(stack, "session", "send", "cli-demo", "and now the second", "--wait")
        assert r.returncode == 0 and "turn 2: Completed" in r.stdout, r.stdout + r.stderr
        r = hangar(stack, "session", "get", "cli-demo")
        assert r.returncode == 0 and "session cli-demo  Idle" in r.stdout
        # `wait` on an idle session follows its last turn, which has ended: it shows it and returns.
        r = hangar(stack, "session", "wait", "cli-demo", timeout=30)
        assert r.returncode == 0 and "turn 2: Completed" in r.stdout and "turn_ended" in r.stdout, r.stderr
        r = hangar(stack, "session", "events", "cli-demo")
        assert r.returncode == 0 and "turn_ended" in r.stdout
        r = hangar(stack, "session", "list")
        assert "cli-demo" in r.stdout
        r = hangar(stack, "session", "new", "Bad_Name", "x", "-e", "cli-env")
        assert r.returncode == 1 and "error 422: name:" in r.stderr
        r = hangar(stack, "session", "new", "cli-nope", "x", "-e", "no-such-env")
        assert r.returncode == 1 and "error 422: unknown environment 'no-such-env'" in r.stderr
        r = hangar(stack, "session", "delete", "cli-demo")
        assert r.returncode == 0 and "session cli-demo deleted" in r.stdout
        r = hangar(stack, "session", "send", "cli-demo", "hello?")
        assert r.returncode == 1 and "error 404: no session 'cli-demo'" in r.stderr
        r = hangar(stack, "session", "wait", "cli-demo")
        assert r.returncode == 1 and "error 404: no session 'cli-demo'" in r.stderr
    finally:
        model.stop()
