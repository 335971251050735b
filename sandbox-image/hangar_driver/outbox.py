"""The driver's outbox: every event it emits, numbered and signed, kept until the gateway has stored it.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time

from . import protocol as P
from .lazylog import log

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

MAX_EVENT_BYTES = P.MAX_FRAME_BYTES - 64 * 1024


class Outbox:
    """Every event the driver emits, numbered and signed, kept until the gateway acknowledges it.

    Events are numbered from the first ``welcome``: ``acked + 1`` onward, so a restarted driver process
    continues after what the gateway already stored. Before that they wait unnumbered."""

    def __init__(self, key: bytes, run: str) -> None:
        self.key = key
        self.run = run
        self.cond = threading.Condition()
        self.unnumbered: List[Tuple[str, Dict[str, Any]]] = []
        self.events: collections.deque[Tuple[int, bytes]] = collections.deque()
        self.next_seq: Optional[int] = None
        self.acked = 0

    def rebind(self, key: bytes, run: str) -> None:
        """Start over as another run (a warm sandbox adopted by a session): what the old run had not
        delivered is dropped, and events wait unnumbered for the new run's first welcome."""
        with self.cond:
            self.key, self.run = key, run
            self.unnumbered, self.next_seq, self.acked = [], None, 0
            self.events.clear()
            self.cond.notify_all()

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
