"""The driver gateway's per-connection and per-run state (gateway.py holds the server and the protocol's
operator end), and the fixed words a refusal is counted by."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any

from hangar_driver import protocol as P

WRITE_TIMEOUT = 30.0  # a driver that doesn't read what we send for this long is dropped


_REASON_LABELS = (
    ("too large", "frame_too_large"),
    ("in time", "timeout"),
    ("unknown run", "unknown_run"),
    ("signature", "bad_signature"),
    ("not hello", "not_hello"),
    ("not confirmed", "not_confirmed"),
    ("nonce", "wrong_nonce"),
    ("malformed", "malformed"),
)


def reason_label(reason: str) -> str:
    """The metric label of a refusal: one of a few words, whatever the reason's text (which can hold
    numbers and names a peer chose)."""
    return next((label for word, label in _REASON_LABELS if word in reason), "other")


class RunState:
    def __init__(self) -> None:
        self.pending: OrderedDict[str, dict[str, Any]] = OrderedDict()  # command id -> body (with op)
        self.acked = 0  # highest event seq known stored
        self.conn: Conn | None = None  # the confirmed, current connection
        self.events_lock = asyncio.Lock()  # event delivery and the welcome's acked, one at a time
        self.send_lock = asyncio.Lock()  # command order on the wire
        self.connected = asyncio.Event()
        self.connected_at = 0.0  # loop time its current connection was confirmed


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.run: str | None = None
        self.key = b""
        self.nonce = ""
        self.confirmed = False
        self.counted = False  # counts toward the gateway's unconfirmed connections
        self.closed = False
        self.hello: dict[str, Any] = {}
        self._out_seq = 0
        self._write_lock = asyncio.Lock()

    async def send(self, ftype: str, body: dict[str, Any], fid: str | None = None) -> None:
        assert self.run is not None
        async with self._write_lock:
            if self.closed:
                raise ConnectionResetError("connection closed")
            self._out_seq += 1
            frame = P.sign(self.key, P.make_frame(self.run, P.G2D, ftype, body, seq=self._out_seq, fid=fid))
            self.writer.write(P.encode(frame))
            await asyncio.wait_for(self.writer.drain(), WRITE_TIMEOUT)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self.writer.close()


def drop_read(acked: asyncio.Future[int] | None) -> None:
    """Cancel a read made ahead (the run's stored events) that is no longer wanted."""
    if acked is not None:
        acked.cancel()
        if acked.done() and not acked.cancelled():
            acked.exception()  # read, so an unread failure is not reported as lost


async def read_ahead(acked: asyncio.Future[int] | None) -> int | None:
    """What a read made ahead found; None when none was made or it failed (the caller reads again)."""
    if acked is None:
        return None
    try:
        return await acked
    except Exception:
        return None
