"""The pre-cleared call file (hangar_driver/precleared.py): what the operator signs the driver reads once and
deletes; a file the agent could write (another owner, writable by others, forged, for another run) is
ignored; the driver's args_hash is hangar's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hangar.approvals import args_hash
from hangar_driver import precleared
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import PRECLEARED_FILE, run_key_secret, sandbox_pod

KEY = b"run-key-of-s1-r2"
CALL = {"run": "s1-r2", "turn": "s1-2", "tool": "Bash", "args_hash": "ab" * 32, "tower": "A-9"}


def write(path: Path, text: str, mode: int = 0o400) -> str:
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


@pytest.mark.parametrize(
    "tool_input",
    [{"command": "git push"}, {"b": [1, 2.5, None], "a": "é", "c": {"z": True}}, {}],
)
def test_the_drivers_args_hash_is_hangars(tool_input: dict[str, Any]) -> None:
    assert precleared.args_hash("Bash", tool_input) == args_hash("Bash", tool_input)


def test_a_signed_call_is_read_once_and_deleted(tmp_path: Path) -> None:
    path = write(tmp_path / "precleared", precleared.encode(KEY, CALL))
    warnings: list[str] = []
    call = precleared.load(path, KEY, "s1-r2", warnings)
    assert call == CALL and warnings == [] and not os.path.exists(path)
    assert precleared.load(path, KEY, "s1-r2", warnings) is None  # gone


def test_what_the_agent_could_write_is_ignored(tmp_path: Path) -> None:
    forged = dict(CALL, args_hash="cd" * 32)
    cases = {
        "forged": (precleared.encode(b"a key the agent guessed", forged), 0o400, "MAC does not verify"),
        "not signed": ('{"v": 1, "call": "{}", "mac": ""}', 0o400, "MAC does not verify"),
        "another run's": (precleared.encode(KEY, dict(CALL, run="s1-r1")), 0o400, "MAC does not verify"),
        "writable by others": (precleared.encode(KEY, CALL), 0o666, "writable by other users"),
        "junk": ("rm -rf /", 0o400, "not JSON"),
    }
    for label, (text, mode, why) in cases.items():
        warnings: list[str] = []
        path = write(tmp_path / label.replace(" ", "-"), text, mode)
        assert precleared.load(path, KEY, "s1-r2", warnings) is None, label
        assert len(warnings) == 1 and why in warnings[0], (label, warnings)
    # The call bound to one run does not verify for another, even with the same key.
    assert precleared.decode(precleared.encode(KEY, CALL).encode(), KEY, "s1-r3")[0] is None
    # Nothing at the path the operator names: no call, no warning (a run that resumes nothing).
    warnings = []
    assert precleared.load(str(tmp_path / "absent"), KEY, "s1-r2", warnings) is None and warnings == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_file_owned_by_the_agents_uid_is_ignored(tmp_path: Path) -> None:
    path = write(tmp_path / "precleared", precleared.encode(KEY, CALL))
    os.chown(path, 1001, 1001)
    warnings: list[str] = []
    assert precleared.load(path, KEY, "s1-r2", warnings) is None
    assert "owned by uid 1001" in warnings[0]


def test_only_the_same_turn_tool_and_input_match() -> None:
    h = args_hash("Bash", {"command": "git push"})
    call = dict(CALL, args_hash=h)
    assert precleared.matches(call, "s1-2", "Bash", {"command": "git push"})
    assert not precleared.matches(call, "s1-3", "Bash", {"command": "git push"})
    assert not precleared.matches(call, "s1-2", "Write", {"command": "git push"})
    assert not precleared.matches(call, "s1-2", "Bash", {"command": "git push --force"})
    assert not precleared.matches(None, "s1-2", "Bash", {"command": "git push"})


def test_the_resumed_runs_secret_carries_the_call_for_the_driver_only() -> None:
    session = {
        "metadata": {"name": "s1", "uid": "u1"},
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
    }
    run = make_run("default", "default", "s1", 2)
    call = {k: v for k, v in CALL.items() if k != "run"}
    secret, key = run_key_secret(session, run, call)
    import base64

    raw = base64.b64decode(secret["data"]["precleared"])
    assert precleared.decode(raw, key.encode(), run.id)[0] == {**call, "run": run.id}
    plain, _ = run_key_secret(session, run)
    assert set(plain["data"]) == {"run-key"}
    from hangar.config import Settings
    from hangar.models.environment import EnvironmentSpec

    pod = sandbox_pod(
        {**session, "spec": {"harness": "claude"}}, EnvironmentSpec(image="img"), run, Settings(), "gw:1"
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["HANGAR_PRECLEARED_FILE"] == PRECLEARED_FILE
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "run-key")
    assert vol["secret"]["defaultMode"] == 0o400
