"""hangar-driver: the process that runs inside each sandbox pod (``python3 -m hangar_driver``).

Standard library only, Python 3.8+ (the environment image's own python3).

It holds the run key, connects to the operator's driver gateway over the signed channel
(``hangar_driver.protocol``), executes the gateway's commands through the harness adapter
(``adapters.make_harness``), relays ``hangar-agent`` hand-back commands from ``$HANGAR_IO`` and reports
everything as numbered events that are resent until the gateway has stored them.

Configuration (environment):

- ``HANGAR_GATEWAY``        ``host:port`` of the gateway (``[v6addr]:port`` works too).
- ``HANGAR_RUN_ID``         the run id.
- ``HANGAR_HARNESS``        claude | codex | pi | antigravity.
- ``HANGAR_RUN_KEY_FILE``   a file holding the run key (a Secret volume, readable by the driver's uid only),
  or ``HANGAR_RUN_KEY``     the key itself. It is removed from the environment at once: the driver re-executes
                            itself without it (the key passes through a pipe), so not even the driver's own
                            ``/proc/<pid>/environ`` holds it afterwards.
- ``HANGAR_WORKSPACE``      the repository checkout, the agent's working directory (default /workspace).
- ``HANGAR_STATE_DIR``      the driver's own directory (default ``$TMPDIR/hangar-driver-<uid>``): per-turn
                            ``io/<turn>`` directories (``$HANGAR_IO``) and, by default, the agent's HOME.
- ``HANGAR_AGENT_UID`` / ``HANGAR_AGENT_GID``  the agent's uid/gid when the driver runs as root (default
                            1001/the uid); ignored (with a warning) when the driver is not root.
- ``HANGAR_AGENT_HOME``     the agent's HOME (default ``<state>/home``; ``HANGAR_AGENT_ENV_HOME`` also works).
- ``HANGAR_AGENT_ENV_<X>``  passed to the agent as ``<X>``. The agent gets only these plus PATH, HOME, LANG
                            and ``HANGAR_IO``: nothing else from the driver's environment.
- ``HANGAR_CLI_PATH``       directories (``:``-separated) put first on the agent's PATH.
- ``HANGAR_CLI_ARGV``       optional JSON list: how to launch the harness CLI (``TurnConfig.argv_prefix``).
- ``HANGAR_MCP_SERVERS``    optional JSON: the Environment's MCP servers, handed to the CLI (``mcp.py``).

Commands (``command`` frames; every one is answered by a ``command_result`` event with ``command_id``,
``op``, ``ok``, ``error`` and the fields below):

- ``start_turn`` {turn, message, model?, conversation?, fork?, approvals?, tainted?, env?, extra?,
  argv_prefix?} → {turn, io}. ``fork: true`` (with a ``conversation``) continues that conversation as a new
  one, leaving it as it was (a session fork; the new id comes as ``conversation``). Refused while a turn
  runs, for a turn id this driver already started, and for ``approvals`` other than ``auto`` on a harness
  without live permission prompts.
- ``steer`` {steer_id, message, turn?} → {steer_id, status?, at}; a harness that can't be steered answers
  ``ok: false``, error "harness X cannot be steered: the message starts the next turn". When ``turn`` (or, without it, any
  turn) is no longer running, the steer is reported ``queued`` at once (a ``steer`` event, then this result
  with ``status: queued``): it starts the next turn, it is never lost.
- ``withdraw`` {steer_id} → {steer_id, withdrawn: bool}. The adapter arbitrates: withdrawn (no ``steer``
  event follows) or not (its ``steer`` event says delivered or queued), never both.
- ``interrupt`` {turn?, interrupt_id?, message?} → {running: bool, continues: bool}. Without a message the
  turn's end comes as ``turn_ended`` (outcome interrupted); with one, a live harness reports ``interrupted``
  (continued) and the turn goes on with it.
- ``answer`` {request_id, decision: allow|deny|allow_always, message?} → {request_id}.
- ``taint`` {} → {tainted: true}: this and every later turn is tainted.
- ``checkpoint`` {path, include_home?: true} → {path, size, sha256}: a tar.gz of the workspace (as
  ``workspace/``) and the agent's HOME (as ``home/``), made with the agent's own permissions.
- ``shutdown`` {} → {}: stops the CLI; the driver exits once its events are stored (or after 10 s).
"""

from __future__ import annotations

import base64
import collections
import errno
import hashlib
import itertools
import json
import logging
import os
import queue
import random
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from . import mcp
from . import protocol as P
from .harness import Harness, NotLive, TurnConfig

DRIVER_VERSION = "0.1.0"
log = logging.getLogger("hangar.driver")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_ENV_PREFIX = "HANGAR_AGENT_ENV_"
DEFAULT_AGENT_UID = 1001

BACKOFF_MIN, BACKOFF_MAX = 0.2, 5.0
STABLE_CONNECTION = 5.0  # a connection that lived this long resets the backoff
CONNECT_TIMEOUT = 5.0
WELCOME_TIMEOUT = 10.0
PING_AFTER = 10.0  # idle seconds before the driver pings
DEAD_AFTER = 30.0  # idle seconds (nothing from the gateway, pings unanswered) before it reconnects
SEND_TIMEOUT = 30.0
SHUTDOWN_DRAIN = 10.0

HANDBACK_POLL = 0.2
HANDBACK_FILE = "handback.jsonl"
MAX_HANDBACK_LINE = 256 * 1024
MAX_HANDBACK_LINES = 2000  # per turn
MAX_TEXT = 16 * 1024  # done message, progress text, question
MAX_RESULT = 64 * 1024  # result JSON, canonical form
MAX_ARTIFACT = 10 * 1024 * 1024
MAX_INLINE_ARTIFACT = 1024 * 1024  # artifacts up to this size travel in the event (base64)
MAX_ARTIFACTS = 64  # per turn
MAX_EVENT_BYTES = P.MAX_FRAME_BYTES - 64 * 1024
REMEMBERED_COMMANDS = 10000
DECISIONS = ("allow", "deny", "allow_always")

_SAFE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _safe_name(value: Any, limit: int = 128) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and value[0] not in ".-"
        and all(c in _SAFE_NAME_CHARS for c in value)
    )


class CommandError(Exception):
    """A command refused or failed; the message goes into command_result.error."""


# ----------------------------------------------------------------------------------------------- config


