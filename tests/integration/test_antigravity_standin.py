"""The dev-only Antigravity stand-in (``hangar/devcluster/antigravity_standin.py``) as the driver runs it: a
python3 process with the message as its argument, against a scripted model over real HTTP."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hangar.devcluster import antigravity_standin
from hangar.devcluster.scripted_envs import model_env
from hangar.testing.model_server import ScriptedModel, Step

STANDIN = Path(antigravity_standin.__file__)


def run(model: ScriptedModel, cwd: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **model_env("antigravity", model.base_url)}
    env["PYTHONPATH"] = str(STANDIN.parent)  # what the Environment's /opt/hangar/dev is in a sandbox
    return subprocess.run(
        ["python3", "-m", "antigravity_standin", *args],
        input=stdin,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runs_the_commands_the_model_asks_for_and_prints_its_answer(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Step(when="tidy", text="Writing.", command="echo tidied > done.txt && echo wrote it"),
            Step(when="tool_result:wrote it", text="FINAL: tidied the imports"),
        ]
    )
    with model:
        p = run(model, tmp_path, "tidy the imports")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "FINAL: tidied the imports\n"
    assert "$ echo tidied > done.txt && echo wrote it" in p.stderr
    assert (tmp_path / "done.txt").read_text() == "tidied\n"
    first, second = model.requests
    assert first.tools == ["bash"] and first.user_text == "tidy the imports"
    assert second.tool_results == ["wrote it\n"] and not model.unmatched


def test_a_failing_command_goes_back_as_an_error_and_the_message_may_come_on_stdin(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Step(when="from stdin", text="Trying.", command="echo nope >&2; exit 3"),
            Step(when="tool_result:(exit status 3)", text="FINAL: it failed"),
        ]
    )
    with model:
        p = run(model, tmp_path, stdin="a message from stdin")
    assert p.returncode == 0 and p.stdout == "FINAL: it failed\n", p.stderr
    result = model.requests[1].messages[-1]["content"][0]
    assert result["is_error"] is True and result["content"] == "nope\n\n(exit status 3)"


def test_a_model_that_never_stops_asking_ends_the_run_with_a_failure(tmp_path: Path) -> None:
    model = ScriptedModel([Step(text="Again.", command="true", repeat=True)])
    with model:
        p = run(model, tmp_path, "loop")
    assert p.returncode == 1 and p.stdout == ""
    assert f"stopped after {antigravity_standin.MAX_STEPS} model calls" in p.stderr
    assert len(model.requests) == antigravity_standin.MAX_STEPS


def test_no_model_fails_the_run(tmp_path: Path) -> None:
    model = ScriptedModel([])
    model.start()
    model.stop()  # its port is now closed
    p = run(model, tmp_path, "hello")
    assert p.returncode != 0 and p.stdout == ""
    assert "Connection refused" in p.stderr
