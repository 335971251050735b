"""The gateway client: one connection to the operator's driver gateway at a time (hello, welcome, acks,
pings), reconnected with backoff; it resends every event the gateway has not acknowledged and hands each
command frame to the driver.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import _socket
import select
import threading
import time

from . import protocol as P
from .config import Config
from .lazylog import log
from .outbox import Outbox

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

BACKOFF_MIN, BACKOFF_MAX = 0.2, 5.0
STABLE_CONNECTION = 5.0  # a connection that lived this long resets the backoff
CONNECT_TIMEOUT = 5.0
WELCOME_TIMEOUT = 10.0
# Idle seconds before the driver pings. Each ping and its pong cost the operator ~0.6 ms (a signature each
# way): at 1,000 idle sessions a 10 s ping was ~5% of a core, the operator's whole idle cost (2026-12-03).
PING_AFTER = 20.0
DEAD_AFTER = 60.0  # idle seconds (nothing from the gateway, pings unanswered) before it reconnects
SEND_TIMEOUT = 30.0


def _shutdown(sock: _socket.socket) -> None:
    """Wake whoever reads or writes ``sock`` (its peer may already be gone)."""
    try:
        sock.shutdown(_socket.SHUT_RDWR)
    except OSError:
        pass


def _dial(addr: Tuple[Any, int], timeout: float) -> _socket.socket:
    """``socket.create_connection`` made with the C module: ``socket``'s import, which builds its enums
    (``enum``'s own import with it; ~5 ms of a pod's start on a slow machine), is not on the way to the first
    hello. Each address ``getaddrinfo`` gives is tried in turn; the first error is raised if none connects."""
    errors: List[OSError] = []
    for family, kind, proto, _, where in _socket.getaddrinfo(addr[0], addr[1], 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(where)
            return sock
        except OSError as exc:
            errors.append(exc)
            sock.close()
    raise errors[0] if errors else OSError("getaddrinfo gave no address for %r" % (addr[0],))


class _LineReader:
    def __init__(self, sock: _socket.socket) -> None:
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


class _Connection:
    def __init__(self, sock: _socket.socket, nonce: str, sent_upto: int) -> None:
        self.sock = sock
        self.nonce = nonce
        self.sent_upto = sent_upto
        self.alive = True
        self.control: List[bytes] = []
        # Adopted in place (protocol "Adoption in place"): the pool's run and key, for the gateway's frames
        # already on their way when the adoption's hello left, until the session's welcome comes.
        self.adopting: Optional[Tuple[bytes, str]] = None


class Link:
    """The connection to the gateway: connects, reconnects with backoff, resends unacknowledged events."""

    def __init__(
        self,
        cfg: Config,
        key: bytes,
        outbox: Outbox,
        hello_body: Callable[[], Dict[str, Any]],
        on_command: Callable[[str, Dict[str, Any]], None],
    ) -> None:
        self.cfg = cfg
        self.key = key
        self.outbox = outbox
        self.hello_body = hello_body
        self.on_command = on_command
        self.stopping = threading.Event()
        self.conn: Optional[_Connection] = None
        self.unsent_acks: List[str] = []
        self.connected = threading.Event()
        self.connections = 0
        self.rebound = False  # the connection ended to say hello as another run: reconnect at once

    # called from any thread
    def ack_command(self, command_id: str) -> None:
        with self.outbox.cond:
            conn = self.conn
            if conn is not None and conn.alive:
                conn.control.append(self._frame(P.ACK, {"ids": [command_id], "nonce": conn.nonce}))
                self.outbox.cond.notify_all()
            else:
                self.unsent_acks.append(command_id)

    def send_live(self, body: Dict[str, Any]) -> bool:
        """Put one ``live`` frame on the current connection: False (dropped) when there is none, as a live
        answer is for whoever waits on it now, never resent."""
        with self.outbox.cond:
            conn = self.conn
            if conn is None or not conn.alive:
                return False
            try:
                data = self._frame(P.LIVE, P.scrub(body))  # under the lock: one run and its key
            except P.FrameTooLarge:
                log.warning("live answer to %s too large to send", body.get("request"))
                return False
            conn.control.append(data)
            self.outbox.cond.notify_all()
        return True

    def adopt(self, key: bytes, run: str) -> None:
        """Be ``run`` with ``key`` from now on (a warm sandbox adopted by a session): the outbox starts over
        as ``run`` and, on the current connection, a ``hello`` as ``run`` says so (protocol "Adoption in
        place"); the gateway's ``welcome`` makes the connection the new run's. Without a connection, or if
        the gateway refuses it (it closes the connection), the next connection says hello as ``run``, at
        once, without the backoff. One lock for all of it: no frame is made with one run and the other's key."""
        with self.outbox.cond:
            old_key, old_run = self.key, self.cfg.run
            self.key, self.cfg.run = key, run
            self.outbox.rebind(key, run)
            self.unsent_acks = []
            self.rebound = True
            conn = self.conn
            if conn is not None and conn.alive:
                body = dict(self.hello_body(), adopted_from=old_run, nonce=conn.nonce)
                conn.control.append(self._frame(P.HELLO, body))
                conn.adopting = (old_key, old_run)
            self.outbox.cond.notify_all()

    def _adopted(self, conn: _Connection, body: Dict[str, Any]) -> None:
        """The gateway's ``welcome`` for the adopted run on the connection that was the pool's."""
        acked, nonce = body.get("acked"), body.get("nonce")
        if not isinstance(acked, int) or isinstance(acked, bool) or acked < 0 or nonce != conn.nonce:
            raise P.ProtocolError("a malformed welcome for the adopted run")
        with self.outbox.cond:
            conn.adopting = None
            self.rebound = False
            self.outbox.welcome(acked)
            conn.sent_upto = acked  # the new run's numbering: every event after acked goes out
            self.outbox.cond.notify_all()
        log.info("adopted in place as %s (stored up to %d)", self.cfg.run, acked)

    def _verify(self, conn: _Connection, frame: Dict[str, Any]) -> bool:
        """Is ``frame`` this run's (True), or, while adopting, one the gateway signed as the pool's run
        before our hello reached it (False: dropped)? Anything else raises and ends the connection."""
        with self.outbox.cond:
            key, run, before = self.key, self.cfg.run, conn.adopting
        try:
            P.verify(key, frame, P.G2D, run)
            return True
        except P.BadSignature:
            if before is None:
                raise
        P.verify(before[0], frame, P.G2D, before[1])
        return False

    def stop(self) -> None:
        self.stopping.set()
        with self.outbox.cond:
            conn = self.conn
            if conn is not None:
                conn.alive = False
            self.outbox.cond.notify_all()
        if conn is not None:
            _shutdown(conn.sock)

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
            if self.rebound:
                self.rebound = False
                backoff = BACKOFF_MIN
                continue
            if time.monotonic() - started >= STABLE_CONNECTION:
                backoff = BACKOFF_MIN
            import random  # here: not compiled on the way to the first hello

            self.stopping.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _session(self) -> None:
        # An ASCII host as bytes: getaddrinfo encodes a str with the "idna" codec, whose import (stringprep,
        # unicodedata) was on the way to every first hello.
        host = self.cfg.host
        addr = (host.encode("ascii") if host.isascii() else host, self.cfg.port)
        sock = _dial(addr, CONNECT_TIMEOUT)
        conn: Optional[_Connection] = None
        writer: Optional[threading.Thread] = None
        try:
            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_KEEPALIVE, 1)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
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
            if (
                frame["type"] != P.WELCOME
                or not isinstance(acked, int)
                or acked < 0
                or not isinstance(nonce, str)
            ):
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
                if not self._verify(conn, frame):  # a frame we can't verify ends the connection
                    continue
                ftype, body = frame["type"], frame["body"]
                if ftype == P.WELCOME and conn.adopting is not None:
                    self._adopted(conn, body)
                elif ftype == P.ACK:
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
            _shutdown(sock)
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
            _shutdown(conn.sock)
