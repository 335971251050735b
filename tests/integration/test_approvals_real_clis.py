"""Every shell command and file edit reaches hangar under ask, deny-risky and governed: the adapters against
the real CLIs (Claude Code 2.1.332, Codex 0.171.0) and the scripted model, including the commands each CLI
deems read-only; under auto nothing asks.

The rig is the one of tests/integration/test_harness_real_clis.py. The adapter only knows "auto" or not:
the policy's own answers are the operator's, so each policy is answered allow here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hangar.testing.model_server import Step

from .test_harness_real_clis import LIVE, TIMEOUT, Rig, make_rig

pytestmark = pytest.mark.clis
__all__ = ["make_rig"]  # the fixture, imported for the tests below

# What Claude Code and Codex run unasked in their own default modes (the first is the README demo's).
READ_ONLY = ["echo 'hello from hangar' && pwd && ls -a", "ls -a", "pwd", "cat README.md"]
NOT_AUTO = ["ask", "deny-risky", "governed"]


def _script(commands: list[str]) -> list[Step]:
    """One command per model reply, each after the previous one's result, then a final answer."""
    steps = [Step(when="RUN", text="Running.", command=commands[0])]
    # Steps are taken in order, each once: the n-th tool result gets the next command.
    steps += [Step(when="tool_result", text="Next.", command=command) for command in commands[1:]]
    steps.append(Step(when="tool_result", text="FINAL: all done."))
    return steps


def _answer_all(rig: Rig, turn: str, decision: str = "allow") -> list[dict[str, Any]]:
    """Answer every permission request of the turn as it comes; the requests, in order."""
    answered: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for req in rig.events.all("permission_request"):
            if all(req["request_id"] != a["request_id"] for a in answered):
                answered.append(req)
                rig.harness.answer(req["request_id"], decision)
        if any(e["turn"] == turn for e in rig.events.all("turn_ended")):
            return answered
        time.sleep(0.05)
    raise AssertionError(f"turn {turn} did not end; events: {rig.events.summary()}")


def _asked(req: dict[str, Any]) -> str:
    """The command a request asks about, without Codex's `/bin/bash -lc '…'` wrapping."""
    parsed = (req["input"] or {}).get("parsed")
    if parsed:
        return " && ".join(parsed)
    return str(req["command"])


def _outputs(rig: Rig) -> str:
    return "\n".join(r["output"] for r in rig.events.all("tool_result"))


@pytest.mark.parametrize("policy", NOT_AUTO)
@pytest.mark.parametrize("name", LIVE)
def test_read_only_commands_reach_the_prompt(make_rig: Callable[..., Rig], name: str, policy: str) -> None:
    rig = make_rig(name, _script(READ_ONLY))
    (rig.work / "README.md").write_text("the readme\n")
    turn = rig.start("RUN them", approvals=policy)
    asked = _answer_all(rig, turn)
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert [_asked(r) for r in asked] == READ_ONLY
    out = _outputs(rig)
    assert "hello from hangar" in out and str(rig.work) in out and "the readme" in out and "README.md" in out
    assert "all done" in ended["summary"]