class Config(object):
    def __init__(self, env: Dict[str, str]) -> None:
        self.gateway = env.get("HANGAR_GATEWAY", "")
        self.run = env.get("HANGAR_RUN_ID", "")
        self.harness = env.get("HANGAR_HARNESS", "")
        missing = [n for n, v in (("HANGAR_GATEWAY", self.gateway), ("HANGAR_RUN_ID", self.run),
                                  ("HANGAR_HARNESS", self.harness)) if not v]
        if missing:
            raise SystemExit("hangar-driver: missing %s" % ", ".join(missing))
        host, sep, port = self.gateway.rpartition(":")
        if not sep or not port.isdigit():
            raise SystemExit("hangar-driver: HANGAR_GATEWAY must be host:port")
        self.host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        self.port = int(port)
        self.workspace = os.path.abspath(env.get("HANGAR_WORKSPACE") or "/workspace")
        self.euid = os.geteuid()
        self.is_root = self.euid == 0
        uid_s, gid_s = env.get("HANGAR_AGENT_UID", ""), env.get("HANGAR_AGENT_GID", "")
        self.agent_uid = None  # type: Optional[int]
        self.agent_gid = None  # type: Optional[int]
        self.warnings = []  # type: List[str]
        if self.is_root:
            self.agent_uid = int(uid_s) if uid_s else DEFAULT_AGENT_UID
            self.agent_gid = int(gid_s) if gid_s else self.agent_uid
            if self.agent_uid == 0:
                raise SystemExit("hangar-driver: HANGAR_AGENT_UID must not be 0")
        elif uid_s and int(uid_s) != self.euid:
            self.warnings.append(
                "HANGAR_AGENT_UID=%s ignored: the driver is not root, so the agent runs as uid %d"
                % (uid_s, self.euid)
            )
        self.state_dir = os.path.abspath(
            env.get("HANGAR_STATE_DIR") or os.path.join(tempfile.gettempdir(), "hangar-driver-%d" % self.euid)
        )
        self.agent_home = os.path.abspath(
            env.get("HANGAR_AGENT_ENV_HOME") or env.get("HANGAR_AGENT_HOME") or os.path.join(self.state_dir, "home")
        )
        self.cli_path = [p for p in env.get("HANGAR_CLI_PATH", "").split(os.pathsep) if p]
        self.argv_prefix = None  # type: Optional[List[str]]
        if env.get("HANGAR_CLI_ARGV"):
            argv = json.loads(env["HANGAR_CLI_ARGV"])
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise SystemExit("hangar-driver: HANGAR_CLI_ARGV must be a JSON list of strings")
            self.argv_prefix = argv
        self.bin_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin")
        self.agent_env = self._agent_env(env)
        self.mcp_servers, mcp_warnings = mcp.load(env.get(mcp.ENV, ""))
        self.warnings += mcp_warnings

    @property
    def run_as(self) -> Optional[Dict[str, int]]:
        if self.agent_uid is None or self.agent_gid is None:
            return None
        return {"uid": self.agent_uid, "gid": self.agent_gid}

    def _agent_env(self, env: Dict[str, str]) -> Dict[str, str]:
        out = {}  # type: Dict[str, str]
        for name, value in env.items():
            if name.startswith(AGENT_ENV_PREFIX) and len(name) > len(AGENT_ENV_PREFIX):
                out[name[len(AGENT_ENV_PREFIX):]] = value
        base_path = out.get("PATH") or env.get("PATH") or DEFAULT_PATH
        extra = list(self.cli_path)
        if os.path.isfile(os.path.join(self.bin_dir, "hangar-agent")):
            extra.append(self.bin_dir)
        out["PATH"] = os.pathsep.join(extra + [base_path])
        out["HOME"] = self.agent_home
        out.setdefault("LANG", env.get("LANG") or "C.UTF-8")
        for name in list(out):
            if name.startswith(("HANGAR_RUN_KEY", "HANGAR_DRIVER_KEY")) or name == "HANGAR_IO":
                del out[name]
        return out


# ---------------------------------------------------------------------------------- key and hardening


KEY_FD_ENV = "HANGAR_DRIVER_KEY_FD"  # the pipe the re-executed driver reads its key from


def take_key_from_env() -> Optional[bytes]:
    """If the key came by environment, re-execute this driver without it (never returns), handing the key
    over on a pipe; if it came that way (or from the file), return it. The environment never keeps it."""
    if KEY_FD_ENV in os.environ:
        fd = int(os.environ.pop(KEY_FD_ENV))
        data = b""
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        os.close(fd)
        return P.key_bytes(data)
    if "HANGAR_RUN_KEY" in os.environ:
        key = P.key_bytes(os.environ.pop("HANGAR_RUN_KEY"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_RUN_KEY")}
        if os.environ.get("HANGAR_DRIVER_NO_REEXEC") == "1":
            return key
        rfd, wfd = os.pipe()
        os.write(wfd, key)  # 43 bytes: fits the pipe buffer
        os.close(wfd)
        os.set_inheritable(rfd, True)
        env[KEY_FD_ENV] = str(rfd)
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if pkg_parent not in paths:
            env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + paths)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "hangar_driver"] + sys.argv[1:], env)
    return None


def read_key() -> bytes:
    key = take_key_from_env()
    path = os.environ.get("HANGAR_RUN_KEY_FILE")
    if key is None and path:
        key = P.read_key_file(path)
    if key is None:
        raise SystemExit("hangar-driver: no run key (HANGAR_RUN_KEY_FILE or HANGAR_RUN_KEY)")
    return key


# Why the driver could not make itself non-dumpable (None: it did). Turns under an approvals policy other
# than auto are refused then: the spec asks for python3 3.8+ with ctypes.
HARDENING_ERROR = None  # type: Optional[str]


def harden_process() -> bool:
    """Make the driver non-dumpable: /proc/<pid>/{environ,mem,maps} become root-only and no process of
    another (or, for a non-root driver, the same) uid can ptrace it. Linux, via ctypes. False (and
    HARDENING_ERROR says why) when it could not: a python3 without ctypes, or prctl refused."""
    global HARDENING_ERROR
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            HARDENING_ERROR = "prctl(PR_SET_DUMPABLE) failed: errno %d" % ctypes.get_errno()
            log.warning("%s", HARDENING_ERROR)
            return False
    except Exception as exc:  # no ctypes, not Linux
        HARDENING_ERROR = "%s: %s" % (exc.__class__.__name__, exc)
        log.warning("could not make the driver non-dumpable: %s", HARDENING_ERROR)
        return False
    HARDENING_ERROR = None
    return True


