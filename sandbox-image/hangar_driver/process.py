"""The process plumbing every harness adapter shares: how an agent CLI is started, read, written to and
stopped.

Standard library only, Python 3.8+.

Every agent CLI is started by :func:`spawn_agent`: with ``cfg.env`` only (never the driver's own environment),
in ``cfg.cwd``, in a process group of its own (so an interrupt or a kill reaches everything it started), and
under ``cfg.run_as`` uid/gid when given.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import threading
from typing import Any, Callable, Deque, Dict, List, Optional

from .harness import TurnConfig


def _demote(uid: int, gid: int) -> Callable[[], None]:
    def run() -> None:
        # Runs in the child between fork and exec (after setsid). Supplementary groups go first (root only).
        if os.getuid() == 0:
            os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return run


def spawn_agent(
    argv: List[str],
    cfg: TurnConfig,
    extra_env: Optional[Dict[str, str]] = None,
    stdin: Any = subprocess.PIPE,
) -> subprocess.Popen[bytes]:
    """Start the agent CLI: cfg.env (+ extra_env) only, cwd cfg.cwd, own process group, cfg.run_as uid/gid.

    The executable is looked up on the PATH of that environment. Raises OSError when it cannot start.
    """
    env = dict(cfg.env)
    if extra_env:
        env.update(extra_env)
    preexec = None
    if cfg.run_as:
        uid = int(cfg.run_as["uid"])
        gid = int(cfg.run_as.get("gid", uid))
        if (uid, gid) != (os.getuid(), os.getgid()):
            preexec = _demote(uid, gid)
    return subprocess.Popen(
        argv,
        cwd=cfg.cwd,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=preexec,
        close_fds=True,
    )


def kill_group(proc: Optional[subprocess.Popen[bytes]], sig: int = signal.SIGKILL) -> None:
    """Signal the process group the agent leads (it was started with setsid, so pgid == pid)."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except OSError:
                pass


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """Ends a command and its process group: SIGTERM, SIGKILL after 3 s (a process stop, a stopped exec)."""
    if proc.poll() is None:
        kill_group(proc, signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            kill_group(proc, signal.SIGKILL)
            proc.wait()


def wait_or_kill(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait for the process to exit, killing its group after ``timeout`` seconds. Returns its exit code."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return proc.wait()


def stop(proc: Optional[subprocess.Popen[bytes]]) -> None:
    """Kill the group of a process that still runs and give it 5 seconds to be reaped (a driver closing)."""
    if proc is None or proc.poll() is not None:
        return
    kill_group(proc)
    try:
        proc.wait(5)
    except Exception:
        pass


def exiting(proc: subprocess.Popen[bytes]) -> bool:
    """True when the process has exited or is on its way out. ``poll()`` alone is not enough: the kernel
    reports a process's exit only once its last thread is gone, and a killed multi-threaded CLI takes a
    while to tear its threads and heap down after its main thread has ended (a SIGKILLed ``claude``: up to
    86 ms on 2 loaded cores), all that while ``poll()`` says it runs. The main thread's end shows at once
    in /proc: state Z (or X) of the process's own pid, which stays ours until we reap it. Without /proc,
    ``poll()`` is all there is."""
    if proc.poll() is not None:
        return True
    try:
        with open("/proc/%d/stat" % proc.pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ")".
    end = stat.rfind(b")")
    return end >= 0 and stat[end + 2 : end + 3] in (b"Z", b"X")


def exit_status(code: Optional[int], failed: bool = False) -> int:
    """A process's exit code as a shell reports it (killed by signal N: 128+N); never 0 for a failed turn."""
    status = 128 - code if code is not None and code < 0 else (code if code is not None else 1)
    return status or 1 if failed else status


class LineReader:
    """Reads an agent's stdout as JSON lines (split on ``\\n`` only) on a daemon thread, and keeps a tail of
    its stderr. ``on_message(obj)`` gets every JSON object; ``on_text(line)`` the lines that are not JSON;
    ``on_eof()`` is called once stdout is closed (after the last message)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        name: str,
        on_message: Callable[[Dict[str, Any]], None],
        on_eof: Callable[[], None],
        on_text: Optional[Callable[[str], None]] = None,
        stderr_lines: int = 60,
    ) -> None:
        self.proc = proc
        self.name = name
        self.on_message = on_message
        self.on_eof = on_eof
        self.on_text = on_text
        self.stderr_tail: Deque[str] = collections.deque(maxlen=stderr_lines)
        self._out = threading.Thread(target=self._read_stdout, name=name + "-stdout", daemon=True)
        self._err = threading.Thread(target=self._read_stderr, name=name + "-stderr", daemon=True)

    def start(self) -> None:
        self._err.start()
        self._out.start()

    def stderr_text(self) -> str:
        return "\n".join(self.stderr_tail)

    def join_stderr(self, timeout: float = 2.0) -> None:
        self._err.join(timeout)

    def _read_stdout(self) -> None:
        stream = self.proc.stdout
        try:
            if stream is not None:
                while True:
                    raw = stream.readline()
                    if not raw:
                        break
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        obj = None
                    if isinstance(obj, dict):
                        self.on_message(obj)
                    elif self.on_text is not None:
                        self.on_text(line)
        finally:
            self.on_eof()

    def _read_stderr(self) -> None:
        stream = self.proc.stderr
        if stream is None:
            return
        for raw in iter(stream.readline, b""):
            self.stderr_tail.append(raw.decode("utf-8", "replace").rstrip("\r\n")[:2000])


class StdinWriter:
    """Writes JSON lines to the agent's stdin; a write to a closed pipe is reported, never raised."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lock = threading.Lock()
        self.closed = False

    def write(self, obj: Dict[str, Any]) -> bool:
        data = (json.dumps(obj) + "\n").encode("utf-8")
        with self.lock:
            if self.closed or self.proc.stdin is None:
                return False
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True
                return False

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass


def text_of(content: Any, limit: int = 4000) -> str:
    """Text of a tool result / message content: a string, or a list of blocks with ``text``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content[:limit]
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict):
                if isinstance(b.get("text"), str):
                    parts.append(b["text"])
                elif b.get("type") == "image":
                    parts.append("[image]")
        return "\n".join(parts)[:limit]
    if isinstance(content, dict):
        text = content.get("text")
        if isinstance(text, str):
            return text[:limit]
    return json.dumps(content)[:limit]
