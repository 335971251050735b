"""The shared base of the live adapters (Claude Code, Codex): one CLI process per turn, whose state the
adapter's reader threads and the core's calls share under the adapter's own lock.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Generic, List, Optional, Tuple, TypeVar

from .harness import Emit, Event, Harness, TurnConfig
from .process import LineReader, StdinWriter, kill_group


class LiveTurn:
    """One turn's CLI process and the state every live adapter keeps for it."""

    def __init__(self, cfg: TurnConfig) -> None:
        self.cfg = cfg
        self.id = cfg.turn_id
        self.proc: Any = None
        self.writer: Optional[StdinWriter] = None
        self.reader: Optional[LineReader] = None
        self.pending: Dict[str, Dict[str, Any]] = {}  # open permission prompts by request_id
        self.interrupted = False
        self.finishing = False  # the CLI's turn is over: stdin closed, waiting for the exit
        self.ended = False
        self.timer: Optional[threading.Timer] = None
        self.continue_with: Optional[Tuple[Optional[str], str]] = None  # (interrupt id, message)


TurnT = TypeVar("TurnT", bound=LiveTurn)


class LiveHarness(Harness, Generic[TurnT]):
    live = True

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        # Our own lock for the turn state, shared with the reader thread. Not ``self.lock``: the core may hold
        # that one while it calls us (a steer waiting on codex), and the reader must never wait for the core.
        self._mu = threading.RLock()
        self._turn: Optional[TurnT] = None

    def _begin(self, turn: TurnT) -> None:
        """Make ``turn`` the running one; refused while another runs."""
        with self._mu:
            if self._turn is not None and not self._turn.ended:
                raise RuntimeError("a turn is already running")
            self._turn = turn
        self.emit("turn_started", {"turn": turn.id})

    def running(self) -> bool:
        with self._mu:
            return self._turn is not None and not self._turn.ended

    def close(self) -> None:
        with self._mu:
            turn = self._turn
        if turn is not None and turn.proc is not None and turn.proc.poll() is None:
            kill_group(turn.proc)
            try:
                turn.proc.wait(5)
            except Exception:
                pass

    def _emit_all(self, events: List[Event]) -> None:
        for name, payload in events:
            self.emit(name, payload)

    def _start_timer(self, turn: TurnT, seconds: float, action: Any) -> None:
        """Run ``action(turn)`` after ``seconds`` unless cancelled (``turn.timer``). Caller holds ``_mu``."""
        turn.timer = threading.Timer(seconds, action, [turn])
        turn.timer.daemon = True
        turn.timer.start()

    def _interrupt_timeout(self, turn: TurnT) -> None:
        """An interrupt the CLI did not confirm within its grace: kill its process group. The adapter's
        end-of-output handling then ends the turn as interrupted."""
        with self._mu:
            if turn.ended or turn.proc is None or not turn.interrupted:
                return
            proc = turn.proc
        self.emit(
            "log", {"level": "warning", "message": "%s did not confirm the interrupt: killing it" % self.name}
        )
        kill_group(proc)
