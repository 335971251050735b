"""The harness adapters against the real agent CLIs and scripted model servers (no mocks).

Needs the pinned CLIs from ``tools/install-clis.sh`` (``HANGAR_CLI_DIR`` or the default directory); skipped
with the reason when they are not installed. Every CLI runs with a throw-away HOME / CODEX_HOME /
PI_CODING_AGENT_DIR and the quiet environment, against a ScriptedModel on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.paths import cli_dir
from hangar.testing.model_server import DEMO_SCRIPT, ScriptedModel, Step
from hangar_driver.adapters import make_harness
from hangar_driver.harness import Harness, NotLive, TurnConfig

pytestmark = pytest.mark.clis

BIN = cli_dir() / "node_modules" / ".bin"
CLAUDE = BIN / "claude"
CODEX = BIN / "codex"
PI = BIN / "pi"
CLAUDE_MODEL = "claude-sonnet-4-5"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
OPENAI_KEY_VAR = "HANGAR_TEST_OPENAI_KEY"

# A tool that runs long enough to steer or interrupt it (Claude refuses `sleep N; ...` on its own).
SLOW = "python3 -c 'import time; time.sleep({secs})'"
TIMEOUT = 30.0


NOBODY = {"uid": 65534, "gid": 65534}


class AsTheCore:
    """The adapter, called the way the driver core calls it: every contract call holds ``harness.lock``
    (``hangar_driver.main``). An adapter whose reader thread takes that lock deadlocks here as in a pod
    (codex's thread/start answer sat unread behind a notification for 60 s)."""

    CALLS = ("start_turn", "steer", "withdraw", "interrupt", "answer", "running", "close")

    def __init__(self, harness: Harness) -> None:
        self._harness = harness

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._harness, name)
        if name not in self.CALLS:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._harness.lock:
                return value(*args, **kwargs)

        return call


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(
            f"{path.name} CLI not installed in {cli_dir()}: run tools/install-clis.sh (or set HANGAR_CLI_DIR)"
        )


# -- the event collector ------------------------------------------------------------------------------------------


