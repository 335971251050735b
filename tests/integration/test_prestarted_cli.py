"""Pre-started CLIs: once a turn ends (or, for a sandbox's first turn, on ``prepare_turn``) the driver starts
the next turn's ``claude`` and the next turn uses it; one that died or whose configuration differs is replaced,
never used. The real driver over the real gateway (as in test_gateway_driver.py), the real ``claude`` CLI, the
scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.paths import cli_dir
from hangar.testing.model_server import ScriptedModel, Step
from hangar_driver import protocol as P
from hangar_operator.gateway import Gateway
from tests.integration.test_gateway_driver import (
    AGENT_PATH,
    DRIVER_PYTHON,
    IS_ROOT,
    SANDBOX,
    Store,
    sandbox,
    turn_ended,
    until,
)

__all__ = ["sandbox"]  # the fixture, used by name

CLAUDE = cli_dir() / "node_modules" / ".bin" / "claude"
pytestmark = pytest.mark.skipif(not CLAUDE.exists(), reason="the agent CLIs are not installed")


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel([Step(text="FINAL: ok", repeat=True)]) as m:
        yield m


class ClaudeDriver:
    def __init__(self, sandbox: Path, run: str, key: str, port: int, model: ScriptedModel) -> None:
        self.run = run
        workspace = sandbox / "workspace"
        workspace.mkdir(exist_ok=True)
        home = sandbox / "home"
        home.mkdir(exist_ok=True)
        if IS_ROOT:
            os.chown(workspace, 1001, 1001)
            os.chown(home, 1001, 1001)
        secret = sandbox / "secret"
        secret.mkdir(mode=0o700, exist_ok=True)
        key_file = secret / "run-key"
        key_file.write_text(key + "\n")
        key_file.chmod(0o400)
        self.log = sandbox / "driver.log"
        env = {
            "PATH": AGENT_PATH,
            "PYTHONPATH": str(SANDBOX),
            "HANGAR_GATEWAY": f"127.0.0.1:{port}",
            "HANGAR_RUN_ID": run,
            "HANGAR_HARNESS": "claude",
            "HANGAR_CLI_PATH": str(CLAUDE.parent),
            "HANGAR_WORKSPACE": str(workspace),
            "HANGAR_STATE_DIR": str(sandbox / "state"),
            "HANGAR_RUN_KEY_FILE": str(key_file),
            "HANGAR_AGENT_ENV_HOME": str(home),
            "HANGAR_AGENT_ENV_ANTHROPIC_BASE_URL": model.anthropic_base_url,
            "HANGAR_AGENT_ENV_ANTHROPIC_API_KEY": "sk-test",
            "LANG": "C.UTF-8",
        }
        self.proc = subprocess.Popen(
            [DRIVER_PYTHON, "-m", "hangar_driver"],
            env=env,
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
async def claude_env(sandbox: Path, model: ScriptedModel) -> AsyncIterator[Callable[[], Any]]:
    started: list[tuple[Gateway, ClaudeDriver]] = []

    async def start() -> tuple[Store, Gateway, ClaudeDriver]:
        store = Store()
        run = "run-" + os.urandom(4).hex()
        key = P.new_run_key()
        store.keys[run] = key.encode()
        gw = store.gateway()
        port = await gw.start()
        drv = ClaudeDriver(sandbox, run, key, port, model)
        started.append((gw, drv))
        assert await gw.wait_connected(run, 30), drv.logs()
        return store, gw, drv

    yield start
    for gw, drv in started:
        drv.stop()
        await gw.stop()


def claude_children(driver_pid: int) -> list[int]:
    """The CLI processes the driver started whose main thread runs (each leads its own process group)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == driver_pid and fields[0] != "Z":
            out.append(int(pid))
    return out


async def run_turn(store: Store, gw: Gateway, drv: ClaudeDriver, turn: str, **body: Any) -> dict[str, Any]:
    conversation = [p["id"] for p in store.named(drv.run, "conversation")]
    await gw.send(
        drv.run,
        "start_turn",
        {
            "turn": turn,
            "message": f"{turn}: answer briefly",
            "approvals": "auto",
            "model": "claude-sonnet-4-5",
            "conversation": conversation[-1] if conversation else None,
            **body,
        },
    )
    ended = await until(lambda: turn_ended(store, drv.run, turn), timeout=90, what=f"{turn} ended")
    assert ended["outcome"] == "completed", (ended, drv.logs())
    return ended


def started_of(store: Store, run: str, turn: str) -> dict[str, Any]:
    [p] = [p for p in store.named(run, "turn_started") if p.get("turn") == turn]
    return p


def logs_of(store: Store, run: str) -> list[str]:
    return [str(p.get("message")) for p in store.named(run, "log")]


