"""stop_process: a process that has exited counts as stopped even while it is an unreaped zombie (`hangar dev
down` stops processes it did not start, which linger as zombies until their adopter reaps them), and one
that ignores SIGTERM is killed after the grace period."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from hangar.devcluster.controlplane import stop_process


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_an_exited_process_not_yet_reaped_is_stopped_at_once() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    deadline = time.monotonic() + 30
    while state(p.pid) != "Z":  # exited, and nobody has reaped it (we do not wait for it)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t = time.monotonic()
    stop_process(p.pid, grace=10)  # no popen: as `hangar dev down` calls it
    assert time.monotonic() - t < 2
    p.wait()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert p.stdout is not None and p.stdout.readline() == b"1\n"  # its handler is set
    t = time.monotonic()
    stop_process(p.pid, grace=1)
    took = time.monotonic() - t
    assert 1 <= took < 10
    assert p.wait(5) == -9