class Events:
    """``emit`` for an adapter: records events; tests wait on them. ``hooks[name]`` runs in the emitting thread."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self.cond = threading.Condition()
        self.hooks: dict[str, Callable[[dict[str, Any]], None]] = {}

    def __call__(self, name: str, payload: dict[str, Any]) -> None:
        with self.cond:
            self.items.append((name, payload))
            self.cond.notify_all()
        hook = self.hooks.get(name)
        if hook is not None:
            hook(payload)

    def all(self, name: str) -> list[dict[str, Any]]:
        with self.cond:
            return [p for n, p in self.items if n == name]

    def wait(
        self, name: str, pred: Callable[[dict[str, Any]], bool] = lambda p: True, timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for n, p in self.items:
                if n == name and pred(p):
                    return p
            return None

        with self.cond:
            if not self.cond.wait_for(lambda: find() is not None, timeout):
                raise AssertionError(f"no {name} event in {timeout}s; events: {self.summary()}")
            found = find()
            assert found is not None
            return found

    def ended(self, turn: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        return self.wait("turn_ended", lambda p: p["turn"] == turn, timeout)

    def summary(self) -> str:
        return ", ".join(f"{n}:{json.dumps(p)[:120]}" for n, p in self.items)


class Rig:
    """One adapter, its event collector, its scripted model and its throw-away directories."""

    def __init__(
        self, harness_name: str, tmp: Path, model: ScriptedModel, run_as: dict[str, int] | None = None
    ) -> None:
        self.run_as = run_as
        self.events = Events()
        self.harness: Harness = AsTheCore(make_harness(harness_name, self.events))  # type: ignore[assignment]
        self.name = harness_name
        self.model = model
        self.home = tmp / "home"
        self.work = tmp / "work"
        self.home.mkdir(parents=True)
        self.work.mkdir(parents=True)
        if run_as:
            for d in (tmp, self.home, self.work):
                os.chown(d, run_as["uid"], run_as["gid"])

    @property
    def conversation(self) -> str | None:
        """The latest conversation id the adapter reported (Claude session, Codex thread, pi session)."""
        convs = self.events.all("conversation")
        return convs[-1]["id"] if convs else None

    def env(self) -> dict[str, str]:
        env = {"PATH": f"{BIN}:{SYSTEM_PATH}", "HOME": str(self.home), "LANG": "C.UTF-8"}
        if self.name == "claude":
            env.update(
                ANTHROPIC_BASE_URL=self.model.anthropic_base_url,
                ANTHROPIC_API_KEY="sk-ant-dummy-not-a-real-key",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                DISABLE_TELEMETRY="1",
                DISABLE_AUTOUPDATER="1",
                DISABLE_ERROR_REPORTING="1",
            )
        elif self.name == "codex":
            env.update({"CODEX_HOME": str(self.home / "codex"), OPENAI_KEY_VAR: "dummy-not-a-real-key"})
        elif self.name == "pi":
            env.update(PI_CODING_AGENT_DIR=str(self.home / "pi"), PI_OFFLINE="1")
        return env

    def cfg(self, message: str, approvals: str = "auto", conversation: str | None = None) -> TurnConfig:
        turn_id = "t-" + uuid.uuid4().hex[:8]
        if self.name == "claude":
            return TurnConfig(
                turn_id,
                message,
                str(self.work),
                self.env(),
                [str(CLAUDE)],
                CLAUDE_MODEL,
                conversation,
                approvals,
            )
        if self.name == "codex":
            extra = {
                "base_url": self.model.openai_base_url,
                "env_key": OPENAI_KEY_VAR,
                "request_max_retries": 0,
                "stream_max_retries": 0,
            }
            return TurnConfig(
                turn_id,
                message,
                str(self.work),
                self.env(),
                [str(CODEX)],
                "fake-model",
                conversation,
                approvals,
                extra=extra,
            )
        pi_dir = self.home / "pi"
        pi_dir.mkdir(exist_ok=True)
        provider = {
            "baseUrl": self.model.anthropic_base_url,
            "api": "anthropic-messages",
            "apiKey": "dummy-not-a-real-key",
            "models": [
                {
                    "id": "fake-claude",
                    "name": "Fake",
                    "reasoning": False,
                    "contextWindow": 200000,
                    "maxTokens": 8192,
                }
            ],
        }
        (pi_dir / "models.json").write_text(json.dumps({"providers": {"fake": provider}}))
        return TurnConfig(
            turn_id,
            message,
            str(self.work),
            self.env(),
            [str(PI)],
            "fake-claude",
            conversation,
            approvals,
            extra={"provider": "fake"},
        )

    def start(self, message: str, approvals: str = "auto", continue_: bool = False) -> str:
        cfg = self.cfg(message, approvals, self.conversation if continue_ else None)
        cfg.run_as = self.run_as
        self.harness.start_turn(cfg)
        return cfg.turn_id

    def run(self, message: str, approvals: str = "auto", continue_: bool = False) -> dict[str, Any]:
        return self.events.ended(self.start(message, approvals, continue_))

    def steers(self, steer_id: str) -> list[dict[str, Any]]:
        """The steer's events, without ``written_at`` (a timestamp, for the steering bench)."""
        return [
            {k: v for k, v in p.items() if k != "written_at"}
            for p in self.events.all("steer")
            if p["steer_id"] == steer_id
        ]


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[[str, list[Step]], Rig]]:
    rigs: list[Rig] = []
    cleanup: list[Path] = []

    def make(name: str, steps: list[Step], run_as: dict[str, int] | None = None) -> Rig:
        _need({"claude": CLAUDE, "codex": CODEX, "pi": PI}[name])
        model = ScriptedModel(steps)
        model.start()
        if run_as:
            # pytest's tmp_path is private to root: the agent's uid needs a directory it can reach.
            base = Path(tempfile.mkdtemp(prefix="hangar-runas-"))
            base.chmod(0o755)
            cleanup.append(base)
            rig = Rig(name, base / "rig", model, run_as)
        else:
            rig = Rig(name, tmp_path / f"rig{len(rigs)}", model)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.harness.close()
        rig.model.stop()
    for base in cleanup:
        shutil.rmtree(base, ignore_errors=True)


