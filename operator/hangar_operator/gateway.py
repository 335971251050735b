"""The driver gateway: the TCP server the sandboxes' hangar-drivers connect to.

The wire protocol (frames, signatures, handshake, exactly-once rules) is specified in
``hangar_driver.protocol`` and ``docs/driver-protocol.md``; this module is its operator end.

What the operator gets:

- ``on_event(run, seq, name, payload)`` once per event, strictly in seq order, and only for seqs above
  what ``acked_for_run(run)`` reports as stored. It must store the event durably before it returns; the
  event is acknowledged to the driver only then. If it raises, the event is not acknowledged and the
  connection is closed: the driver reconnects (with backoff) and resends it.
- ``send(run, op, body, command_id)`` queues a command. It is kept until the driver acknowledges its id and
  is resent on every new connection, so a command queued while the driver is away is delivered when it
  comes back. The queue lives in this process only: after an operator restart, re-send what the
  resources say is undelivered, with the same (deterministic) command ids; the driver executes an id at
  most once and answers a repeated id with its recorded ``command_result``.
- ``on_connect(run, hello_body)`` when a driver's connection is confirmed (also after a reconnect, and
  when a newer connection replaced an older one); ``on_disconnect(run)`` when the run's current connection
  is gone and no newer one replaced it.
- ``on_rejected(who, reason)`` for every refused connection or frame (``who`` is the run id when the frame
  named one, else ``peer HOST:PORT``): audit it. Anyone who can reach the port can cause these.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from hangar_driver import protocol as P

from . import metrics
from .gateway_conns import Conn, RunState, drop_read, read_ahead, reason_label

log = logging.getLogger("hangar.gateway")

KeyForRun = Callable[[str], Awaitable[bytes | None]]
OnEvent = Callable[[str, int, str, dict[str, Any]], Awaitable[None]]
OnConnect = Callable[[str, dict[str, Any]], Awaitable[None]]
OnDisconnect = Callable[[str], Awaitable[None]]
OnRejected = Callable[[str, str], Awaitable[None]]
AckedForRun = Callable[[str], Awaitable[int]]
OnLive = Callable[[str, dict[str, Any]], None]

HELLO_TIMEOUT = 10.0  # seconds a new connection has, in all, to send its hello and its confirmation
# Bytes a connection may send in one frame before it is authenticated (a hello and its confirming ack are
# a few hundred bytes). Anyone who can reach the port is unauthenticated: 4 MiB partial frames from 20 such
# connections held ~75 MB that the process never gave back. The full frame limit applies once confirmed.
HELLO_MAX_BYTES = 16384
IDLE_TIMEOUT = 90.0  # a connection that sends nothing for this long is closed (drivers ping every 20 s)
MAX_UNCONFIRMED = 256  # connections that have not completed the handshake yet; more are closed at once
REJECT_REPORTS_PER_MINUTE = 30  # per peer host: on_rejected calls beyond this are only logged
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
_COMMAND_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$")
_EVENT_NAME = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")


class _Closed(Exception):
    """End this connection (the reason was already logged or reported)."""


class Gateway:
    """The operator's end of the driver channel. One instance per operator process."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        key_for_run: KeyForRun,
        on_event: OnEvent,
        on_connect: OnConnect,
        on_disconnect: OnDisconnect,
        on_rejected: OnRejected,
        acked_for_run: AckedForRun,
        on_live: OnLive | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._key_for_run = key_for_run
        self._on_event = on_event
        self._on_connect = on_connect
        self._on_disconnect = on_disconnect
        self._on_rejected = on_rejected
        self._acked_for_run = acked_for_run
        self.on_live = on_live  # a live frame (live_work.py): handed on at once, never stored
        self._runs: dict[str, RunState] = {}
        # pool run -> the run an ``adopt`` sent to it names (the one hello its connection may say in place),
        # and that run's stored events, read while the driver derives its key (one database read fewer after)
        self._adopts: dict[str, tuple[str, asyncio.Future[int]]] = {}
        self._expected: dict[str, asyncio.Future[int]] = {}  # a new run's stored events, read ahead (expect)
        self._conns: set[Conn] = set()
        self._unconfirmed = 0
        self._reject_window: dict[str, tuple[float, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> int:
        """Listen; returns the bound port (useful with ``port=0``)."""
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, limit=HELLO_MAX_BYTES + 1, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        log.info("driver gateway listening on %s:%d", self.host, self.port)
        return self.port

    @property
    def serving(self) -> bool:
        """Is it accepting connections (for the operator's health checks)?"""
        return self._server is not None and self._server.is_serving()

    async def stop(self) -> None:
        """Stop listening and drop every connection. Unacknowledged commands stay queued in this object."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.close()
        for acked in [*(a for _, a in self._adopts.values()), *self._expected.values()]:
            drop_read(acked)
        self._adopts, self._expected = {}, {}
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    # ---------------------------------------------------------------- API

    def connected(self, run: str) -> bool:
        state = self._runs.get(run)
        return bool(state and state.conn is not None and state.conn.confirmed and not state.conn.closed)

    def connected_for(self, run: str) -> float:
        """Seconds since ``run``'s current connection was confirmed (0 while it has none)."""
        now = asyncio.get_running_loop().time()
        return now - self._runs[run].connected_at if self.connected(run) else 0.0

    def hello(self, run: str) -> dict[str, Any]:
        """The verified hello of ``run``'s connection (empty while it has none)."""
        state = self._runs.get(run)
        return dict(state.conn.hello) if self.connected(run) and state and state.conn else {}

    async def wait_connected(self, run: str, timeout: float) -> bool:
        state = self._state(run)
        if self.connected(run):
            return True
        try:
            await asyncio.wait_for(state.connected.wait(), timeout)
        except TimeoutError:
            return False
        return self.connected(run)

    async def send(self, run: str, op: str, body: dict[str, Any], command_id: str | None = None) -> str:
        """Queue a command for ``run`` and send it now if the driver is connected. Returns its id.

        The command is kept until the driver acknowledges it and resent on every new connection. Queuing
        an id that is still queued does nothing. ``body`` must be JSON; its ``op`` key is set to ``op``.
        """
        if op not in P.OPS:
            raise ValueError(f"unknown command op {op!r}")
        cid = command_id if command_id is not None else "c-" + secrets.token_hex(12)
        if not _COMMAND_ID.match(cid):
            raise ValueError(f"bad command id {cid!r}")
        cmd = dict(body)
        cmd["op"] = op
        P.canonical({"body": cmd})  # raises now (TypeError/ValueError) if the body can't be signed
        state = self._state(run)
        if cid in state.pending:
            return cid
        if op == P.OP_ADOPT and isinstance(cmd.get("run"), str):
            self._drop_adopt(run)
            self._adopts[run] = (cmd["run"], asyncio.ensure_future(self._acked_for_run(cmd["run"])))
        state.pending[cid] = cmd
        async with state.send_lock:
            conn = state.conn
            if conn is not None and conn.confirmed and not conn.closed and cid in state.pending:
                try:
                    await conn.send(P.COMMAND, cmd, fid=cid)
                except (OSError, TimeoutError) as exc:
                    log.info("run %s: command %s not sent now (%s); it is resent on reconnect", run, cid, exc)
                    conn.close()
        return cid

    def pending_commands(self, run: str) -> list[str]:
        """Ids of the commands queued for ``run`` that the driver has not acknowledged yet, in order."""
        state = self._runs.get(run)
        return list(state.pending) if state else []

    def acked(self, run: str) -> int:
        """The highest event seq this gateway knows is stored for ``run`` (0 before its first hello)."""
        state = self._runs.get(run)
        return state.acked if state else 0

    def expect(self, run: str) -> None:
        """A run just made: what is stored for it is read while its pod starts, not after its first hello."""
        if run not in self._expected:
            self._expected[run] = asyncio.ensure_future(self._acked_for_run(run))

    def forget(self, run: str) -> None:
        """Drop a finished run: close its connection and its queued commands."""
        self._drop_adopt(run)
        drop_read(self._expected.pop(run, None))
        state = self._runs.pop(run, None)
        if state and state.conn is not None:
            state.conn.close()

    def _drop_adopt(self, run: str) -> None:
        drop_read(self._adopts.pop(run, ("", None))[1])

    # ---------------------------------------------------------------- connection handling

    def _state(self, run: str) -> RunState:
        state = self._runs.get(run)
        if state is None:
            state = self._runs[run] = RunState()
        return state

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = Conn(reader, writer, peer)
        if self._unconfirmed >= MAX_UNCONFIRMED:
            log.warning("driver gateway: too many connections in handshake; closing %s", peer)
            conn.close()
            self._tasks.discard(task)
            return
        self._conns.add(conn)
        self._unconfirmed += 1
        conn.counted = True
        try:
            await self._serve(conn)
        except _Closed:
            pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError) as exc:
            log.info("driver connection %s (run %s) ended: %s", peer, conn.run, exc.__class__.__name__)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("driver connection %s (run %s) failed", peer, conn.run)
        finally:
            conn.close()
            if conn.counted:
                conn.counted = False
                self._unconfirmed -= 1
            self._conns.discard(conn)
            self._tasks.discard(task)
            await self._after_close(conn)

    async def _after_close(self, conn: Conn) -> None:
        if conn.run is None or not conn.confirmed:
            return
        state = self._runs.get(conn.run)
        if state is None or state.conn is not conn:
            return  # replaced by a newer connection, or forgotten
        state.conn = None
        state.connected.clear()
        try:
            await self._on_disconnect(conn.run)
        except Exception:
            log.exception("on_disconnect(%s) failed", conn.run)

    async def _reject(self, conn: Conn, who: str, reason: str) -> NoReturn:
        log.warning("driver gateway refused %s from %s: %s", who, conn.peer, reason)
        # Counted here, every one (the reports below are limited per host), under a fixed set of labels.
        metrics.DRIVER_REJECTED.labels(reason=reason_label(reason)).inc()
        conn.close()
        if self._may_report(conn.peer.rpartition(":")[0]):
            try:
                await self._on_rejected(who, f"{reason} (from {conn.peer})")
            except Exception:
                log.exception("on_rejected failed")
        raise _Closed()

    def _may_report(self, host: str) -> bool:
        """Anyone who can reach the port can cause rejections: report at most so many per host and minute."""
        now = asyncio.get_running_loop().time()
        start, count = self._reject_window.get(host, (now, 0))
        if now - start >= 60:
            start, count = now, 0
        self._reject_window[host] = (start, count + 1)
        if len(self._reject_window) > 10000:
            self._reject_window = {h: w for h, w in self._reject_window.items() if now - w[0] < 60}
        if count == REJECT_REPORTS_PER_MINUTE:
            log.warning("driver gateway: more rejections from %s this minute are only logged", host)
        return count < REJECT_REPORTS_PER_MINUTE

    async def _read_frame(self, conn: Conn, limit_s: float, who: str) -> dict[str, Any]:
        try:
            line = await asyncio.wait_for(conn.reader.readuntil(b"\n"), limit_s)
        except asyncio.LimitOverrunError:
            await self._reject(conn, who, "frame too large")
        except asyncio.IncompleteReadError:
            raise _Closed() from None
        try:
            return P.decode(line)
        except P.FrameTooLarge:
            await self._reject(conn, who, "frame too large")
        except P.ProtocolError as exc:
            await self._reject(conn, who, str(exc) or "malformed frame")

    async def _serve(self, conn: Conn) -> None:
        anon = f"peer {conn.peer}"
        deadline = asyncio.get_running_loop().time() + HELLO_TIMEOUT  # for the whole handshake
        try:
            frame = await self._read_frame(conn, HELLO_TIMEOUT, anon)
        except TimeoutError:
            await self._reject(conn, anon, "no hello in time")
        run = frame.get("run")
        if not isinstance(run, str) or not _RUN_ID.match(run):
            await self._reject(conn, anon, "malformed frame: run")
        if frame.get("type") != P.HELLO:
            await self._reject(conn, run, "first frame is not hello")
        key = await self._key_for_run(run)
        if not key:
            await self._reject(conn, run, "unknown run")
        try:
            P.verify(key, frame, P.D2G, run)
        except P.BadSignature as exc:
            await self._reject(conn, run, str(exc))
        conn.run, conn.key, conn.hello = run, key, dict(frame["body"])
        conn.nonce = secrets.token_urlsafe(18)
        state = self._state(run)
        ahead = self._expected.pop(run, None)
        async with state.events_lock:
            stored = await read_ahead(ahead)  # when the run was made (expect); a failed read is made again
            stored = await self._acked_for_run(run) if stored is None else stored
            state.acked = max(state.acked, int(stored))
            acked = state.acked
        await conn.send(P.WELCOME, {"acked": acked, "nonce": conn.nonce})

        while not conn.closed:
            run = conn.run  # the adopted run's, once a pool's connection was adopted in place
            try:
                left = max(0.0, deadline - asyncio.get_running_loop().time())
                frame = await self._read_frame(conn, IDLE_TIMEOUT if conn.confirmed else left, run)
            except TimeoutError:
                if conn.confirmed:
                    log.info("run %s: driver connection %s idle, closing", run, conn.peer)
                    raise _Closed() from None
                await self._reject(conn, run, "connection not confirmed in time")
            if conn.confirmed and frame.get("type") == P.HELLO and frame.get("run") != run:
                state = await self._adopt_in_place(conn, state, frame)
                continue
            try:
                P.verify(conn.key, frame, P.D2G, run)
            except P.BadSignature as exc:
                await self._reject(conn, run, str(exc))
            if conn.closed:  # replaced while we waited
                raise _Closed()
            ftype, body = frame["type"], frame["body"]
            if not conn.confirmed:
                if ftype != P.ACK or body.get("nonce") != conn.nonce:
                    await self._reject(conn, run, "connection not confirmed (replayed hello?)")
                await self._confirm(conn, state)
                await self._handle_ack(conn, state, body)
            elif ftype == P.ACK:
                if body.get("nonce") != conn.nonce:
                    await self._reject(conn, run, "wrong nonce")
                await self._handle_ack(conn, state, body)
            elif ftype == P.EVENT:
                await self._handle_event(conn, state, frame)
            elif ftype == P.PING:
                await conn.send(P.PONG, {})
            elif ftype == P.LIVE:
                if self.on_live is not None:
                    try:
                        self.on_live(run, dict(body))
                    except Exception:
                        log.exception("run %s: a live frame could not be handed on", run)
            else:
                await self._reject(conn, run, f"unexpected {ftype}")

    async def _adopt_in_place(self, conn: Conn, state: RunState, frame: dict[str, Any]) -> RunState:
        """A pool's driver, adopted, says hello as the session's run on its confirmed connection (protocol
        "Adoption in place"): verified, the connection becomes that run's, confirmed, and the pool's run is
        forgotten (its key is refused from now on by whoever answers ``key_for_run``). Returns the new run's
        state. Anything amiss closes the connection (the driver then says hello on a new one)."""
        pool_run = conn.run
        assert pool_run is not None
        new = frame.get("run")
        sent, acked_read = self._adopts.get(pool_run, ("", None))
        if not isinstance(new, str) or not _RUN_ID.match(new) or acked_read is None or sent != new:
            await self._reject(conn, pool_run, "unexpected hello (no adoption sent)")
        key = await self._key_for_run(new)
        if not key:
            await self._reject(conn, new, "unknown run")
        try:
            P.verify_adoption(key, frame, pool_run, new, conn.nonce)
        except P.BadSignature as exc:
            await self._reject(conn, new, str(exc))
        if conn.closed or state.conn is not conn:  # replaced, or the pool's run forgotten, meanwhile
            raise _Closed()
        async with state.send_lock:  # no command of the pool's run goes out on it from here
            state.conn = None
            state.connected.clear()
        self._adopts.pop(pool_run, None)
        self._runs.pop(pool_run, None)
        conn.run, conn.key, conn.hello = new, key, dict(frame["body"])
        new_state = self._state(new)
        async with new_state.events_lock:
            # Read when the adopt was sent: the new run had no connection since, so nothing was stored for it.
            stored = await acked_read
            new_state.acked = max(new_state.acked, int(stored))
            acked = new_state.acked
        await conn.send(P.WELCOME, {"acked": acked, "nonce": conn.nonce})
        log.info("run %s: adopted in place by %s", pool_run, new)
        await self._confirm(conn, new_state)
        return new_state

    async def _confirm(self, conn: Conn, state: RunState) -> None:
        assert conn.run is not None
        conn.confirmed = True
        # Authenticated: frames up to the protocol's limit from now on (StreamReader reads its limit on
        # every read; it has no public setter).
        vars(conn.reader)["_limit"] = P.MAX_FRAME_BYTES + 1
        if conn.counted:
            conn.counted = False
            self._unconfirmed -= 1
        async with state.send_lock:
            old = state.conn
            state.conn = conn
            if old is not None and old is not conn:
                log.info("run %s: newer connection %s replaces %s", conn.run, conn.peer, old.peer)
                old.close()
            for cid, cmd in list(state.pending.items()):
                await conn.send(P.COMMAND, cmd, fid=cid)
        state.connected_at = asyncio.get_running_loop().time()
        state.connected.set()
        log.info("run %s: driver connected from %s (%s)", conn.run, conn.peer, conn.hello.get("harness"))
        try:
            await self._on_connect(conn.run, dict(conn.hello))
        except Exception:
            log.exception("on_connect(%s) failed", conn.run)

    async def _handle_ack(self, conn: Conn, state: RunState, body: dict[str, Any]) -> None:
        ids = body.get("ids", [])
        if not isinstance(ids, list):
            assert conn.run is not None
            await self._reject(conn, conn.run, "malformed ack")
        for cid in ids:
            if isinstance(cid, str):
                state.pending.pop(cid, None)

    async def _handle_event(self, conn: Conn, state: RunState, frame: dict[str, Any]) -> None:
        run = conn.run
        assert run is not None
        seq, body = frame["seq"], frame["body"]
        name, payload = body.get("name"), body.get("payload")
        if (
            seq < 1
            or not isinstance(name, str)
            or not _EVENT_NAME.match(name)
            or not isinstance(payload, dict)
        ):
            await self._reject(conn, run, "malformed event")
        async with state.events_lock:
            if conn.closed:
                raise _Closed()
            if seq > state.acked + 1:
                log.warning(
                    "run %s: event seq %d after %d (gap); closing so the driver resends",
                    run,
                    seq,
                    state.acked,
                )
                raise _Closed()
            if seq == state.acked + 1:
                try:
                    await self._on_event(run, seq, name, payload)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("run %s: storing event %d (%s) failed; not acknowledged", run, seq, name)
                    raise _Closed() from None
                state.acked = seq
            acked = state.acked
        await conn.send(P.ACK, {"seq": acked})