@pytest.mark.parametrize("name", LIVE)
def test_auto_runs_them_without_asking(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(name, _script(READ_ONLY))
    (rig.work / "README.md").write_text("the readme\n")
    ended = rig.run("RUN them", approvals="auto")
    assert ended["outcome"] == "completed", ended
    assert rig.events.all("permission_request") == []
    assert "hello from hangar" in _outputs(rig) and "the readme" in _outputs(rig)


def test_claude_file_edits_reach_the_prompt(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig("claude", [])
    old = rig.work / "old.txt"
    old.write_text("old text\n")
    new = rig.work / "new.txt"
    rig.model.add(
        Step(
            when="EDIT", text="Writing.", tool="Write", tool_input={"file_path": str(new), "content": "new\n"}
        ),
        Step(when="tool_result:new.txt", text="Reading.", tool="Read", tool_input={"file_path": str(old)}),
        Step(
            when="tool_result:old text",
            text="Editing.",
            tool="Edit",
            tool_input={"file_path": str(old), "old_string": "old text", "new_string": "edited"},
        ),
        Step(when="tool_result", text="FINAL: edited."),
    )
    turn = rig.start("EDIT the files", approvals="ask")
    asked = _answer_all(rig, turn)
    assert rig.events.ended(turn)["outcome"] == "completed"
    # Both edits asked, inside the working tree too; a Read inside the tree is not an edit.
    assert [(r["tool"], r["input"]["file_path"]) for r in asked] == [("Write", str(new)), ("Edit", str(old))]
    assert new.read_text() == "new\n" and old.read_text() == "edited\n"


def test_codex_file_change_reaches_the_prompt(make_rig: Callable[..., Rig]) -> None:
    patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: added.txt\n+added\n*** End Patch\nEOF"
    rig = make_rig("codex", [Step(when="PATCH", command=patch), Step(when="tool_result", text="FINAL: ok.")])
    turn = rig.start("PATCH it", approvals="ask")
    asked = _answer_all(rig, turn)
    assert rig.events.ended(turn)["outcome"] == "completed"
    assert [r["tool"] for r in asked] == ["apply_patch"]
    assert asked[0]["input"]["changes"][0]["path"] == str(rig.work / "added.txt")
    assert (rig.work / "added.txt").read_text() == "added\n"


def test_claude_allow_always_covers_only_calls_like_it(make_rig: Callable[..., Rig]) -> None:
    """The adapter keeps the turn's grants (the ask rule outranks the CLI's session rules): the same program
    and subcommand again runs unasked; a compound command, another subcommand or a read-only one asks."""
    commands = ["git init -q r1", "git init -q r2", "git init -q r3 && touch x", "git status", "ls -a"]
    rig = make_rig("claude", _script(commands))
    turn = rig.start("RUN them", approvals="ask")
    asked = _answer_all(rig, turn, "allow_always")
    assert rig.events.ended(turn)["outcome"] == "completed"
    assert [_asked(r) for r in asked] == [c for c in commands if c != "git init -q r2"]
    assert (rig.work / "r2" / ".git").is_dir() and (rig.work / "x").exists()
    granted = [p["message"] for p in rig.events.all("log") if "allow_always" in p["message"]]
    assert granted == ["allowed by this turn's allow_always: git init -q r2"]
    assert not (rig.work / ".claude").exists()


def test_claude_keeps_the_environments_settings_but_not_their_allow(
    make_rig: Callable[..., Rig], tmp_path: Path
) -> None:
    """An Environment's own --settings (a file here) is merged into hangar's: its env applies, its allow
    rule doesn't skip the prompt."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(ls *)"]}, "env": {"FROM_ENV": "yes"}}))
    rig = make_rig("claude", _script(["ls -a", 'echo "env says $FROM_ENV"']))
    cfg = rig.cfg("RUN them", approvals="ask")
    cfg.extra["claude_args"] = ["--settings", str(settings)]
    rig.harness.start_turn(cfg)
    asked = _answer_all(rig, cfg.turn_id)
    assert rig.events.ended(cfg.turn_id)["outcome"] == "completed"
    assert [_asked(r) for r in asked] == ["ls -a", 'echo "env says $FROM_ENV"']
    assert "env says yes" in _outputs(rig)


def test_codex_rules_are_hangars_alone_and_follow_the_policy(make_rig: Callable[..., Rig]) -> None:
    """An allow rule left in $CODEX_HOME/rules (the agent can write there) no longer skips the prompt; under
    auto hangar's prompt rules are gone again (never + prompt would refuse the command)."""
    rig = make_rig(
        "codex",
        [
            Step(when="TOUCH", command="touch touched.txt"),
            Step(when="LIST", command="ls -a"),
            Step(when="tool_result", text="FINAL: done."),
        ],
    )
    rules = rig.home / "codex" / "rules"
    rules.mkdir(parents=True)
    (rules / "agent.rules").write_text('prefix_rule(pattern=["touch"], decision="allow")\n')
    turn = rig.start("TOUCH it", approvals="ask")
    asked = _answer_all(rig, turn)
    assert rig.events.ended(turn)["outcome"] == "completed"
    assert [_asked(r) for r in asked] == ["touch touched.txt"]
    assert sorted(p.name for p in rules.iterdir()) == ["hangar.rules"]

    ended = rig.run("LIST it", approvals="auto", continue_=True)
    assert ended["outcome"] == "completed", ended
    assert len(rig.events.all("permission_request")) == 1
    assert ".." in rig.events.all("tool_result")[-1]["output"]
    assert not (rules / "hangar.rules").exists()
