"""What an allow_always covers for Claude Code's asked tools, the --settings that make them ask, and Codex's
rules directory: the driver's logic with many cases (the real CLIs: tests/integration/test_approvals_real_clis.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hangar_driver.claude_grants import ASK_TOOLS, Grants, ask_settings_args, command_prefix
from hangar_driver.codex_config import KNOWN_SAFE, RULES_FILE, write_rules
from hangar_driver.harness import TurnConfig


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("git init -q r1", ("git", "init")),
        ("npm run build", ("npm", "run")),
        ('git commit -m "a message"', ("git", "commit")),
        ("echo hi", ("echo", "hi")),
        ("git", None),  # no subcommand
        ("git -C x init", None),  # a flag, not a subcommand
        ("ls -a", None),
        ("cat README.md", None),  # a file, not a subcommand
        ("/usr/bin/git init", None),  # a path, not a program name
        ("FOO=1 git push", None),  # an environment prefix
        ("sudo rm -rf build", None),  # a wrapper: its "subcommand" is a program
        ("env git push", None),
        ("bash -lc 'ls'", None),
        ("git init r1 && rm -rf ~", None),
        ("git init r1; ls", None),
        ("git log | head", None),
        ("git init > out", None),
        ("git init $(pwd)", None),
        ("git init `pwd`", None),
        ("git add *", None),
        ("git init ~/x", None),
        ("git init # comment", None),
        ("git init\nrm x", None),
        ("git init 'unclosed", None),
    ],
)
def test_command_prefix(command: str, prefix: tuple[str, str] | None) -> None:
    assert command_prefix(command) == prefix


def test_grants_cover_calls_like_the_granted_one() -> None:
    grants = Grants()
    grants.add("Bash", {"command": "git init -q r1", "description": "x"})
    assert grants.covers("Bash", {"command": "git init -q r2"})
    assert grants.covers("Bash", {"command": "git init"})
    assert not grants.covers("Bash", {"command": "git status"})
    assert not grants.covers("Bash", {"command": "git init r3 && touch x"})
    assert not grants.covers("Monitor", {"command": "git init -q r2"})  # another tool

    grants.add("Bash", {"command": "ls -a && pwd"})
    assert grants.covers("Bash", {"command": "ls -a && pwd"})
    assert not grants.covers("Bash", {"command": "ls -a && pwd && rm x"})
    assert not grants.covers("Bash", {"command": "ls -a"})

    grants.add("Write", {"file_path": "/w/a.txt", "content": "x"})
    assert grants.covers("Edit", {"file_path": "/w/./a.txt", "old_string": "x", "new_string": "y"})
    assert grants.covers("MultiEdit", {"file_path": "/w/a.txt", "edits": []})
    assert not grants.covers("Write", {"file_path": "/w/b.txt", "content": "x"})
    assert not grants.covers("NotebookEdit", {"notebook_path": "/w/a.txt"})

    grants.add("EnterWorktree", {"name": "one"})
    assert grants.covers("EnterWorktree", {"name": "one"})
    assert not grants.covers("EnterWorktree", {"name": "two"})
    assert not Grants().covers("Bash", {"command": "git init"})


def test_grants_are_only_for_the_asked_tools() -> None:
    grants = Grants()
    grants.add("mcp__x__y", {"a": 1})
    assert not grants.covers("mcp__x__y", {"a": 1})  # the CLI's own session rules cover those


def _settings(args: list[str]) -> dict[str, object]:
    assert args[-2] == "--settings" and args.count("--settings") == 1
    out: dict[str, object] = json.loads(args[-1])
    return out


def test_ask_settings_alone() -> None:
    args = ask_settings_args(["--max-turns", "3"])
    assert args[:2] == ["--max-turns", "3"]
    assert _settings(args) == {"permissions": {"ask": list(ASK_TOOLS)}}


def test_ask_settings_merge_the_environments_own(tmp_path: Path) -> None:
    theirs = {
        "env": {"A": "1"},
        "permissions": {"allow": ["Bash(ls *)"], "ask": ["WebFetch"], "defaultMode": "bypassPermissions"},
    }
    inline = ask_settings_args(["--settings", json.dumps(theirs), "--verbose"])
    assert inline[0] == "--verbose"
    merged = _settings(inline)
    assert merged["env"] == {"A": "1"}
    assert merged["permissions"] == {"allow": ["Bash(ls *)"], "ask": ["WebFetch", *ASK_TOOLS]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(theirs))
    assert _settings(ask_settings_args([f"--settings={path}"])) == merged
    # Settings that can't be read are dropped; the ask rules stay.
    for bad in (str(tmp_path / "missing.json"), "{not json", "[1, 2]"):
        assert _settings(ask_settings_args(["--settings", bad])) == {"permissions": {"ask": list(ASK_TOOLS)}}


def _cfg(approvals: str) -> TurnConfig:
    return TurnConfig("t1", "m", "/w", {}, approvals=approvals)


def test_codex_rules_are_hangars_alone(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "agent.rules").write_text('prefix_rule(pattern=["rm"], decision="allow")\n')
    (rules / "notes.txt").write_text("kept")
    write_rules(_cfg("deny-risky"), str(tmp_path))
    assert sorted(p.name for p in rules.iterdir()) == [RULES_FILE, "notes.txt"]
    text = (rules / RULES_FILE).read_text()
    for name in ("ls", "cat", "pwd", "echo", "git"):
        assert f'prefix_rule(pattern=["{name}"], decision="prompt")' in text
    assert text.count("prefix_rule(") == len(KNOWN_SAFE)
    assert (rules / RULES_FILE).stat().st_mode & 0o777 == 0o644
    write_rules(_cfg("auto"), str(tmp_path))
    assert sorted(p.name for p in rules.iterdir()) == ["notes.txt"]


def test_codex_rules_never_follow_a_planted_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.rules").write_text("x")
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(elsewhere, home / "rules")
    write_rules(_cfg("ask"), str(home))
    assert not (home / "rules").is_symlink() and (home / "rules" / RULES_FILE).is_file()
    assert (elsewhere / "keep.rules").read_text() == "x"
    # A link in place of hangar's own file (or its temporary file) is replaced, not written through.
    target = tmp_path / "target"
    target.write_text("untouched")
    os.unlink(home / "rules" / RULES_FILE)
    os.symlink(target, home / "rules" / RULES_FILE)
    os.symlink(target, home / "rules" / (RULES_FILE + ".tmp"))
    write_rules(_cfg("ask"), str(home))
    assert target.read_text() == "untouched"
    assert not (home / "rules" / RULES_FILE).is_symlink()