def _wait_streaming(rig: Rig, n: int) -> None:
    """Wait until the n-th model request is streaming its (slow) text."""
    rig.model.wait_for_request(n, TIMEOUT)
    time.sleep(0.6)


def _continue_works(rig: Rig, earlier: str) -> None:
    """The next turn continues the same conversation: the model sees the earlier message."""
    rig.model.add(Step(when="AGAIN", text="FINAL: back again"))
    conversation = rig.conversation
    assert conversation
    ended = rig.run("AGAIN please", continue_=True)
    assert ended["outcome"] == "completed", ended
    assert "back again" in ended["summary"]
    assert rig.model.requests[-1].contains(earlier)
    assert rig.conversation == conversation


LIVE = ["claude", "codex"]


# -- both live harnesses ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LIVE)
def test_turn_runs_a_command_and_the_next_turn_continues(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(
        name,
        [
            Step(when="WRITE", text="I will write the file.", command="echo hi > made.txt"),
            Step(when="tool_result", text="FINAL: the file is written."),
            Step(when="SECOND", text="FINAL: second answer."),
        ],
    )
    with pytest.raises(NotLive):
        rig.harness.steer("s0", "no turn is running")
    ended = rig.run("WRITE the file please")
    assert ended["outcome"] == "completed", ended
    assert ended["exit_status"] == 0
    assert "the file is written" in ended["summary"]
    assert (rig.work / "made.txt").read_text().strip() == "hi"
    assert rig.events.all("tool_use") and rig.events.all("tool_result")
    conversation = rig.conversation
    assert conversation
    usage = rig.events.all("usage")[-1]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    if name == "claude":
        assert usage["cost_usd"] and usage["cost_usd"] > 0
        assert ended["cost_usd"] and ended["cost_usd"] > 0

    ended = rig.run("SECOND question", continue_=True)
    assert ended["outcome"] == "completed", ended
    assert "second answer" in ended["summary"]
    last = rig.model.requests[-1]
    assert last.contains("WRITE the file please")  # the earlier messages are in the request
    assert last.contains("the file is written")
    assert rig.conversation == conversation  # the same Claude session / Codex thread
    assert not rig.model.unmatched
    cumulative = rig.events.all("usage")[-1]
    assert cumulative["input_tokens"] > usage["input_tokens"]


@pytest.mark.parametrize("name", LIVE)
def test_steer_while_a_tool_runs_is_delivered(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(
        name,
        [
            Step(text="Running it.", command=SLOW.format(secs=3)),
            Step(when="STEER: also mention bananas", text="FINAL: bananas mentioned."),
            Step(when="tool_result:STEER: also mention bananas", text="FINAL: bananas mentioned."),
        ],
    )
    turn = rig.start("run the slow thing")
    rig.events.wait("tool_use")
    time.sleep(0.3)
    rig.harness.steer("s1", "STEER: also mention bananas")
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert rig.steers("s1") == [{"steer_id": "s1", "status": "delivered"}]
    # The steer reached the model in the request after the tool result, within this turn.
    after = rig.model.requests[1]
    assert after.tool_results and after.contains("STEER: also mention bananas")
    assert "bananas mentioned" in ended["summary"]
    assert len(rig.events.all("turn_ended")) == 1


@pytest.mark.parametrize("name", LIVE)
def test_steer_while_text_streams(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(
        name,
        [
            Step(text="Thinking out loud:", words=25, word_delay=0.15),
            Step(when="STEER: be brief", text="FINAL: brief now."),
        ],
    )
    turn = rig.start("tell me a long story")
    _wait_streaming(rig, 1)
    rig.harness.steer("s1", "STEER: be brief")
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    if name == "claude":
        # Claude would only queue it as a turn of its own: hangar holds it and reports it queued.
        assert rig.steers("s1") == [{"steer_id": "s1", "status": "queued"}]
        assert len(rig.model.requests) == 1
        assert not any(r.contains("STEER: be brief") for r in rig.model.requests)
        assert "word25" in ended["summary"]
    else:
        # Codex preempts the stream and answers the steer in the same turn.
        assert rig.steers("s1") == [{"steer_id": "s1", "status": "delivered"}]
        assert rig.model.requests[-1].contains("STEER: be brief")
        assert "brief now" in ended["summary"]


def test_claude_withdraw_of_a_held_steer(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig("claude", [Step(text="Streaming:", words=20, word_delay=0.15)])
    turn = rig.start("stream something")
    _wait_streaming(rig, 1)
    rig.harness.steer("s1", "STEER: never mind")
    assert rig.harness.withdraw("s1") is True
    assert rig.harness.withdraw("s1") is False
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed"
    assert rig.steers("s1") == []
    assert not any(r.contains("never mind") for r in rig.model.requests)


def test_claude_held_steer_goes_out_with_the_next_tool_call(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(
        "claude",
        [
            Step(text="Thinking first:", words=10, word_delay=0.15, command=SLOW.format(secs=2)),
            Step(when="tool_result", text="FINAL: done."),
        ],
    )
    turn = rig.start("think, then run")
    _wait_streaming(rig, 1)
    rig.harness.steer("s1", "STEER: held then sent")
    assert rig.steers("s1") == []  # held while text streams
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert rig.steers("s1") == [{"steer_id": "s1", "status": "delivered"}]
    assert len(rig.model.requests) == 2
    assert any("STEER: held then sent" in t for t in rig.model.requests[1].tool_results)


def test_claude_interrupt_cancels_a_steer_not_yet_taken_in(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig("claude", [Step(text="Slow.", command=SLOW.format(secs=8))])
    turn = rig.start("run the slow command")
    rig.events.wait("tool_use")
    time.sleep(0.3)
    rig.harness.steer("s1", "STEER: too late")  # written: the tool is running
    time.sleep(0.3)
    rig.harness.interrupt()
    ended = rig.events.ended(turn, 15)
    assert ended["outcome"] == "interrupted" and ended["exit_status"] == 130, ended
    # The CLI never took it in (interrupt with cancel_queued): the core gets it back for the next turn.
    assert rig.steers("s1") == [{"steer_id": "s1", "status": "queued"}]
    assert len(rig.model.requests) == 1
    assert not any(r.contains("STEER: too late") for r in rig.model.requests)


def test_codex_withdraw_after_delivery_is_too_late(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(
        "codex",
        [Step(text="Running.", command=SLOW.format(secs=2)), Step(when="tool_result", text="FINAL: done.")],
    )
    turn = rig.start("run it")
    rig.events.wait("tool_use")
    rig.harness.steer("s1", "STEER: noted")
    assert rig.harness.withdraw("s1") is False
    assert rig.events.ended(turn)["outcome"] == "completed"
    assert rig.steers("s1") == [{"steer_id": "s1", "status": "delivered"}]


def test_claude_steer_racing_a_finished_tool_runs_as_a_follow_on(make_rig: Callable[..., Rig]) -> None:
    """The tool ends while the steer is being written: the CLI runs the steer as an extra turn. It is still
    reported once, as delivered, and its answer is part of this turn."""
    rig = make_rig(
        "claude",
        [
            Step(text="Quick one.", command="echo fast"),
            Step(when="tool_result", text="After the tool:", words=6, word_delay=0.2),
            Step(when="STEER: race", text="FINAL: answered the race steer."),
        ],
    )

    def late_steer(_payload: dict[str, Any]) -> None:
        # Runs in the adapter's reader thread, so the adapter still believes the tool is running while the
        # CLI has finished it and is already streaming its next answer.
        rig.model.wait_for_request(2, TIMEOUT)
        time.sleep(0.3)
        rig.harness.steer("s1", "STEER: race")

    rig.events.hooks["tool_use"] = late_steer
    turn = rig.start("run a quick command")
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert rig.steers("s1") == [{"steer_id": "s1", "status": "delivered"}]
    assert any("follow-on" in p["message"] for p in rig.events.all("log"))
    assert "After the tool:" in ended["summary"] and "answered the race steer" in ended["summary"]
    assert any("STEER: race" in r.user_text for r in rig.model.requests)
    assert len(rig.events.all("turn_ended")) == 1


@pytest.mark.parametrize("name", LIVE)
def test_interrupt_while_text_streams(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(name, [Step(text="Going on and on:", words=60, word_delay=0.15)])
    turn = rig.start("talk a lot")
    _wait_streaming(rig, 1)
    t0 = time.monotonic()
    rig.harness.interrupt()
    ended = rig.events.ended(turn, 15)
    assert ended["outcome"] == "interrupted" and ended["exit_status"] == 130, ended
    assert time.monotonic() - t0 < 5  # confirmed by the CLI, not by the kill timeout
    assert not any("did not confirm" in p["message"] for p in rig.events.all("log"))
    _continue_works(rig, "talk a lot")


@pytest.mark.parametrize("name", LIVE)
def test_interrupt_while_a_tool_runs(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(name, [Step(text="Slow.", command=SLOW.format(secs=8) + " && echo late > late.txt")])
    turn = rig.start("run the slow command")
    rig.events.wait("tool_use")
    time.sleep(0.8)
    rig.harness.interrupt()
    ended = rig.events.ended(turn, 15)
    assert ended["outcome"] == "interrupted" and ended["exit_status"] == 130, ended
    assert not any("did not confirm" in p["message"] for p in rig.events.all("log"))
    _continue_works(rig, "run the slow command")
    assert not (rig.work / "late.txt").exists()


@pytest.mark.parametrize("name", LIVE)
def test_interrupt_while_a_permission_prompt_is_pending(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(name, [Step(text="Writing.", command="echo hi > asked.txt")])
    turn = rig.start("write it", approvals="ask")
    req = rig.events.wait("permission_request")
    rig.harness.interrupt()
    ended = rig.events.ended(turn, 15)
    assert ended["outcome"] == "interrupted" and ended["exit_status"] == 130, ended
    assert rig.events.all("permission_cancelled") == [{"request_id": req["request_id"]}]
    assert not (rig.work / "asked.txt").exists()
    _continue_works(rig, "write it")


@pytest.mark.parametrize("name", LIVE)
def test_approval_allow_runs_the_command(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(
        name,
        [
            Step(text="Writing.", command="echo hi > allowed.txt"),
            Step(when="tool_result", text="FINAL: written."),
        ],
    )
    turn = rig.start("write it", approvals="ask")
    req = rig.events.wait("permission_request")
    assert "echo hi > allowed.txt" in (req["command"] or "")
    assert req["cwd"]
    rig.harness.answer(req["request_id"], "allow")
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert (rig.work / "allowed.txt").exists()


@pytest.mark.parametrize("name", LIVE)
def test_approval_deny_tells_the_agent_and_the_turn_completes(
    make_rig: Callable[..., Rig], name: str
) -> None:
    rig = make_rig(
        name,
        [
            Step(text="Writing.", command="echo hi > denied.txt"),
            Step(when="tool_result", text="FINAL: understood, not writing."),
            Step(when="not in this repo", text="FINAL: understood, not writing."),
        ],
    )
    turn = rig.start("write it", approvals="ask")
    req = rig.events.wait("permission_request")
    rig.harness.answer(req["request_id"], "deny", "not in this repo")
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert not (rig.work / "denied.txt").exists()
    assert any(r.contains("not in this repo") for r in rig.model.requests[1:])
    result = rig.events.wait("tool_result")
    assert result["is_error"] is True


@pytest.mark.parametrize("name", LIVE)
def test_allow_always_covers_the_next_similar_call(make_rig: Callable[..., Rig], name: str) -> None:
    # Claude's own suggestion for `git init -q r1` is the session rule `Bash(git init *)`; Codex's
    # acceptForSession covers the same command again.
    first, second = ("git init -q r1", "git init -q r2") if name == "claude" else ("git init -q r1",) * 2
    rig = make_rig(
        name,
        [
            Step(when="INIT", text="First.", command=first),
            Step(when="tool_result", text="Again.", command=second),
            Step(when="tool_result", text="FINAL: twice."),
            Step(when="ONCE MORE", text="Once more.", command=second),
            Step(when="tool_result", text="FINAL: once more."),
        ],
    )
    turn = rig.start("INIT twice", approvals="ask")
    req = rig.events.wait("permission_request")
    assert req["command"] and first in req["command"]
    rig.harness.answer(req["request_id"], "allow_always")
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert len(rig.events.all("permission_request")) == 1
    assert (rig.work / "r1" / ".git").is_dir()
    assert (rig.work / second.split()[-1] / ".git").is_dir()
    # Nothing was written to settings files, and the grant died with the turn's process: the next turn asks.
    assert not (rig.work / ".claude").exists()
    assert not (rig.home / ".claude" / "settings.json").exists()
    turn = rig.start("ONCE MORE", approvals="ask", continue_=True)
    again = rig.events.wait("permission_request", lambda p: p["request_id"] != req["request_id"])
    rig.harness.answer(again["request_id"], "allow")
    assert rig.events.ended(turn)["outcome"] == "completed"


@pytest.mark.parametrize("name", LIVE)
def test_unknown_conversation_fails_the_turn(make_rig: Callable[..., Rig], name: str) -> None:
    rig = make_rig(name, [])
    cfg = rig.cfg("hello", conversation=str(uuid.uuid4()))
    rig.harness.start_turn(cfg)
    ended = rig.events.ended(cfg.turn_id)
    assert ended["outcome"] == "failed" and ended["exit_status"] != 0, ended
    assert ended["error"]
    assert not rig.harness.running()
    assert not rig.model.requests


# -- one-shot pi --------------------------------------------------------------------------------------------------


def test_pi_one_shot_turn(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(
        "pi",
        [
            Step(when="WRITE", text="Writing.", command="echo hi > pi.txt"),
            Step(when="tool_result", text="FINAL: pi wrote it."),
            Step(when="AGAIN", text="FINAL: back again"),
        ],
    )
    turn = rig.start("WRITE it")
    with pytest.raises(NotLive):
        rig.harness.steer("s1", "no")
    assert rig.harness.withdraw("s1") is False
    ended = rig.events.ended(turn)
    assert ended["outcome"] == "completed", ended
    assert ended["summary"] == "FINAL: pi wrote it."
    assert (rig.work / "pi.txt").exists()
    assert rig.events.all("tool_use")[0]["tool"] == "bash"
    assert rig.events.all("usage")[-1]["input_tokens"] > 0
    _continue_works(rig, "WRITE it")


def test_pi_interrupt_kills_it(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig("pi", [Step(text="Slow.", command=SLOW.format(secs=20) + " && echo late > late.txt")])
    turn = rig.start("run the slow command")
    rig.events.wait("tool_use")
    time.sleep(1.0)
    t0 = time.monotonic()
    rig.harness.interrupt()
    ended = rig.events.ended(turn, 10)
    assert ended["outcome"] == "interrupted" and ended["exit_status"] == 130
    assert time.monotonic() - t0 < 5
    assert not rig.harness.running()
    assert not (rig.work / "late.txt").exists()


def test_pi_refuses_approvals_other_than_auto(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig("pi", [])
    ended = rig.run("anything", approvals="ask")
    assert ended["outcome"] == "failed" and "one-shot" in ended["error"]
    assert not rig.model.requests


# -- the agent process: its uid, its environment, its process group, and the demo script ---------------------------


def test_command_harness_runs_with_only_the_turn_env_in_its_own_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGAR_DRIVER_SECRET", "must-not-leak")
    events = Events()
    harness = make_harness("antigravity", events)
    script = 'echo "uid=$(id -u) gid=$(id -g) pgid=$(cut -d" " -f5 /proc/$$/stat) pid=$$"; env; echo "msg=$1"'
    run_as = NOBODY if os.getuid() == 0 else None
    work = Path(tempfile.mkdtemp(prefix="hangar-cmd-"))
    try:
        work.chmod(0o755)
        cfg = TurnConfig(
            "t1",
            "-- a message, not a flag",
            str(work),
            {"PATH": SYSTEM_PATH, "HOME": str(work), "ONLY_THIS": "1"},
            run_as=run_as,
            extra={"command": ["sh", "-c", script, "sh"]},
        )
        harness.start_turn(cfg)
        ended = events.ended("t1")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert ended["outcome"] == "completed", ended
    out = ended["summary"]
    assert "msg=-- a message, not a flag" in out
    assert "ONLY_THIS=1" in out and "must-not-leak" not in out and "HANGAR_DRIVER_SECRET" not in out
    ids = dict(kv.split("=") for kv in out.splitlines()[0].split())
    assert ids["pgid"] == ids["pid"]  # a process group of its own
    if run_as:
        assert (ids["uid"], ids["gid"]) == ("65534", "65534")
    with pytest.raises(NotLive):
        harness.steer("s1", "x")


@pytest.mark.skipif(os.getuid() != 0, reason="running the agent under another uid needs root")
@pytest.mark.parametrize("name", LIVE)
def test_live_harness_runs_under_another_uid(make_rig: Callable[..., Rig], name: str) -> None:
    """The installed CLIs work for the agent's own uid (install-clis.sh makes them world-readable)."""
    rig = make_rig(
        name,
        [Step(text="Writing.", command="id -u > uid.txt"), Step(when="tool_result", text="FINAL: done.")],
        run_as=NOBODY,
    )
    ended = rig.run("write your uid")
    assert ended["outcome"] == "completed", ended
    assert (rig.work / "uid.txt").read_text().strip() == "65534"
    assert (rig.work / "uid.txt").stat().st_uid == 65534


def test_demo_script_drives_claude(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig("claude", DEMO_SCRIPT)
    for continue_ in (False, True):
        ended = rig.run("show me what you can do", continue_=continue_)
        assert ended["outcome"] == "completed", ended
        assert "scripted demo turn" in ended["summary"]
        assert "hello from hangar" in rig.events.all("tool_result")[-1]["output"]


def test_model_server_command_line_serves_the_demo() -> None:
    """`python -m hangar.testing.model_server` as `hangar dev` runs it: both APIs, non-streaming too."""
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen(
        [sys.executable, "-m", "hangar.testing.model_server", "--openai", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:") and line.strip().endswith("/v1")
        base = line.split()[-1].removesuffix("/v1")

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(
                base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=10) as resp:
                out: dict[str, Any] = json.loads(resp.read())
                return out

        with urllib.request.urlopen(base + "/healthz", timeout=10) as resp:
            assert resp.status == 200
        first = post(
            "/v1/responses", {"input": "hi", "tools": [{"type": "function", "name": "exec_command"}]}
        )
        call = next(o for o in first["output"] if o["type"] == "function_call")
        assert call["name"] == "exec_command" and "hello from hangar" in json.loads(call["arguments"])["cmd"]
        assert first["usage"]["input_tokens"] > 0
        tool_output = {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
        second = post("/v1/responses", {"input": [call, tool_output]})
        assert "scripted demo turn" in second["output"][0]["content"][0]["text"]
        msg = post(
            "/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "bash"}]}
        )
        assert msg["content"][-1] == {
            "type": "tool_use",
            "id": msg["content"][-1]["id"],
            "name": "bash",
            "input": {"command": "echo 'hello from hangar' && pwd && ls -a"},
        }
        assert post("/v1/messages/count_tokens", {"messages": []}) == {"input_tokens": 42}
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