def secure_dir(path: str, owner: Optional[int], group: Optional[int], mode: int) -> None:
    """Create ``path`` (one level) or check an existing one is a real directory owned by ``owner`` (or by us),
    then set owner and mode. Refuses symlinks and foreign directories (a trap left in a shared /tmp)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError("%s exists and is not a directory" % path)
    allowed = {os.geteuid()}
    if owner is not None:
        allowed.add(owner)
    if st.st_uid not in allowed:
        raise RuntimeError("%s is owned by uid %d, not by hangar" % (path, st.st_uid))
    if owner is not None and os.geteuid() == 0:
        os.chown(path, owner, group if group is not None else -1, follow_symlinks=False)
    os.chmod(path, mode)


def chown_tree(root: str, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            try:
                os.chown(name, uid, gid, follow_symlinks=False)
            except OSError as exc:
                log.warning("chown %s: %s", name, exc)


# ------------------------------------------------------------------------------------------------ outbox


class Outbox(object):
    """Every event the driver emits, numbered and signed, kept until the gateway acknowledges it.

    Events are numbered from the first ``welcome``: ``acked + 1`` onward, so a restarted driver process
    continues after what the gateway already stored. Before that they wait unnumbered."""

    def __init__(self, key: bytes, run: str) -> None:
        self.key = key
        self.run = run
        self.cond = threading.Condition()
        self.unnumbered = []  # type: List[Tuple[str, Dict[str, Any]]]
        self.events = collections.deque()  # type: collections.deque[Tuple[int, bytes]]
        self.next_seq = None  # type: Optional[int]
        self.acked = 0

    def add(self, name: str, payload: Dict[str, Any]) -> None:
        with self.cond:
            if self.next_seq is None:
                self.unnumbered.append((name, payload))
            else:
                self._number(name, payload)
            self.cond.notify_all()

    def _number(self, name: str, payload: Dict[str, Any]) -> None:
        assert self.next_seq is not None
        seq = self.next_seq
        frame = P.make_frame(self.run, P.D2G, P.EVENT, {"name": name, "payload": payload}, seq=seq)
        data = P.encode(P.sign(self.key, frame))
        if len(data) > MAX_EVENT_BYTES:
            small = {"error": "event payload too large (%d bytes); dropped" % len(data), "dropped": True}
            for k in ("turn", "id", "request_id", "steer_id", "command_id", "kind"):
                if isinstance(payload.get(k), str):
                    small[k] = payload[k][:200]
            frame["body"] = {"name": name, "payload": small}
            data = P.encode(P.sign(self.key, frame))
        self.next_seq = seq + 1
        self.events.append((seq, data))

    def welcome(self, acked: int) -> None:
        with self.cond:
            if self.next_seq is None:
                self.next_seq = acked + 1
                for name, payload in self.unnumbered:
                    self._number(name, payload)
                self.unnumbered = []
            self._ack(acked)
            if acked >= self.next_seq:
                log.warning("gateway has stored up to %d, beyond this driver's %d", acked, self.next_seq - 1)
                self.next_seq = acked + 1
            self.cond.notify_all()

    def ack(self, seq: int) -> None:
        with self.cond:
            self._ack(seq)
            self.cond.notify_all()

    def _ack(self, seq: int) -> None:
        while self.events and self.events[0][0] <= seq:
            self.events.popleft()
        self.acked = max(self.acked, seq)

    def has_after(self, seq: int) -> bool:
        return bool(self.events) and self.events[-1][0] > seq  # caller holds cond

    def after(self, seq: int, limit: int = 256) -> List[Tuple[int, bytes]]:
        """Up to ``limit`` events after ``seq`` (the outbox holds contiguous seqs). Caller holds cond."""
        if not self.events:
            return []
        start = max(0, seq - self.events[0][0] + 1)
        return list(itertools.islice(self.events, start, start + limit))

    def resume_from(self) -> Optional[int]:
        with self.cond:
            if self.events:
                return self.events[0][0]
            return self.next_seq

    def pending(self) -> int:
        with self.cond:
            return len(self.events) + len(self.unnumbered)

    def wait_drained(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.events or self.unnumbered:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.5))
            return True


# -------------------------------------------------------------------------------------------------- link


class _LineReader(object):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.scanned = 0

    def readline(self, timeout: float) -> Optional[bytes]:
        """One line (without ``\\n``), None on timeout. Raises EOFError, P.FrameTooLarge, OSError."""
        deadline = time.monotonic() + timeout
        while True:
            i = self.buf.find(b"\n", self.scanned)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buf)
            if len(self.buf) > P.MAX_FRAME_BYTES:
                raise P.FrameTooLarge("gateway frame too large")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            chunk = self.sock.recv(256 * 1024)
            if not chunk:
                raise EOFError("gateway closed the connection")
            self.buf += chunk


class _Connection(object):
    def __init__(self, sock: socket.socket, nonce: str, sent_upto: int) -> None:
        self.sock = sock
        self.nonce = nonce
        self.sent_upto = sent_upto
        self.alive = True
        self.control = []  # type: List[bytes]


class Link(object):
    """The connection to the gateway: connects, reconnects with backoff, resends unacknowledged events."""

    def __init__(self, cfg: Config, key: bytes, outbox: Outbox, hello_body: Callable[[], Dict[str, Any]],
                 on_command: Callable[[str, Dict[str, Any]], None]) -> None:
        self.cfg = cfg
        self.key = key
        self.outbox = outbox
        self.hello_body = hello_body
        self.on_command = on_command
        self.stopping = threading.Event()
        self.conn = None  # type: Optional[_Connection]
        self.unsent_acks = []  # type: List[str]
        self.connected = threading.Event()
        self.connections = 0

    # called from any thread
    def ack_command(self, command_id: str) -> None:
        with self.outbox.cond:
            conn = self.conn
            if conn is not None and conn.alive:
                conn.control.append(self._frame(P.ACK, {"ids": [command_id], "nonce": conn.nonce}))
                self.outbox.cond.notify_all()
            else:
                self.unsent_acks.append(command_id)

    def stop(self) -> None:
        self.stopping.set()
        with self.outbox.cond:
            conn = self.conn
            if conn is not None:
                conn.alive = False
            self.outbox.cond.notify_all()
        if conn is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _frame(self, ftype: str, body: Dict[str, Any], seq: int = 0) -> bytes:
        return P.encode(P.sign(self.key, P.make_frame(self.cfg.run, P.D2G, ftype, body, seq=seq)))

    def run_forever(self) -> None:
        backoff = BACKOFF_MIN
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self._session()
            except Exception as exc:
                if not self.stopping.is_set():
                    log.info("gateway connection ended: %s: %s", exc.__class__.__name__, exc)
            if self.stopping.is_set():
                break
            if time.monotonic() - started >= STABLE_CONNECTION:
                backoff = BACKOFF_MIN
            self.stopping.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _session(self) -> None:
        sock = socket.create_connection((self.cfg.host, self.cfg.port), timeout=CONNECT_TIMEOUT)
        conn = None  # type: Optional[_Connection]
        writer = None  # type: Optional[threading.Thread]
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(SEND_TIMEOUT)
            reader = _LineReader(sock)
            sock.sendall(self._frame(P.HELLO, self.hello_body()))
            line = reader.readline(WELCOME_TIMEOUT)
            if line is None:
                raise TimeoutError("no welcome from the gateway")
            frame = P.decode(line)
            P.verify(self.key, frame, P.G2D, self.cfg.run)
            body = frame["body"]
            acked, nonce = body.get("acked"), body.get("nonce")
            if frame["type"] != P.WELCOME or not isinstance(acked, int) or acked < 0 or not isinstance(nonce, str):
                raise P.ProtocolError("expected a welcome")
            self.outbox.welcome(acked)
            with self.outbox.cond:
                ids, self.unsent_acks = self.unsent_acks, []
                sock.sendall(self._frame(P.ACK, {"ids": ids, "nonce": nonce}))
                conn = _Connection(sock, nonce, acked)
                self.conn = conn
            self.connections += 1
            self.connected.set()
            log.info("connected to the gateway %s (stored up to %d)", self.cfg.gateway, acked)
            writer = threading.Thread(target=self._writer, args=(conn,), name="hangar-writer", daemon=True)
            writer.start()
            last_rx = last_ping = time.monotonic()
            while conn.alive and not self.stopping.is_set():
                line = reader.readline(1.0)
                now = time.monotonic()
                if line is None:
                    if now - last_rx > DEAD_AFTER:
                        raise TimeoutError("gateway silent for %.0f s" % (now - last_rx))
                    if now - last_rx > PING_AFTER and now - last_ping > PING_AFTER:
                        last_ping = now
                        with self.outbox.cond:
                            conn.control.append(self._frame(P.PING, {}))
                            self.outbox.cond.notify_all()
                    continue
                last_rx = now
                frame = P.decode(line)
                P.verify(self.key, frame, P.G2D, self.cfg.run)  # a frame we can't verify ends the connection
                ftype, body = frame["type"], frame["body"]
                if ftype == P.ACK:
                    seq = body.get("seq")
                    if isinstance(seq, int) and not isinstance(seq, bool):
                        self.outbox.ack(seq)
                elif ftype == P.COMMAND:
                    self.on_command(frame["id"], body)
                elif ftype == P.PONG:
                    pass
                else:
                    log.warning("unexpected %s frame from the gateway", ftype)
        finally:
            self.connected.clear()
            with self.outbox.cond:
                if conn is not None:
                    conn.alive = False
                if self.conn is conn:
                    self.conn = None
                self.outbox.cond.notify_all()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            if writer is not None:
                writer.join(5)

    def _writer(self, conn: _Connection) -> None:
        cond = self.outbox.cond
        try:
            while True:
                with cond:
                    while conn.alive and not conn.control and not self.outbox.has_after(conn.sent_upto):
                        cond.wait(1.0)
                    if not conn.alive:
                        return
                    control, conn.control = conn.control, []
                    events = self.outbox.after(conn.sent_upto)
                for data in control:
                    conn.sock.sendall(data)
                for seq, data in events:
                    conn.sock.sendall(data)
                    conn.sent_upto = seq
        except OSError as exc:
            log.info("sending to the gateway failed: %s", exc)
            with cond:
                conn.alive = False
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------- handback


class Refused(Exception):
    pass


def open_under(base: str, rel: Any, allowed_uids: Set[int]) -> int:
    """Open a regular file at ``rel`` inside ``base`` for reading without following any symlink, and only
    if it is a plain file (one link) owned by an allowed uid. Returns the fd. Raises Refused."""
    if not isinstance(rel, str) or not rel or len(rel) > 1024 or "\x00" in rel:
        raise Refused("bad path")
    if os.path.isabs(rel):
        base_real = os.path.normpath(base)
        norm = os.path.normpath(rel)
        if not norm.startswith(base_real + os.sep):
            raise Refused("path escapes HANGAR_IO")
        rel = norm[len(base_real) + 1:]
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise Refused("path escapes HANGAR_IO")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    dflags = flags | getattr(os, "O_DIRECTORY", 0)
    fd = os.open(base, dflags)
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, dflags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused("path escapes HANGAR_IO (symlink or not a directory)") from None
                raise Refused("no such file") from None
            os.close(fd)
            fd = nfd
        try:
            ffd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused("path escapes HANGAR_IO (symlink)") from None
            raise Refused("no such file") from None
    finally:
        os.close(fd)
    st = os.fstat(ffd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid not in allowed_uids:
        os.close(ffd)
        raise Refused("not a plain file of the agent's")
    return ffd


def read_fd(fd: int, limit: int) -> bytes:
    """Read at most ``limit`` bytes; raises Refused when there is more."""
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, min(1024 * 1024, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise Refused("larger than %d bytes" % limit)
    return b"".join(chunks)


def _no_constants(name: str) -> Any:
    raise ValueError("not JSON: %s" % name)


def _cap_text(value: Any, field: str) -> Tuple[str, bool]:
    if not isinstance(value, str):
        raise Refused("%s must be text" % field)
    if len(value) > MAX_TEXT:
        return value[:MAX_TEXT], True
    return value, False


class _TurnIO(object):
    def __init__(self, turn: str, path: str) -> None:
        self.turn = turn
        self.path = path
        self.offset = 0
        self.inode = None  # type: Optional[Tuple[int, int]]
        self.partial = bytearray()
        self.discarding = False
        self.lines = 0
        self.artifacts = 0
        self.seen_ids = set()  # type: Set[str]
        self.warned = set()  # type: Set[str]


class HandbackWatcher(object):
    """Turns the lines ``hangar-agent`` appends to ``$HANGAR_IO/handback.jsonl`` into ``handback`` events.

    Everything in ``$HANGAR_IO`` is the agent's and untrusted: files are opened without following
    symlinks, only plain files owned by the agent count, sizes are capped, and paths stay inside."""

    def __init__(self, emit: Callable[[str, Dict[str, Any]], None], allowed_uids: Set[int]) -> None:
        self.emit = emit
        self.allowed_uids = allowed_uids
        self.lock = threading.RLock()
        self.turns = collections.OrderedDict()  # type: collections.OrderedDict[str, _TurnIO]
        self.stopping = threading.Event()

    def start_turn(self, turn: str, path: str) -> None:
        with self.lock:
            self.turns[turn] = _TurnIO(turn, path)

    def finish_turn(self, turn: str) -> None:
        """Read what is left for ``turn`` (called before its ``turn_ended`` is emitted) and stop watching it."""
        with self.lock:
            tio = self.turns.pop(turn, None)
            if tio is not None:
                self._scan(tio)

    def run(self) -> None:
        while not self.stopping.wait(HANDBACK_POLL):
            with self.lock:
                for tio in list(self.turns.values()):
                    try:
                        self._scan(tio)
                    except Exception:
                        log.exception("scanning %s", tio.path)

    def _warn(self, tio: _TurnIO, message: str, once: Optional[str] = None) -> None:
        if once is not None:
            if once in tio.warned:
                return
            tio.warned.add(once)
        self.emit("log", {"level": "warning", "message": message, "turn": tio.turn, "source": "handback"})

    def _scan(self, tio: _TurnIO) -> None:
        try:
            fd = open_under(tio.path, HANDBACK_FILE, self.allowed_uids)
        except Refused as exc:
            if str(exc) != "no such file":
                self._warn(tio, "hangar-agent hand-back file ignored: %s" % exc, once="file")
            return
        try:
            st = os.fstat(fd)
            inode = (st.st_dev, st.st_ino)
            if tio.inode != inode:
                if tio.inode is not None:
                    self._warn(tio, "hangar-agent hand-back file was replaced; reading the new one")
                tio.inode, tio.offset = inode, 0
                tio.partial = bytearray()
            if st.st_size < tio.offset:
                tio.offset = st.st_size
                tio.partial = bytearray()
            if st.st_size == tio.offset:
                return
            os.lseek(fd, tio.offset, os.SEEK_SET)
            data = os.read(fd, min(st.st_size - tio.offset, 4 * 1024 * 1024))
        finally:
            os.close(fd)
        tio.offset += len(data)
        self._feed(tio, data)

    def _feed(self, tio: _TurnIO, data: bytes) -> None:
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                rest = data[start:]
                if not tio.discarding:
                    tio.partial += rest
                    if len(tio.partial) > MAX_HANDBACK_LINE:
                        self._warn(tio, "hangar-agent line over %d bytes refused" % MAX_HANDBACK_LINE)
                        tio.partial = bytearray()
                        tio.discarding = True
                return
            piece = data[start:i]
            start = i + 1
            if tio.discarding:
                tio.discarding = False
                continue
            line = bytes(tio.partial) + piece
            tio.partial = bytearray()
            if len(line) > MAX_HANDBACK_LINE:
                self._warn(tio, "hangar-agent line over %d bytes refused" % MAX_HANDBACK_LINE)
                continue
            if line.strip():
                self._line(tio, line)

    def _line(self, tio: _TurnIO, line: bytes) -> None:
        tio.lines += 1
        if tio.lines > MAX_HANDBACK_LINES:
            self._warn(tio, "more than %d hangar-agent lines in this turn; the rest is ignored"
                       % MAX_HANDBACK_LINES, once="lines")
            return
        kind = "?"
        try:
            try:
                obj = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise Refused("not a JSON line") from None
            if not isinstance(obj, dict):
                raise Refused("not a JSON object")
            raw_kind = obj.get("kind")
            kind = raw_kind[:40] if isinstance(raw_kind, str) else "?"
            if kind not in P.HANDBACK_KINDS:
                raise Refused("unknown kind")
            lid = obj.get("id")
            if lid is not None:
                if not isinstance(lid, str) or len(lid) > 64:
                    raise Refused("bad id")
                if lid in tio.seen_ids:
                    return
                tio.seen_ids.add(lid)
            payload = getattr(self, "_kind_" + kind)(tio, obj)  # type: Dict[str, Any]
        except Refused as exc:
            self._warn(tio, "hangar-agent %s refused: %s" % (kind, exc))
            return
        payload["turn"] = tio.turn
        payload["kind"] = kind
        if lid is not None:
            payload["id"] = lid
        self.emit(P.EV_HANDBACK, payload)

    def _kind_done(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        message = obj.get("message")
        if message is None:
            return {"message": None}
        text, cut = _cap_text(message, "message")
        return {"message": text, "truncated": cut}

    def _kind_progress(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        text, cut = _cap_text(obj.get("text"), "text")
        if not text.strip():
            raise Refused("empty text")
        return {"text": text, "truncated": cut}

    def _kind_ask(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        text, cut = _cap_text(obj.get("question"), "question")
        if not text.strip():
            raise Refused("empty question")
        return {"question": text, "truncated": cut}

    def _kind_result(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        if "file" in obj:
            fd = open_under(tio.path, obj["file"], self.allowed_uids)
            try:
                raw = read_fd(fd, MAX_RESULT * 4)
            finally:
                os.close(fd)
            try:
                value = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise Refused("the file is not JSON") from None
        elif "result" in obj:
            value = obj["result"]
        else:
            raise Refused("no result")
        try:
            size = len(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                  allow_nan=False).encode("utf-8"))
        except (ValueError, UnicodeEncodeError, RecursionError):
            raise Refused("not JSON") from None
        if size > MAX_RESULT:
            raise Refused("result JSON is %d bytes, over %d" % (size, MAX_RESULT))
        return {"result": value, "size": size}

    def _kind_artifact(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        if tio.artifacts >= MAX_ARTIFACTS:
            raise Refused("more than %d artifacts in this turn" % MAX_ARTIFACTS)
        name = obj.get("name")
        rel = obj.get("path")
        if not isinstance(rel, str):
            raise Refused("bad path")
        if name is None:
            name = os.path.basename(rel)
        if not isinstance(name, str) or not name or len(name) > 255 or "/" in name or "\x00" in name:
            raise Refused("bad name")
        fd = open_under(tio.path, rel, self.allowed_uids)
        try:
            if os.fstat(fd).st_size > MAX_ARTIFACT:
                raise Refused("larger than %d bytes" % MAX_ARTIFACT)
            data = read_fd(fd, MAX_ARTIFACT)
        finally:
            os.close(fd)
        tio.artifacts += 1
        out = {
            "name": name,
            "path": os.path.join(tio.path, os.path.normpath(rel).lstrip("/")) if not os.path.isabs(rel) else rel,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "inline": len(data) <= MAX_INLINE_ARTIFACT,
        }  # type: Dict[str, Any]
        if out["inline"]:
            out["content_b64"] = base64.b64encode(data).decode("ascii")
        return out


# ------------------------------------------------------------------------------------------------- driver


CHECKPOINT_SCRIPT = r"""
import gzip, os, sys, tarfile, zlib  # everything imported before the uid drop
uid, gid = int(sys.argv[1]), int(sys.argv[2])
if uid >= 0:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|gz")
for spec in sys.argv[3:]:
    arc, _, top = spec.partition("=")
    if not os.path.isdir(top):
        continue
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        rel = os.path.relpath(dirpath, top)
        for name in [None] + sorted(dirnames) + sorted(filenames):
            path = dirpath if name is None else os.path.join(dirpath, name)
            if name is not None and name in dirnames and not os.path.islink(path):
                continue  # directories are added when os.walk visits them
            target = arc if rel == "." else os.path.join(arc, rel)
            if name is not None:
                target = os.path.join(target, name)
            try:
                out.add(path, arcname=target, recursive=False)
            except OSError as exc:
                sys.stderr.write("skipped %s: %s\n" % (path, exc))
