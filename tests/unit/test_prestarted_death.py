"""A pre-started CLI that dies is never the turn's CLI (``live.py``, "Pre-started CLIs"): one whose main thread
has ended is refused by ``_take_warm`` although ``poll()`` still says it runs (the kernel reports a process's
exit only once its last thread is gone: a SIGKILLed ``claude`` shows so for up to ~90 ms), and one that dies
after the turn took it, before it printed a word for the turn, is replaced once by a fresh one (``_warm_died``).
Real processes: a stand-in for ``claude -p`` (the real CLI: tests/integration/test_prestarted_cli.py)."""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar_driver.handback import HandbackWatcher
from hangar_driver.process import exiting
from hangar_driver.turns import TurnRunner
from tests.unit.test_prepare_turn import driver_config

Events = list[tuple[str, dict[str, Any]]]

# The stand-in runs the behaviour its invocation's number picks (the last one for every later invocation):
#   main-exits:  its main thread ends (SYS_exit: that thread only), another thread lives on reading stdin, so
#                the process is alive for the kernel while its main thread is a zombie, as a dying CLI's is
#   dies:        reads its first line (the turn's message) and kills itself without a word
#   answers:     as ``claude -p`` with stream-json: a result for each user line, exits at the end of stdin
STANDIN = r"""
import ctypes, json, os, platform, signal, sys, threading, time
log, behaviours = sys.argv[1], sys.argv[2].split(",")  # then the CLI's own arguments
with open(log, "a+") as f:
    f.seek(0)
    n = len(f.read().splitlines())
    f.write("%d %s\n" % (os.getpid(), os.path.basename(os.environ.get("HANGAR_IO", "-"))))
behaviour = behaviours[min(n, len(behaviours) - 1)]
if behaviour == "main-exits":
    threading.Thread(target=sys.stdin.buffer.read).start()
    time.sleep(0.1)
    ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
elif behaviour == "dies":
    sys.stdin.buffer.readline()
    os.kill(os.getpid(), signal.SIGKILL)
else:
    for line in sys.stdin:
        if json.loads(line).get("type") == "user":
            for out in (
                {"type": "system", "subtype": "init", "session_id": "c-standin"},
                {"type": "result", "subtype": "success", "result": "answered by %d" % os.getpid()},
            ):
                sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
"""
SYS_EXIT = {"x86_64": 60, "aarch64": 93}
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() not in SYS_EXIT, reason="Linux /proc, SYS_exit"
)

TURN = {"turn": "s-1", "model": "claude-sonnet-4-5", "approvals": "auto", "conversation": None}


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Callable[..., tuple[TurnRunner, Events, Path]]]:
    made: list[TurnRunner] = []

    def make(*behaviours: str) -> tuple[TurnRunner, Events, Path]:
        script = tmp_path / "standin.py"
        script.write_text(STANDIN)
        log = tmp_path / "invocations"
        argv = [sys.executable, str(script), str(log), ",".join(behaviours)]
        cfg = driver_config(tmp_path, HANGAR_CLI_ARGV=json.dumps(argv))
        events: Events = []
        r = TurnRunner(
            cfg,
            HandbackWatcher(lambda n, p: None, {os.geteuid()}),
            lambda n, p: events.append((n, p)),
            threading.Event(),
        )
        made.append(r)
        return r, events, log

    yield make
    for r in made:
        r.close()


