"""Live work in the sandbox for a person (MCP ``exec``, ``process`` and a workspace watch), as the agent's
uid in the workspace.

Standard library only, Python 3.8+.

These commands answer with ``live`` frames (``protocol.LIVE``), not with events: their output is for the
person waiting on it now, so it is neither numbered nor kept for a resend. Each frame's body names the
command it answers (``request``) and a ``kind``: ``output`` (a chunk of a running ``exec`` with
``stream=true``), ``changes`` (a watch's file changes), ``result`` (the command's answer; a watch's first
one says it is watching) and ``ended`` (a watch that stopped). Every bound below is a ceiling: a command
may ask for less, never more.
"""

from __future__ import annotations

import codecs
import collections
import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .commands import CommandError, str_field
from .config import Config
from .process import _demote, kill_group, terminate

log = logging.getLogger("hangar.driver")

# The same numbers as hangar/limits.py (the driver can't import hangar; a unit test holds them equal).
EXEC_OUTPUT_MAX = 262144  # bytes of an exec's stdout and stderr together; past it output is cut
EXEC_TIMEOUT_MAX = 600  # seconds an exec may run
PROCESSES_MAX = 8  # background processes running at once per sandbox
PROCESS_BUFFER_MAX = 1048576  # bytes of a background process's output kept (the newest)
PROCESS_READ_MAX = 262144  # bytes one read returns
PROCESS_INPUT_MAX = 65536  # bytes one input sends
WATCHES_MAX = 8  # workspace watches at once per sandbox
WATCH_INTERVAL = 0.5  # seconds between two scans of a watched directory: at most 2 notices a second
WATCH_CHANGES_MAX = 200  # changes in one notice; more are counted, not listed
WATCH_FILES_MAX = 20000  # files one scan looks at
SEEN_MAX = 2048  # command ids remembered, so a resent command runs once

Send = Callable[[Dict[str, Any]], bool]