out.close()
sys.stdout.buffer.flush()
"""


class Driver(object):
    def __init__(self, cfg: Config, key: bytes) -> None:
        self.cfg = cfg
        self.key = key
        self.boot = P.new_id()
        self.outbox = Outbox(key, cfg.run)
        key_text = key.decode("ascii", "replace")
        for name in [n for n, v in cfg.agent_env.items() if key_text in v]:
            del cfg.agent_env[name]
            cfg.warnings.append("agent environment variable %s dropped: it held the run key" % name)
        self.link = Link(cfg, key, self.outbox, self._hello_body, self.on_command)
        allowed = {cfg.agent_uid} if cfg.agent_uid is not None else {cfg.euid}
        self.watcher = HandbackWatcher(self._emit_raw, allowed)
        self.commands = queue.Queue()  # type: queue.Queue[Optional[Tuple[str, Dict[str, Any]]]]
        self.results = collections.OrderedDict()  # type: collections.OrderedDict[str, Optional[Dict[str, Any]]]
        self.results_lock = threading.Lock()
        self.tainted = False
        self.io_dir = None  # type: Optional[str]  # the running turn's $HANGAR_IO
        self.turns_started = set()  # type: Set[str]
        self.current_turn = None  # type: Optional[str]  # the turn last started
        self.stopping = threading.Event()
        self.shutdown_requested = False
        self.side_threads = []  # type: List[threading.Thread]
        self.harness = None  # type: Optional[Harness]
        self.harness_error = None  # type: Optional[str]
        try:
            from . import adapters

            self.harness = adapters.make_harness(cfg.harness, self.emit)
        except Exception as exc:
            self.harness_error = "harness %s unavailable: %s: %s" % (cfg.harness, exc.__class__.__name__, exc)
            log.error("%s", self.harness_error)

    # --------------------------------------------------------------- events

    def _emit_raw(self, name: str, payload: Dict[str, Any]) -> None:
        try:
            self.outbox.add(name, P.scrub(payload))
        except Exception:
            log.exception("emitting %s failed", name)

    def emit(self, name: str, payload: Dict[str, Any]) -> None:
        """The adapters' emit: thread-safe, never raises. A turn's hand-back lines are read before its
        ``turn_ended`` goes out, so they come first."""
        try:
            if not isinstance(name, str) or not isinstance(payload, dict):
                raise TypeError("emit(%r, %r)" % (type(name), type(payload)))
            if name == "permission_request":
                # What the control plane's rules resolve paths against, as this sandbox sees them.
                payload = dict(payload)
                payload.setdefault("home", self.cfg.agent_home)
                if self.io_dir:
                    payload.setdefault("io", self.io_dir)
            if name in ("steer", "interrupted") and not payload.get("turn") and self.current_turn:
                # The adapter reports a steer's fate before the next turn can start: it is this turn's.
                payload = dict(payload)
                payload["turn"] = self.current_turn
            if name == "turn_ended":
                turn = payload.get("turn")
                if isinstance(turn, str):
                    try:
                        self.watcher.finish_turn(turn)
                    except Exception:
                        log.exception("reading the hand-back of turn %s", turn)
        except Exception:
            log.exception("bad event from the adapter")
            return
        self._emit_raw(name, payload)

    def _hello_body(self) -> Dict[str, Any]:
        return {
            "run": self.cfg.run,
            "harness": self.cfg.harness,
            "driver_version": DRIVER_VERSION,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "resume_from": self.outbox.resume_from(),
            "boot": self.boot,
            "live": bool(self.harness is not None and self.harness.live),
            "pid": os.getpid(),
        }

    # --------------------------------------------------------------- commands

    def on_command(self, command_id: Any, body: Dict[str, Any]) -> None:
        """Called by the link's reader for each command frame: at most once per id."""
        if not isinstance(command_id, str) or not command_id or len(command_id) > 200:
            log.warning("command without a usable id ignored")
            return
        with self.results_lock:
            if command_id in self.results:
                previous = self.results[command_id]
                self.link.ack_command(command_id)
                if previous is not None:
                    again = dict(previous)
                    again["duplicate"] = True
                    self._emit_raw(P.EV_COMMAND_RESULT, again)
                return
            self.results[command_id] = None
            while len(self.results) > REMEMBERED_COMMANDS:
                oldest = next(iter(self.results))
                if self.results[oldest] is None:
                    break
                self.results.popitem(last=False)
        self.link.ack_command(command_id)
        self.commands.put((command_id, body))

    def command_loop(self) -> None:
        while True:
            item = self.commands.get()
            if item is None:
                return
            command_id, body = item
            op = body.get("op")
            if op == P.OP_CHECKPOINT:
                t = threading.Thread(target=self._execute, args=(command_id, body), name="hangar-checkpoint",
                                     daemon=True)
                self.side_threads.append(t)
                t.start()
                continue
            self._execute(command_id, body)

    def _execute(self, command_id: str, body: Dict[str, Any]) -> None:
        op = body.get("op")
        result = {"command_id": command_id, "op": op if isinstance(op, str) else None, "ok": True,
                  "error": None}  # type: Dict[str, Any]
        try:
            if not isinstance(op, str) or op not in P.OPS:
                raise CommandError("unknown command op %r" % (op,))
            extra = getattr(self, "_op_" + op)(body)
            if extra:
                for k, v in extra.items():
                    if k not in result:
                        result[k] = v
        except CommandError as exc:
            result["ok"], result["error"] = False, str(exc)
        except NotLive as exc:
            result["ok"], result["error"] = False, "harness %s cannot take this now: %s" % (self.cfg.harness, exc)
        except Exception as exc:
            log.error("command %s (%s) failed:\n%s", command_id, op, traceback.format_exc())
            result["ok"], result["error"] = False, "%s: %s" % (exc.__class__.__name__, exc)
        with self.results_lock:
            self.results[command_id] = result
        self._emit_raw(P.EV_COMMAND_RESULT, result)
        if self.shutdown_requested:
            self.stopping.set()

    def _need_harness(self) -> Harness:
        if self.harness is None:
            raise CommandError(self.harness_error or "no harness")
        return self.harness

    @staticmethod
    def _str(body: Dict[str, Any], field: str, required: bool = True, limit: int = 1 << 20) -> Optional[str]:
        value = body.get(field)
        if value is None and not required:
            return None
        if not isinstance(value, str) or (required and not value) or len(value) > limit:
            raise CommandError("%s must be a non-empty string" % field if required else "%s must be a string" % field)
        return value

    def _op_start_turn(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self._need_harness()
        turn = body.get("turn")
        if not _safe_name(turn):
            raise CommandError("turn must be a name of letters, digits, '.', '_' and '-' (up to 128)")
        assert isinstance(turn, str)
        message = self._str(body, "message", limit=2 * 1024 * 1024)
        assert message is not None
        approvals = self._str(body, "approvals", required=False, limit=40) or "auto"
        if approvals != "auto" and HARDENING_ERROR is not None:
            raise CommandError("approvals %s needs the driver hardened, and this sandbox's python3 could not "
                               "make it non-dumpable (%s): use an image with python3 3.8 or later, with ctypes"
                               % (approvals, HARDENING_ERROR))
        if approvals != "auto" and not h.live:
            raise CommandError("harness %s has no permission prompts: approvals %s needs a live harness"
                               % (self.cfg.harness, approvals))
        if turn in self.turns_started:
            raise CommandError("turn %s was already started" % turn)
        if self.stopping.is_set():
            # The pod is going away (SIGTERM, shutdown): the turn must run in the next sandbox, not die here.
            raise CommandError("the sandbox is shutting down: turn %s was not started" % turn)
        with h.lock:
            if h.running():
                raise CommandError("a turn is already running")
        conversation = self._str(body, "conversation", required=False, limit=200)
        fork = body.get("fork", False)
        if not isinstance(fork, bool):
            raise CommandError("fork must be true or false")
        if fork and not conversation:
            raise CommandError("fork needs the conversation to fork")
        if body.get("tainted"):
            self.tainted = True
        env = dict(self.cfg.agent_env)
        extra_env = body.get("env") or {}
        if not isinstance(extra_env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k for k, v in extra_env.items()
        ):
            raise CommandError("env must map names to strings")
        for k, v in extra_env.items():
            if not k.startswith("HANGAR_RUN_KEY") and k != "HANGAR_IO":
                env[k] = v
        extra = body.get("extra") or {}
        if not isinstance(extra, dict):
            raise CommandError("extra must be an object")
        argv = body.get("argv_prefix", self.cfg.argv_prefix)
        if argv is not None and (not isinstance(argv, list) or not all(isinstance(a, str) for a in argv)):
            raise CommandError("argv_prefix must be a list of strings")
        io_dir = os.path.join(self.cfg.state_dir, "io", turn)
        secure_dir(io_dir, self.cfg.agent_uid, self.cfg.agent_gid, 0o700)
        env["HANGAR_IO"] = io_dir
        self.io_dir = io_dir
        cfg = TurnConfig(
            turn_id=turn,
            message=message,
            cwd=self.cfg.workspace,
            env=env,
            argv_prefix=argv,
            model=self._str(body, "model", required=False, limit=200),
            conversation=conversation,
            fork=fork,
            approvals=approvals,
            tainted=self.tainted,
            run_as=self.cfg.run_as,
            extra=extra,
            mcp_servers=self.cfg.mcp_servers,
        )
        self.turns_started.add(turn)
        self.current_turn = turn
        self.watcher.start_turn(turn, io_dir)
        try:
            with h.lock:
                h.start_turn(cfg)
        except Exception:
            self.watcher.finish_turn(turn)
            raise
        return {"turn": turn, "io": io_dir}

    def _op_steer(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self._need_harness()
        steer_id = self._str(body, "steer_id", limit=200)
        message = self._str(body, "message", limit=2 * 1024 * 1024)
        turn = self._str(body, "turn", required=False, limit=200)
        assert steer_id is not None and message is not None
        if not h.live:
            raise CommandError("harness %s cannot be steered: the message starts the next turn" % self.cfg.harness)
        with h.lock:
            ended = not h.running() or (turn is not None and turn != self.current_turn)
            if not ended:
                try:
                    h.steer(steer_id, message)
                except NotLive:
                    ended = True
        if ended:
            # The turn it was meant for ended before it arrived: it starts the next turn.
            self.emit("steer", {"steer_id": steer_id, "status": "queued", "turn": turn,
                                "reason": "the turn had ended before the steer reached the driver"})
            return {"steer_id": steer_id, "status": "queued", "at": time.time()}
        return {"steer_id": steer_id, "at": time.time()}

    def _op_withdraw(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self._need_harness()
        steer_id = self._str(body, "steer_id", limit=200)
        with h.lock:
            withdrawn = bool(h.withdraw(steer_id or ""))
        return {"steer_id": steer_id, "withdrawn": withdrawn}

    def _op_interrupt(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self._need_harness()
        turn = self._str(body, "turn", required=False, limit=200)
        interrupt_id = self._str(body, "interrupt_id", required=False, limit=200)
        message = self._str(body, "message", required=False, limit=2 * 1024 * 1024)
        with h.lock:
            if not h.running() or (turn is not None and turn != self.current_turn):
                return {"running": False, "continues": False, "interrupt_id": interrupt_id}
            continues = bool(message) and h.live
            if continues:
                h.interrupt(message=message, interrupt_id=interrupt_id)
            else:
                h.interrupt()
        return {"running": True, "continues": continues, "interrupt_id": interrupt_id}

    def _op_answer(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self._need_harness()
        request_id = self._str(body, "request_id", limit=200)
        decision = body.get("decision")
        if decision not in DECISIONS:
            raise CommandError("decision must be one of %s" % ", ".join(DECISIONS))
        message = self._str(body, "message", required=False, limit=64 * 1024)
        assert request_id is not None
        try:
            with h.lock:
                h.answer(request_id, decision, message)
        except NotLive:
            raise CommandError("harness %s takes no permission answers now" % self.cfg.harness) from None
        return {"request_id": request_id, "decision": decision}

    def _op_taint(self, body: Dict[str, Any]) -> Dict[str, Any]:
        self.tainted = True
        h = self.harness
        if h is not None:
            with h.lock:
                hook = getattr(h, "taint", None)
                if callable(hook):
                    hook()
                else:
                    h.tainted = True  # type: ignore[attr-defined]
        return {"tainted": True}

    def _op_checkpoint(self, body: Dict[str, Any]) -> Dict[str, Any]:
        path = self._str(body, "path", limit=4096)
        assert path is not None
        if not os.path.isabs(path):
            raise CommandError("path must be absolute")
        include_home = body.get("include_home", True)
        specs = ["workspace=" + self.cfg.workspace]
        if include_home:
            specs.append("home=" + self.cfg.agent_home)
        uid = self.cfg.agent_uid if self.cfg.agent_uid is not None else -1
        gid = self.cfg.agent_gid if self.cfg.agent_gid is not None else -1
        env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, 0o700)
        tmp = path + ".partial"
        digest = hashlib.sha256()
        size = 0
        proc = subprocess.Popen([sys.executable, "-c", CHECKPOINT_SCRIPT, str(uid), str(gid)] + specs,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd="/", env=env, close_fds=True)
        err_chunks = []  # type: List[bytes]
        err_reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read() if proc.stderr else b""),
                                      daemon=True)
        err_reader.start()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as out:
                assert proc.stdout is not None
                while True:
                    chunk = proc.stdout.read(1024 * 1024)
                    if not chunk:
                        break
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            rc = proc.wait()
            err_reader.join(10)
            if rc != 0:
                raise CommandError("checkpoint failed (exit %d): %s" % (rc, b"".join(err_chunks)[-2000:]
                                                                       .decode("utf-8", "replace")))
            os.replace(tmp, path)
        except BaseException:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        skipped = b"".join(err_chunks).decode("utf-8", "replace").count("skipped ")
        return {"path": path, "size": size, "sha256": digest.hexdigest(), "skipped": skipped}

    def _op_shutdown(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self.harness
        if h is not None:
            with h.lock:
                h.close()
        self.shutdown_requested = True  # the driver stops once this command's result is out
        return {}

    # --------------------------------------------------------------- lifecycle

    def prepare(self) -> None:
        cfg = self.cfg
        os.makedirs(os.path.dirname(cfg.state_dir) or "/", exist_ok=True)
        secure_dir(cfg.state_dir, None, None, 0o711)
        secure_dir(os.path.join(cfg.state_dir, "io"), None, None, 0o711)
        if not os.path.isdir(cfg.workspace):
            os.makedirs(cfg.workspace, 0o755)
        if cfg.agent_home.startswith(cfg.state_dir + os.sep):
            secure_dir(cfg.agent_home, cfg.agent_uid, cfg.agent_gid, 0o700)
        elif not os.path.isdir(cfg.agent_home):
            os.makedirs(cfg.agent_home, 0o700)
            if cfg.agent_uid is not None:
                os.chown(cfg.agent_home, cfg.agent_uid, cfg.agent_gid if cfg.agent_gid is not None else -1)
        if cfg.agent_uid is not None and cfg.agent_gid is not None:
            chown_tree(cfg.workspace, cfg.agent_uid, cfg.agent_gid)
            if not cfg.agent_home.startswith(cfg.state_dir + os.sep):
                chown_tree(cfg.agent_home, cfg.agent_uid, cfg.agent_gid)
        key_file = os.environ.get("HANGAR_RUN_KEY_FILE")
        if key_file:
            try:
                st = os.stat(key_file)
                if st.st_mode & 0o044 and cfg.agent_uid is not None:
                    cfg.warnings.append("the run key file %s is readable by other users (mode %o)"
                                        % (key_file, stat.S_IMODE(st.st_mode)))
            except OSError:
                pass

    def run(self) -> int:
        try:
            self.prepare()
        except Exception as exc:  # keep running: the operator hears why no turn can start
            log.exception("preparing the sandbox failed")
            self.harness_error = "sandbox setup failed: %s: %s" % (exc.__class__.__name__, exc)
            self.harness = None
        for message in self.cfg.warnings:
            log.warning("%s", message)
            self._emit_raw("log", {"level": "warning", "message": message, "source": "driver"})
        if self.harness_error:
            self._emit_raw("log", {"level": "error", "message": self.harness_error, "source": "driver"})
        self._emit_raw(P.EV_DRIVER_READY, {
            "harness": self.cfg.harness,
            "live": bool(self.harness is not None and self.harness.live),
            "driver_version": DRIVER_VERSION,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "agent_uid": self.cfg.agent_uid if self.cfg.agent_uid is not None else self.cfg.euid,
            "workspace": self.cfg.workspace,
            "error": self.harness_error,
            "hardened": HARDENING_ERROR is None,
        })
        threading.Thread(target=self.command_loop, name="hangar-commands", daemon=True).start()
        threading.Thread(target=self.watcher.run, name="hangar-handback", daemon=True).start()
        link_thread = threading.Thread(target=self.link.run_forever, name="hangar-link", daemon=True)
        link_thread.start()
        while not self.stopping.wait(0.5):
            pass
        log.info("shutting down")
        h = self.harness
        if h is not None:
            try:
                with h.lock:
                    h.close()
            except Exception:
                log.exception("closing the harness")
        for t in self.side_threads:
            t.join(SHUTDOWN_DRAIN)
        self.watcher.stopping.set()
        drained = self.outbox.wait_drained(SHUTDOWN_DRAIN)
        if not drained:
            log.warning("exiting with %d events the gateway has not stored", self.outbox.pending())
        self.link.stop()
        link_thread.join(5)
        return 0


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=os.environ.get("HANGAR_DRIVER_LOG", "INFO"),
                        format="%(asctime)s hangar-driver %(levelname)s %(message)s", stream=sys.stderr)
    if sys.version_info < (3, 8):
        sys.stderr.write("hangar-driver needs Python 3.8 or later\n")
        return 2
    key = read_key()
    harden_process()
    cfg = Config(dict(os.environ))
    driver = Driver(cfg, key)
    log.info("run %s, harness %s, key %s, agent uid %s", cfg.run, cfg.harness, P.fingerprint(key), cfg.agent_uid)

    def _term(signum: int, frame: Any) -> None:
        driver.stopping.set()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    return driver.run()