async def test_the_next_turn_takes_the_cli_started_when_the_last_one_ended(
    claude_env: Callable[[], Any], model: ScriptedModel
) -> None:
    store, gw, drv = await claude_env()
    run = drv.run
    await run_turn(store, gw, drv, "s-1")
    assert "prestarted" not in started_of(store, run, "s-1")  # nothing ran before it
    # After the turn the next turn's CLI is started and waits: one process, the driver's child.
    await until(lambda: len(claude_children(drv.proc.pid)) == 1, timeout=30, what="a pre-started CLI")
    [warm] = claude_children(drv.proc.pid)
    await run_turn(store, gw, drv, "s-2")
    assert started_of(store, run, "s-2").get("prestarted") is True, logs_of(store, run)
    # It was that process, it resumed the conversation, and it is gone with its turn.
    assert warm not in claude_children(drv.proc.pid)
    ids = {p["id"] for p in store.named(run, "conversation")}
    assert len(ids) == 1, ids  # --resume of the first turn's conversation
    assert "s-1: answer briefly" in json.dumps(model.requests[-1].body)  # the first turn, resumed


async def test_a_changed_model_or_a_dead_cli_is_replaced_not_used(claude_env: Callable[[], Any]) -> None:
    store, gw, drv = await claude_env()
    run = drv.run
    await run_turn(store, gw, drv, "m-1")
    await until(lambda: len(claude_children(drv.proc.pid)) == 1, timeout=30, what="a pre-started CLI")
    # Another model: the pre-started CLI's command line differs, so a fresh one runs the turn.
    await run_turn(store, gw, drv, "m-2", model="claude-haiku-4-5")
    assert "prestarted" not in started_of(store, run, "m-2")
    assert any("not used (the command line differed)" in m for m in logs_of(store, run)), logs_of(store, run)
    # A pre-started CLI that died is not used either.
    await until(lambda: len(claude_children(drv.proc.pid)) == 1, timeout=30, what="a pre-started CLI")
    [warm] = claude_children(drv.proc.pid)
    os.kill(warm, signal.SIGKILL)
    # Its main thread a zombie: the first sign of its death, tens of milliseconds before the kernel reports
    # the exit (poll()) once its last thread is gone. The turn that comes now must refuse it all the same.
    await until(lambda: warm not in claude_children(drv.proc.pid), what="the pre-started CLI dead")
    await run_turn(store, gw, drv, "m-3", model="claude-haiku-4-5")
    assert "prestarted" not in started_of(store, run, "m-3")
    logs = logs_of(store, run)
    assert any("not used (it had exited (-9)" in m or "not used (it was exiting" in m for m in logs), logs
    # A turn named otherwise than predicted (m-4) is not the one pre-started: replaced.
    await until(lambda: len(claude_children(drv.proc.pid)) == 1, timeout=30, what="a pre-started CLI")
    await run_turn(store, gw, drv, "other-1", model="claude-haiku-4-5")
    assert "prestarted" not in started_of(store, run, "other-1")
    assert any("the environment differed" in m for m in logs_of(store, run))  # $HANGAR_IO is the turn's
    # The driver's shutdown stops the waiting CLI with everything else.
    await until(lambda: len(claude_children(drv.proc.pid)) == 1, timeout=30, what="a pre-started CLI")
    [warm] = claude_children(drv.proc.pid)
    cid = await gw.send(run, "shutdown", {})
    await until(lambda: store.result_of(run, cid), what="shutdown result")
    await until(lambda: drv.proc.poll() is not None, timeout=30, what="driver exit")
    await until(lambda: not Path(f"/proc/{warm}").exists(), timeout=10, what="the pre-started CLI gone")


async def test_prepare_turn_pre_starts_the_first_turns_cli(
    claude_env: Callable[[], Any], model: ScriptedModel
) -> None:
    store, gw, drv = await claude_env()
    run = drv.run
    body = {"turn": "p-1", "approvals": "auto", "model": "claude-sonnet-4-5", "conversation": None}
    cid = await gw.send(run, "prepare_turn", body)
    [result] = await until(lambda: store.result_of(run, cid), what="prepare_turn result")
    assert result["ok"] and result["prestarted"] is True, (result, drv.logs())
    [warm] = claude_children(drv.proc.pid)
    # It waits for its message: no model request, no turn event.
    assert not model.requests and not store.named(run, "turn_started")
    await run_turn(store, gw, drv, "p-1")
    assert started_of(store, run, "p-1").get("prestarted") is True, logs_of(store, run)
    assert warm not in claude_children(drv.proc.pid)
    # After it the driver pre-starts the next turn itself, as for every turn.
    await until(lambda: len(claude_children(drv.proc.pid)) == 1, timeout=30, what="a pre-started CLI")
    await run_turn(store, gw, drv, "p-2")
    assert started_of(store, run, "p-2").get("prestarted") is True, logs_of(store, run)
