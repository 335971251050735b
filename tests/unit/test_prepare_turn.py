"""``prepare_turn``: the driver pre-starts the CLI of a sandbox's first turn from what its ``start_turn`` will
carry, the operator decides when to send it. The driver's side runs real processes: a stand-in for the CLI
that, like ``claude -p``, waits on its stdin (the real CLI: tests/integration/test_prestarted_cli.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.models import Session
from hangar.models.environment import EnvironmentSpec
from hangar.turns import create_turn
from hangar_driver import live
from hangar_driver import protocol as P
from hangar_driver.commands import CommandError
from hangar_driver.config import Config
from hangar_driver.driver import Driver
from hangar_driver.handback import HandbackWatcher
from hangar_driver.turns import TurnRunner
from hangar_operator.prepare_turn import PRESTART_AFTER, prepare_body, prepare_first_turn
from tests.unit.operator_rig import make_rig

WAITER = [sys.executable, "-c", "import sys; sys.stdin.read()"]
Events = list[tuple[str, dict[str, Any]]]


def driver_config(tmp_path: Path, harness: str = "claude", **more: str) -> Config:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "state" / "io").mkdir(parents=True, exist_ok=True)  # as Driver.prepare makes it
    cfg = Config(
        {
            "HANGAR_RUN_ID": "s-r1",
            "HANGAR_HARNESS": harness,
            "HANGAR_GATEWAY": "127.0.0.1:1",
            "HANGAR_WORKSPACE": str(tmp_path / "ws"),
            "HANGAR_STATE_DIR": str(tmp_path / "state"),
            "HANGAR_CLI_ARGV": json.dumps(WAITER),
            **more,
        }
    )
    cfg.agent_uid = cfg.agent_gid = None  # as this user (the uid split is the driver's, tested elsewhere)
    return cfg


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Callable[..., tuple[TurnRunner, Events]]]:
    made: list[TurnRunner] = []

    def make(harness: str = "claude") -> tuple[TurnRunner, Events]:
        events: Events = []
        cfg = driver_config(tmp_path, harness)
        watcher = HandbackWatcher(lambda n, p: None, {os.geteuid()})
        r = TurnRunner(cfg, watcher, lambda n, p: events.append((n, p)), threading.Event())
        made.append(r)
        return r, events

    yield make
    for r in made:
        r.close()


def warm_proc(r: TurnRunner) -> Any:
    warm = r.harness._warm  # type: ignore[union-attr]
    return warm.proc if warm is not None else None


def until(check: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


PREPARE = {"turn": "s-1", "model": "claude-sonnet-4-5", "approvals": "auto", "conversation": None}


def test_the_first_turn_takes_the_cli_prepared_for_it_and_nothing_shows_before(runner: Any) -> None:
    r, events = runner()
    assert r.prepare_turn(dict(PREPARE)) == {"prestarted": True}
    proc = warm_proc(r)
    assert proc is not None and proc.poll() is None
    # No turn: one line in the log, no turn event, nothing the turn commands see as running.
    assert [n for n, _ in events] == ["log"] and "pre-started for turn s-1" in events[0][1]["message"]
    assert not r.running() and r.current_turn is None and not r.turns_started
    r.start_turn({**PREPARE, "message": "hello"})
    [started] = [p for n, p in events if n == "turn_started"]
    assert started == {"turn": "s-1", "prestarted": True}
    assert r.harness._turn.proc is proc  # type: ignore[union-attr]
    assert warm_proc(r) is None
    r.close()
    until(lambda: proc.poll() is not None, "the turn's CLI stopped")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"model": "claude-haiku-4-5"}, "the command line differed"),
        ({"conversation": "c-1"}, "the command line differed"),  # --resume
        ({"approvals": "ask"}, "the command line, the environment differed"),  # IS_SANDBOX
        ({"turn": "s-2"}, "the environment differed"),  # $HANGAR_IO is the turn's
        ({"env": {"FOO": "bar"}}, "the environment differed"),
    ],
)
def test_a_start_turn_that_differs_starts_a_fresh_cli(runner: Any, change: dict[str, Any], why: str) -> None:
    r, events = runner()
    assert r.prepare_turn(dict(PREPARE))["prestarted"] is True
    proc = warm_proc(r)
    r.start_turn({**PREPARE, **change, "message": "hello"})
    [started] = [p for n, p in events if n == "turn_started"]
    assert "prestarted" not in started
    assert any(why in str(p.get("message")) for n, p in events if n == "log"), events
    until(lambda: proc.poll() is not None, "the prepared CLI stopped")
    assert r.harness._turn.proc is not proc  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"turn": "../etc"}, "turn must be a name"),
        ({}, "turn must be a name"),
        ({"turn": "s-1", "fork": True}, "fork needs the conversation"),
        ({"turn": "s-1", "fork": "yes", "conversation": "c"}, "fork must be true or false"),
        ({"turn": "s-1", "env": {"A": 1}}, "env must map names to strings"),
        ({"turn": "s-1", "env": {"A=B": "x"}}, "env must map names to strings"),
        ({"turn": "s-1", "extra": ["x"]}, "extra must be an object"),
        ({"turn": "s-1", "argv_prefix": "claude"}, "argv_prefix must be a list of strings"),
        ({"turn": "s-1", "model": 5}, "model must be a string"),
        ({"turn": "s-1", "approvals": "x" * 41}, "approvals must be a string"),
    ],
)
def test_a_bad_prepare_turn_is_refused_and_starts_nothing(
    runner: Any, body: dict[str, Any], error: str
) -> None:
    r, events = runner()
    with pytest.raises(CommandError, match=error):
        r.prepare_turn(body)
    assert warm_proc(r) is None and events == []


def test_no_cli_is_prepared_for_a_started_turn_a_running_one_or_a_closing_driver(runner: Any) -> None:
    r, _ = runner()
    r.start_turn({**PREPARE, "message": "hello"})
    with pytest.raises(CommandError, match="turn s-1 was already started"):
        r.prepare_turn(dict(PREPARE))
    assert r.prepare_turn({**PREPARE, "turn": "s-2"}) == {"prestarted": False, "why": "a turn is running"}
    assert warm_proc(r) is None
    r.close()
    assert r.prepare_turn({**PREPARE, "turn": "s-3"}) == {
        "prestarted": False,
        "why": "the sandbox is shutting down",
    }
    assert warm_proc(r) is None


@pytest.mark.parametrize("harness", ["codex", "pi"])
def test_a_harness_that_does_not_prestart_says_so(runner: Any, harness: str) -> None:
    r, events = runner(harness)
    out = r.prepare_turn(dict(PREPARE))
    assert out == {"prestarted": False, "why": f"harness {harness} does not pre-start its CLI"}
    assert events == []


def test_a_prepared_cli_dies_with_the_driver_close_and_at_its_max_age(
    runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, _ = runner()
    r.prepare_turn(dict(PREPARE))
    proc = warm_proc(r)
    r.close()
    assert proc.poll() is not None and warm_proc(r) is None
    # One no turn takes is stopped at WARM_MAX_AGE, not left holding its memory.
    monkeypatch.setattr(live, "WARM_MAX_AGE", 0.3)
    r2, _ = runner()
    r2.prepare_turn(dict(PREPARE))
    proc = warm_proc(r2)
    until(lambda: proc.poll() is not None, "the prepared CLI stopped at its max age")
    assert warm_proc(r2) is None
    # A later prepare replaces the earlier one (stopped), never leaves two waiting.
    r2.prepare_turn(dict(PREPARE))
    first = warm_proc(r2)
    monkeypatch.setattr(live, "WARM_MAX_AGE", 600.0)
    r2.prepare_turn({**PREPARE, "model": "claude-haiku-4-5"})
    assert first.poll() is not None and warm_proc(r2) is not first


def test_a_warm_pool_sandbox_refuses_prepare_turn_until_adopted(tmp_path: Path) -> None:
    cfg = driver_config(tmp_path, HANGAR_POOL="1")
    d = Driver(cfg, b"k" * 43)
    try:
        d._execute("prepare-1", {"op": P.OP_PREPARE_TURN, **PREPARE})
        [result] = [p for n, p in d.outbox.unnumbered if n == P.EV_COMMAND_RESULT]
        assert result["ok"] is False and result["op"] == "prepare_turn"
        assert "runs nothing until a session adopts it" in result["error"]
        assert warm_proc(d.turns) is None
    finally:
        d.turns.close()


# -- the operator's side ------------------------------------------------------------------------------------


async def test_the_operator_prepares_only_a_connected_idle_sessions_first_turn(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.session("s1", model="claude-sonnet-4-5")
    await rig.reconcile("s1")
    env = EnvironmentSpec.model_validate(rig.get("environments", "dev")["spec"])

    def body(turns: list[dict[str, Any]] | None = None, policy: str = "auto") -> dict[str, Any] | None:
        return prepare_body(
            Session.model_validate(rig.get("sessions", "s1")), "s1-r1", turns or [], policy, env
        )

    assert body() is None  # starting: not connected yet
    await rig.connect("s1")
    assert rig.status("sessions", "s1")["phase"] == "Idle"
    assert body(policy="ask") == {
        "turn": "s1-1",
        "model": "claude-sonnet-4-5",
        "conversation": None,
        "fork": False,
        "approvals": "ask",
        "tainted": False,
        "extra": env.harness_options,
    }
    # The gateway has no driver for the run here: nothing is queued for one that is not there.
    assert not await prepare_first_turn(rig.ctx, "default", rig.get("sessions", "s1"), [], "auto", env)
    assert not any(c.startswith("prepare-") for c in rig.commands("s1-r1"))
    # Not for another run than the session's, nor with a turn queued, nor after a turn ran in this run.
    assert prepare_body(Session.model_validate(rig.get("sessions", "s1")), "s1-r2", [], "auto", env) is None
    await create_turn(rig.kube.scoped("default"), "s1", "hello")
    [queued] = await rig.kube.scoped("default").list("turns")
    assert body([queued]) is None
    ended = {**queued, "status": {"phase": "Completed", "run": "s1-r1"}}
    assert body([ended]) is None
    # A turn of an earlier sandbox (a resumed session): this run's first turn is the next one, resumed.
    earlier = {**queued, "status": {"phase": "Completed", "run": "s1-r0"}}
    assert body([earlier])["turn"] == "s1-2"  # type: ignore[index]
    await rig.kube.scoped("default").patch("sessions", "s1", {"spec": {"harness": "pi"}})
    assert body() is None  # a one-shot harness has no CLI to wait


async def test_the_first_turns_cli_is_prepared_a_moment_after_the_connect_not_at_once(tmp_path: Path) -> None:
    """A real gateway and a driver's end of the protocol: the connect's reconcile does not send
    ``prepare_turn`` (its CLI would start while the `connected` write goes out), the wake-up it leaves
    sends it ``PRESTART_AFTER`` after the connection was confirmed."""
    rig = await make_rig(tmp_path, gateway_host="127.0.0.1", gateway_port=0)
    await rig.c.start()
    try:
        rig.env()
        await rig.session("s1")
        await rig.reconcile("s1")
        key = rig.ctx.run_keys["s1-r1"]
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.ctx.gateway_port)

        async def send(ftype: str, body: dict[str, Any]) -> None:
            writer.write(P.encode(P.sign(key, P.make_frame("s1-r1", P.D2G, ftype, body))))
            await writer.drain()

        async def frame() -> dict[str, Any]:
            return P.decode(await asyncio.wait_for(reader.readline(), 10))

        await send(P.HELLO, {"run": "s1-r1", "harness": "claude"})
        welcome = await frame()
        assert welcome["type"] == P.WELCOME
        await send(P.ACK, {"nonce": welcome["body"]["nonce"], "ids": []})
        confirmed = time.monotonic()
        command = await frame()
        arrived = time.monotonic() - confirmed
        assert command["body"]["op"] == P.OP_PREPARE_TURN and command["body"]["turn"] == "s1-1"
        assert rig.status("sessions", "s1")["sandbox"]["connected"] is True
        assert arrived >= PRESTART_AFTER - 0.05, f"prepare_turn {arrived:.3f}s after the connect"
        writer.close()
    finally:
        await rig.c.stop()