def until(check: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def pids(log: Path, turn: str = TURN["turn"]) -> list[int]:
    """The stand-ins started for ``turn``: not the next turn's, which the driver pre-starts once this one
    ended (on a thread of its own, so it may be in the log by the time a test reads it)."""
    lines = [x.split() for x in log.read_text().splitlines()] if log.exists() else []
    return [int(pid) for pid, io in lines if io == turn]


def main_thread_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def ended(events: Events) -> dict[str, Any] | None:
    return next((p for n, p in events if n == "turn_ended"), None)


def logs(events: Events) -> list[str]:
    return [str(p.get("message")) for n, p in events if n == "log"]


def test_a_cli_whose_main_thread_ended_is_exiting_though_poll_says_it_runs(runner: Any) -> None:
    r, events, log = runner("main-exits", "answers")
    assert r.prepare_turn(dict(TURN)) == {"prestarted": True}
    warm = r.harness._warm.proc
    until(lambda: main_thread_state(warm.pid) == "Z", "the stand-in's main thread ended")
    # What the kernel says of it: not exited (another thread runs), so poll() alone would take it.
    assert warm.poll() is None and exiting(warm)
    r.start_turn({**TURN, "message": "hello"})
    until(lambda: ended(events), "the turn ended")
    [started] = [p for n, p in events if n == "turn_started"]
    assert "prestarted" not in started
    assert any("pre-started for this turn not used (it was exiting" in m for m in logs(events)), events
    first, fresh = pids(log)
    assert first == warm.pid
    assert ended(events) == {**ended(events), "outcome": "completed", "summary": f"answered by {fresh}"}
    # Refused and stopped: its other thread was killed with its process group.
    until(lambda: warm.poll() is not None, "the refused CLI stopped")


def test_a_running_cli_is_not_exiting_and_a_reaped_one_is(runner: Any) -> None:
    r, _, _ = runner("answers")
    r.prepare_turn(dict(TURN))
    warm = r.harness._warm.proc
    assert main_thread_state(warm.pid) in "RSD" and not exiting(warm)
    warm.kill()
    warm.wait()
    assert exiting(warm)


def test_a_cli_that_dies_before_a_word_for_its_turn_is_replaced_once(runner: Any) -> None:
    r, events, log = runner("dies", "answers")
    assert r.prepare_turn(dict(TURN)) == {"prestarted": True}
    warm = r.harness._warm.proc
    # Alive when the turn takes it; it dies on the turn's message, before it printed anything.
    r.start_turn({**TURN, "message": "hello"})
    until(lambda: ended(events), "the turn ended")
    [started] = [p for n, p in events if n == "turn_started"]
    assert started.get("prestarted") is True  # it was taken, then replaced: one turn, started once
    assert any(
        "pre-started for this turn exited (-9) before it took the turn: started anew" in m
        for m in logs(events)
    ), events
    first, fresh = pids(log)
    assert first == warm.pid and warm.returncode == -9
    assert ended(events) == {**ended(events), "outcome": "completed", "summary": f"answered by {fresh}"}
    assert [n for n, _ in events].count("turn_ended") == 1


def test_a_fresh_cli_that_dies_too_fails_the_turn_it_is_replaced_only_once(runner: Any) -> None:
    r, events, log = runner("dies")
    r.prepare_turn(dict(TURN))
    r.start_turn({**TURN, "message": "hello"})
    until(lambda: ended(events), "the turn ended")
    turn_end = ended(events)
    assert turn_end is not None and turn_end["outcome"] == "failed"
    assert "claude exited (-9) without a result" in str(turn_end["error"])
    assert len(pids(log)) == 2  # the pre-started one and one fresh one, no more


def test_a_cli_the_driver_stops_itself_is_not_replaced(runner: Any) -> None:
    # close() (shutdown, suspend, release) stops the turn's pre-started CLI before it printed a word: the
    # turn ends with it, no fresh CLI is started behind the driver's back.
    r, events, log = runner("answers")
    r.prepare_turn(dict(TURN))
    warm = r.harness._warm.proc
    until(lambda: pids(log) == [warm.pid], "the stand-in started")
    r.harness._started = lambda turn: None  # the message is never written: the CLI stays silent
    r.start_turn({**TURN, "message": "hello"})
    r.close()
    until(lambda: ended(events), "the turn ended")  # a replacement would wait for a message forever
    assert warm.poll() is not None and r.harness._turn.proc is warm
    assert ended(events) == {**ended(events), "outcome": "failed"}
    assert pids(log) == [warm.pid]
    assert not any("started anew" in m for m in logs(events)), events
