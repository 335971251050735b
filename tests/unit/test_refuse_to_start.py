"""`hangar operator` and `hangar api`, run as the real commands with a bad setting, refuse to start: exit 2
and one line on stderr naming the variable and what it allows, no traceback. They stop before reaching for a
cluster, so no control plane is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SECRET = "s3cr3t-token-value"


def run(command: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_")}
    # A kubeconfig that points nowhere: were the settings accepted, the command would fail differently.
    clean["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", command],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("command", "env", "message"),
    [
        (
            "operator",
            {"HANGAR_APPROVALS": "deny_risky"},
            "HANGAR_APPROVALS='deny_risky': Input should be 'auto', 'ask', 'deny-risky' or 'governed'",
        ),
        (
            "api",
            {"HANGAR_APPROVALS": "deny_risky"},
            "HANGAR_APPROVALS='deny_risky': Input should be 'auto', 'ask', 'deny-risky' or 'governed'",
        ),
        (
            "operator",
            {"HANGAR_GOVERNANCE": "strict"},
            "HANGAR_GOVERNANCE='strict': Input should be 'off', 'shadow' or 'enforce'",
        ),
        ("api", {"HANGAR_APPROVAL_TIMEOUT_SECONDS": "10m"}, "HANGAR_APPROVAL_TIMEOUT_SECONDS='10m'"),
        (
            "api",
            {"HANGAR_GOVERNANCE_MODES": "approval=enforce,tools=shadow"},
            "unknown kind 'tools': the kinds are approval, run",
        ),
        (
            "operator",
            {"HANGAR_LOG_LEVEL": "trace"},
            "HANGAR_LOG_LEVEL='trace': Input should be 'debug', 'info', 'warning' or 'error'",
        ),
    ],
)
def test_a_bad_setting_refuses_to_start(
    command: str, env: dict[str, str], message: str, tmp_path: Path
) -> None:
    p = run(command, env, tmp_path)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"hangar {command}: refusing to start: ") and message in line


def test_the_api_refuses_a_token_without_a_role(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps([{"token": "t1", "subject": "alice", "role": "jobs"}, {"token": SECRET, "subject": "bob"}])
    )
    p = run("api", {"HANGAR_API_TOKENS_FILE": str(tokens)}, tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (
        f"hangar api: refusing to start: HANGAR_API_TOKENS_FILE ({tokens}): entry 2 (subject 'bob'): "
        "has no role: give one of admin, jobs, mcp"
    )
    assert SECRET not in p.stderr
