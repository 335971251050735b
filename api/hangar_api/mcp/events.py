"""Resumable SSE for handshake-era clients (SEP-1699): the SDK's streamable-HTTP transport gives each event
an id from an ``EventStore`` and sends ``retry:``; a client whose stream broke (mid ``wait_for_turn``) sends
``GET`` with ``Last-Event-ID`` and gets what it missed, then the rest of the stream.

This store is in memory and bounded: the last :data:`PER_STREAM` events of each stream, at most
:data:`MAX_STREAMS` streams (the least recently written go first), none older than :data:`TTL_SECONDS`. A
handshake-era session lives on one API process (its ``Mcp-Session-Id``), so its events do too.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

PER_STREAM = 512
MAX_STREAMS = 4096
TTL_SECONDS = 30 * 60


@dataclass
class _Stream:
    events: deque[tuple[int, JSONRPCMessage | None]] = field(default_factory=lambda: deque(maxlen=PER_STREAM))
    touched: float = field(default_factory=time.monotonic)


class BoundedEventStore(EventStore):
    def __init__(self, per_stream: int = PER_STREAM, max_streams: int = MAX_STREAMS) -> None:
        self.per_stream = per_stream
        self.max_streams = max_streams
        self._streams: OrderedDict[StreamId, _Stream] = OrderedDict()
        self._where: dict[int, StreamId] = {}  # event number → its stream
        self._numbers = itertools.count(1)

    def _forget(self, stream_id: StreamId) -> None:
        gone = self._streams.pop(stream_id, None)
        if gone is not None:
            for n, _ in gone.events:
                self._where.pop(n, None)

    def _expire(self, now: float) -> None:
        while self._streams:
            oldest_id, oldest = next(iter(self._streams.items()))
            if len(self._streams) <= self.max_streams and now - oldest.touched <= TTL_SECONDS:
                return
            self._forget(oldest_id)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        now = time.monotonic()
        stream = self._streams.pop(stream_id, None) or _Stream(deque(maxlen=self.per_stream))
        stream.touched = now
        self._streams[stream_id] = stream  # most recently written last
        n = next(self._numbers)
        if len(stream.events) == stream.events.maxlen:
            self._where.pop(stream.events[0][0], None)
        stream.events.append((n, message))
        self._where[n] = stream_id
        self._expire(now)
        return str(n)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Sends the stream's events after ``last_event_id``; None when that id is unknown (too old, or
        never ours), and the client starts over."""
        try:
            after = int(last_event_id)
        except ValueError:
            return None
        stream_id = self._where.get(after)
        stream = self._streams.get(stream_id) if stream_id is not None else None
        if stream_id is None or stream is None:
            return None
        for n, message in list(stream.events):
            if n > after and message is not None:  # None: a priming event, nothing to resend
                await send_callback(EventMessage(message, str(n)))
        return stream_id