def _int(body: Dict[str, Any], field: str, default: int, low: int, high: int) -> int:
    value = body.get(field, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise CommandError("%s must be a whole number from %d to %d" % (field, low, high))
    return value


def inside(root: str, path: str) -> Optional[str]:
    """``path`` (relative to ``root``, or absolute) resolved with its symlinks, when it lies within
    ``root``; else None."""
    real_root = os.path.realpath(root)
    full = os.path.realpath(os.path.join(real_root, path))
    if full == real_root or full.startswith(real_root.rstrip(os.sep) + os.sep):
        return full
    return None


def scan(root: str, limit: int = WATCH_FILES_MAX) -> Tuple[Dict[str, Tuple[int, int]], bool]:
    """{path relative to root: (mtime_ns, size)} of the files under ``root`` (symlinks not followed), and
    whether the scan stopped at ``limit`` files."""
    found: Dict[str, Tuple[int, int]] = {}
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(top, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            found[os.path.relpath(full, root)] = (st.st_mtime_ns, st.st_size)
            if len(found) >= limit:
                return found, True
    return found, False


def diff(before: Dict[str, Tuple[int, int]], after: Dict[str, Tuple[int, int]]) -> List[Dict[str, str]]:
    """What changed between two scans, in path order."""
    out = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            out.append({"path": path, "change": "created"})
        elif path not in after:
            out.append({"path": path, "change": "deleted"})
        elif before[path] != after[path]:
            out.append({"path": path, "change": "modified"})
    return out


class _Capture:
    """Reads one pipe to its end, keeping what fits in a budget shared with the other pipe."""

    def __init__(self, pipe: Any, name: str, budget: _Budget, on_chunk: Optional[Callable[[str, str], None]]):
        self.pipe = pipe
        self.name = name
        self.budget = budget
        self.on_chunk = on_chunk
        self.parts: List[str] = []
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.thread = threading.Thread(target=self._read, name="hangar-exec-" + name, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            chunk = os.read(self.pipe.fileno(), 65536)
            if not chunk:
                break
            kept = self.budget.take(len(chunk))
            if kept:
                text = self.decoder.decode(chunk[:kept])
                self.parts.append(text)
                if self.on_chunk is not None and text:
                    self.on_chunk(self.name, text)
        tail = self.decoder.decode(b"", final=True)
        if tail:
            self.parts.append(tail)

    def text(self) -> str:
        return "".join(self.parts)


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit
        self.cut = False
        self.lock = threading.Lock()

    def take(self, n: int) -> int:
        with self.lock:
            kept = min(n, self.left)
            self.left -= kept
            if kept < n:
                self.cut = True
            return kept


class _Process:
    def __init__(self, pid_name: str, command: str, proc: subprocess.Popen[bytes]) -> None:
        self.id = pid_name
        self.command = command
        self.proc = proc
        self.started = time.time()
        self.buf = bytearray()
        self.base = 0  # offset of buf[0] in the whole output (what was dropped before it)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="hangar-proc-" + pid_name, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                break
            with self.lock:
                self.buf += chunk
                over = len(self.buf) - PROCESS_BUFFER_MAX
                if over > 0:
                    del self.buf[:over]
                    self.base += over
        self.proc.wait()

    def view(self) -> Dict[str, Any]:
        code = self.proc.poll()
        with self.lock:
            end = self.base + len(self.buf)
        return {
            "id": self.id,
            "command": self.command,
            "pid": self.proc.pid,
            "running": code is None,
            "exit_code": None if code is None else (128 - code if code < 0 else code),
            "started": self.started,
            "output_bytes": end,
        }

    def read(self, offset: int, limit: int) -> Dict[str, Any]:
        with self.lock:
            start = max(offset, self.base)
            end = self.base + len(self.buf)
            start = min(start, end)
            data = bytes(self.buf[start - self.base : start - self.base + limit])
        out = self.view()
        out.update(
            {
                "offset": start,
                "next_offset": start + len(data),
                "data": data.decode("utf-8", "replace"),
                "dropped": offset < start and offset < end,  # older output was let go (the buffer's bound)
                "more": start + len(data) < end,
            }
        )
        return out


class _Watch:
    def __init__(self, wid: str, path: str, rel: str, interval: float, send: Send) -> None:
        self.id = wid
        self.path = path
        self.rel = rel
        self.interval = interval
        self.send = send
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="hangar-watch", daemon=True)

    def _run(self) -> None:
        before, capped = scan(self.path)
        self.send(
            {
                "request": self.id,
                "kind": "result",
                "ok": True,
                "path": self.rel,
                "files": len(before),
                "capped": capped,
            }
        )
        why = "stopped"
        while not self.stopping.wait(self.interval):
            if not os.path.isdir(self.path):
                why = "the directory is gone"
                break
            after, capped = scan(self.path)
            changes = diff(before, after)
            before = after
            if changes:
                notice = {
                    "request": self.id,
                    "kind": "changes",
                    "changes": changes[:WATCH_CHANGES_MAX],
                    "more": max(0, len(changes) - WATCH_CHANGES_MAX),
                    "capped": capped,
                }
                if not self.send(notice):
                    why = "the gateway link broke"
                    break
        self.send({"request": self.id, "kind": "ended", "reason": why})


class Workbench:
    """The person's commands: ``exec``, ``process`` (start, list, read, input, stop) and ``watch`` (start,
    stop). ``send`` puts one live frame on the gateway link (False when the link is down)."""

    def __init__(self, cfg: Config, send: Send) -> None:
        self.cfg = cfg
        self.send = send
        self.seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.processes: collections.OrderedDict[str, _Process] = collections.OrderedDict()
        self.watches: Dict[str, _Watch] = {}
        self.execs: Dict[str, subprocess.Popen[bytes]] = {}  # running execs by their command id
        # Exec command ids stopped on request: a stop may come before its exec started (each command has a
        # thread of its own), which then doesn't start. Bounded like ``seen``.
        self.stopped: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.counter = 0
        self.lock = threading.Lock()

    def handle(self, command_id: str, body: Dict[str, Any]) -> None:
        """Run one command on a thread of its own (an exec may take minutes); each id once."""
        with self.lock:
            if command_id in self.seen:
                return
            self.seen[command_id] = None
            while len(self.seen) > SEEN_MAX:
                self.seen.popitem(last=False)
        threading.Thread(
            target=self._answer, args=(command_id, body), name="hangar-live", daemon=True
        ).start()

    def _answer(self, command_id: str, body: Dict[str, Any]) -> None:
        op = body.get("op")
        try:
            if getattr(self.cfg, "pooled", False):  # as the driver's own commands: nothing before adopt
                raise CommandError("a warm sandbox runs nothing until a session adopts it")
            if op == "exec":
                result = self.exec(command_id, body)
            elif op == "process":
                result = self.process(body)
            elif op == "watch":
                started = self.watch(command_id, body)
                if started is None:
                    return  # the watch answers itself once its first scan is done
                result = started
            else:
                raise CommandError("unknown live op %r" % (op,))
            result["ok"] = True
        except CommandError as exc:
            result = {"ok": False, "error": str(exc)}
        except Exception as exc:
            log.exception("live command %s (%s) failed", command_id, op)
            result = {"ok": False, "error": "%s: %s" % (exc.__class__.__name__, exc)}
        result.update({"request": command_id, "kind": "result"})
        self.send(result)

    # --------------------------------------------------------------- spawning

    def _spawn(self, command: str, stdin: Any, stderr: Any) -> subprocess.Popen[bytes]:
        preexec = None
        run_as = self.cfg.run_as
        if run_as and (run_as["uid"], run_as["gid"]) != (os.getuid(), os.getgid()):
            preexec = _demote(run_as["uid"], run_as["gid"])
        try:
            return subprocess.Popen(
                ["/bin/sh", "-c", command],
                cwd=self.cfg.workspace,
                env=dict(self.cfg.agent_env),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=preexec,
                close_fds=True,
            )
        except OSError as exc:
            raise CommandError("the command could not start: %s" % exc) from None

    # --------------------------------------------------------------- exec

    def exec(self, command_id: str, body: Dict[str, Any]) -> Dict[str, Any]:
        if body.get("action") == "stop":
            return self.stop_exec(body)
        command = str_field(body, "command", limit=PROCESS_INPUT_MAX)
        assert command is not None
        timeout = _int(body, "timeout", 60, 1, EXEC_TIMEOUT_MAX)
        limit = _int(body, "max_output", EXEC_OUTPUT_MAX, 1, EXEC_OUTPUT_MAX)
        stream = bool(body.get("stream"))

        def chunk(name: str, text: str) -> None:
            self.send({"request": command_id, "kind": "output", "stream": name, "data": text})

        started = time.monotonic()
        with self.lock:
            if command_id in self.stopped:
                raise CommandError("stopped before it started")
            proc = self._spawn(command, subprocess.DEVNULL, subprocess.PIPE)
            self.execs[command_id] = proc
        budget = _Budget(limit)
        out = _Capture(proc.stdout, "stdout", budget, chunk if stream else None)
        err = _Capture(proc.stderr, "stderr", budget, chunk if stream else None)
        timed_out = False
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
            code = proc.wait()
        kill_group(proc, signal.SIGKILL)  # what it left running in its group goes with it
        out.thread.join(5)
        err.thread.join(5)
        with self.lock:
            self.execs.pop(command_id, None)
            stopped = command_id in self.stopped
            self.stopped.pop(command_id, None)
        result: Dict[str, Any] = {
            "exit_code": 128 - code if code < 0 else code,
            "stdout": out.text(),
            "stderr": err.text(),
            "truncated": budget.cut,
            "max_output": limit,
            "timed_out": timed_out,
            "timeout": timeout,
            "duration_ms": int((time.monotonic() - started) * 1000),
        }
        if stopped:
            result["stopped"] = True  # nobody waits on it: for the log
        return result

    def stop_exec(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """Stops a running exec (the one who waited on it went: a cancelled call or task) as a process is
        stopped; an exec that already ended is nothing to stop."""
        target = str_field(body, "exec", limit=200)
        with self.lock:
            proc = self.execs.get(target or "")
            if target:
                self.stopped[target] = None
                while len(self.stopped) > SEEN_MAX:
                    self.stopped.popitem(last=False)
        if proc is not None:
            terminate(proc)
        return {"stopped": proc is not None}

    # --------------------------------------------------------------- processes

    def _find(self, body: Dict[str, Any]) -> _Process:
        pid_name = str_field(body, "id", limit=64)
        found = self.processes.get(pid_name or "")
        if found is None:
            raise CommandError("no process %r in this sandbox" % (pid_name,))
        return found

    def process(self, body: Dict[str, Any]) -> Dict[str, Any]:
        action = body.get("action")
        if action == "start":
            command = str_field(body, "command", limit=PROCESS_INPUT_MAX)
            assert command is not None
            with self.lock:
                running = [p for p in self.processes.values() if p.proc.poll() is None]
                if len(running) >= PROCESSES_MAX:
                    raise CommandError(
                        "processes per sandbox: %d already run; stop one first" % PROCESSES_MAX
                    )
                # Ended ones are kept for reading, the oldest let go beyond the bound.
                for old in [p for p in self.processes.values() if p.proc.poll() is not None]:
                    if len(self.processes) < PROCESSES_MAX:
                        break
                    del self.processes[old.id]
                self.counter += 1
                pid_name = "p%d" % self.counter
                proc = self._spawn(command, subprocess.PIPE, subprocess.STDOUT)
                self.processes[pid_name] = _Process(pid_name, command, proc)
            return self.processes[pid_name].view()
        if action == "list":
            return {"processes": [p.view() for p in list(self.processes.values())]}
        if action == "read":
            offset = _int(body, "offset", 0, 0, 1 << 62)
            limit = _int(body, "limit", PROCESS_READ_MAX, 1, PROCESS_READ_MAX)
            return self._find(body).read(offset, limit)
        if action == "input":
            found = self._find(body)
            data = body.get("data", "")
            if not isinstance(data, str) or len(data.encode("utf-8", "replace")) > PROCESS_INPUT_MAX:
                raise CommandError("data must be a string of at most %d bytes" % PROCESS_INPUT_MAX)
            stdin = found.proc.stdin
            if stdin is None or stdin.closed or found.proc.poll() is not None:
                raise CommandError(
                    "process %s takes no more input (it ended, or its input was closed)" % found.id
                )
            try:
                stdin.write(data.encode("utf-8", "replace"))
                stdin.flush()
                if body.get("eof"):
                    stdin.close()
            except OSError as exc:
                raise CommandError("writing to process %s failed: %s" % (found.id, exc)) from None
            out = found.view()
            out["sent"] = len(data.encode("utf-8", "replace"))
            return out
        if action == "stop":
            found = self._find(body)
            terminate(found.proc)
            found.reader.join(2)
            return found.view()
        raise CommandError("action must be one of start, list, read, input, stop")

    # --------------------------------------------------------------- watches

    def watch(self, command_id: str, body: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        action = body.get("action")
        if action == "stop":
            wid = str_field(body, "watch", limit=200)
            with self.lock:
                found = self.watches.pop(wid or "", None)
            if found is not None:
                found.stopping.set()
            return {"stopped": found is not None}
        if action != "start":
            raise CommandError("action must be start or stop")
        rel = str_field(body, "path", limit=4096)
        assert rel is not None
        full = inside(self.cfg.workspace, rel)
        if full is None:
            raise CommandError("path %r is outside the workspace" % rel)
        if not os.path.isdir(full):
            raise CommandError("path %r is not a directory in the workspace" % rel)
        with self.lock:
            for wid in [w for w, found in self.watches.items() if not found.thread.is_alive()]:
                del self.watches[wid]
            if len(self.watches) >= WATCHES_MAX:
                raise CommandError("watches per sandbox: %d already run" % WATCHES_MAX)
            found = _Watch(
                command_id,
                full,
                os.path.relpath(full, os.path.realpath(self.cfg.workspace)),
                WATCH_INTERVAL,
                self.send,
            )
            self.watches[command_id] = found
        found.thread.start()
        return None

    def close(self) -> None:
        for found in list(self.watches.values()):
            found.stopping.set()
        for p in list(self.processes.values()):
            if p.proc.poll() is None:
                kill_group(p.proc)
