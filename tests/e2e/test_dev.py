"""`hangar dev up | status | down` on a fresh state directory, as a newcomer runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from .helpers import clis_installed


def hangar(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.e2e
@pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)")
def test_dev_up_status_down_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "dev"
    env = {**os.environ, "HANGAR_DEV_ROOT": str(root), "XDG_STATE_HOME": str(tmp_path / "state")}
    up = hangar(env, "dev", "up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "hangar dev is up" in up.stdout
    state = json.loads((root / "state.json").read_text())
    pids = state["pids"]
    assert {"etcd", "kube-apiserver", "operator", "api", "runner", "model"} <= set(pids)
    try:
        for url in (state["operator_url"] + "/healthz", state["api_url"] + "/readyz"):
            with urllib.request.urlopen(url, timeout=5) as r:
                assert r.status == 200
        context = json.loads((tmp_path / "state" / "hangar" / "dev" / "context.json").read_text())
        assert context["api_url"] == state["api_url"] and context["token"]
        st = hangar(env, "dev", "status")
        assert st.returncode == 0, st.stdout
        assert "operator health" in st.stdout and "NOT RUNNING" not in st.stdout
        # The CLI finds the API through the context file, and the demo runs a real Claude Code turn.
        demo = hangar(
            env, "session", "new", "demo", "list the files and say hello", "-e", "default", "--wait"
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "turn 1: Completed (exit 0)" in demo.stdout, demo.stdout
        got = hangar(env, "session", "get", "demo")
        assert "session demo  Idle" in got.stdout
        kubectl = [str(Path(state["kubectl"])), "--kubeconfig", state["kubeconfig"], "get", "hangar"]
        listed = subprocess.run(kubectl, capture_output=True, text=True, timeout=30).stdout
        assert "session.hangar.dev/demo" in listed and "turn.hangar.dev/demo-1" in listed
        assert "environment.hangar.dev/default" in listed
    finally:
        down = hangar(env, "dev", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert [name for name, pid in pids.items() if alive(pid)] == []
    assert not (root / "state.json").exists()
    st = hangar(env, "dev", "status")
    assert st.returncode == 1 and "down" in st.stdout
