"""The operator's approvals helpers that need no cluster: names, what a person is shown, what taints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hangar.models.environment import EnvironmentSpec
from hangar_operator.approvals import approval_name, mcp_server_of, shown_command, untrusted_source


def test_approval_names_are_stable_and_short() -> None:
    a = approval_name("s-r1", "req-1")
    assert a == approval_name("s-r1", "req-1") and a.startswith("ap-") and len(a) == 15
    assert a != approval_name("s-r2", "req-1") and a != approval_name("s-r1", "req-2")


def test_a_person_is_shown_the_command_or_the_tool_and_its_input() -> None:
    assert shown_command("Bash", {"command": "ls"}, "ls") == "ls"
    assert shown_command("Edit", {"new_string": "b", "file_path": "x.py"}, None) == (
        'Edit {"file_path":"x.py","new_string":"b"}'
    )
    long = "echo " + "x" * 5000
    shown = shown_command("Bash", {"command": long}, long)
    assert len(shown) < 2100 and "[…3005 characters not shown…]" in shown
    assert shown.startswith("echo xxx") and shown.endswith("xxx")


def test_what_taints() -> None:
    env = EnvironmentSpec.model_validate(
        {"image": "x", "mcp": {"github": {"url": "u", "trust": "trusted"}, "issues.example": {"url": "u"}}}
    )
    assert untrusted_source("WebFetch", env) == "read web content (WebFetch)"
    assert untrusted_source("web_search", None) == "read web content (web_search)"
    assert untrusted_source("Bash", env) is None and untrusted_source("Read", env) is None
    assert mcp_server_of("mcp__github__get_issue") == "github" and mcp_server_of("mcp:jira.search") == "jira"
    assert untrusted_source("mcp__github__get_issue", env) is None
    assert untrusted_source("mcp:github.get_issue", env) is None
    # Not in the environment, or not marked trusted: untrusted (Claude spells "issues.example" with a "_").
    assert "untrusted MCP server issues_example" in (untrusted_source("mcp__issues_example__get", env) or "")
    assert "untrusted MCP server other" in (untrusted_source("mcp:other.read", env) or "")


def test_the_driver_without_ctypes_says_it_is_not_hardened(tmp_path: Path) -> None:
    (tmp_path / "ctypes.py").write_text("raise ImportError('built without ctypes')\n")
    driver = Path(__file__).resolve().parents[2] / "sandbox-image"
    code = "import hangar_driver.main as m; ok = m.harden_process(); print(ok, m.HARDENING_ERROR)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": f"{tmp_path}:{driver}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith("False ImportError: built without ctypes"), out
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(driver)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "True None"
