"""The shared base of the live adapters (Claude Code, Codex): one CLI process per turn, whose state the
adapter's reader threads and the core's calls share under the adapter's own lock.

Standard library only, Python 3.8+.

Pre-started CLIs
----------------
Starting the CLI is most of a short turn (Claude Code: ~0.45 s of node start-up before its first model
request). So once a turn has ended the core calls ``prestart`` with the next turn's configuration as it will
most likely be (the same model, approvals, environment and argv, ``--resume`` of the conversation just
reported, the next turn's name and $HANGAR_IO), and the adapter starts that CLI at once; it waits for its
first message on stdin. A sandbox's first turn has no turn before it: the operator, once the driver is
connected (a warm pool's sandbox: once adopted by its session) and no turn is queued, sends ``prepare_turn``
with what its ``start_turn`` will carry but the message (``TurnRunner.prepare_turn``), and the adapter
starts that CLI alike. ``start_turn`` uses it only when the argv, the environment, the working directory,
the uid and the CLI's settings files (``_fingerprint``) are exactly what a fresh start would have, the
process still runs (not dying either: ``process.exiting``) and is younger than WARM_MAX_AGE; anything else
is killed and a fresh process started, so a turn never runs in a stale one (one that dies after the turn
took it, before it printed a word for the turn, is replaced once: ``_warm_died``); one no turn took is
stopped at WARM_MAX_AGE, and ``close`` (shutdown, the pod's end) stops it. Its output is not read before its
turn starts, so nothing of it shows before ``turn_started``. The pre-started process is new (it shares nothing with the turn before, allow_always
grants included: those die with their process), exactly as a process started at the turn.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Generic, List, Optional, Tuple, TypeVar

from .harness import Emit, Event, Harness, TurnConfig
from .process import LineReader, StdinWriter, exiting, kill_group, spawn_agent, stop, wait_or_kill

DECISIONS = ("allow", "allow_always", "deny")
EXIT_GRACE = 10.0  # seconds the CLI gets to exit once its stdin is closed
# A pre-started CLI older than this is not used (what it read at start-up, the date say, may be stale).
WARM_MAX_AGE = 600.0

WarmKey = Tuple[Any, ...]


class Warm:
    """A CLI started for the next turn, waiting for its first message."""

    def __init__(self, proc: Any, key: WarmKey) -> None:
        self.proc = proc
        self.key = key
        self.started = time.monotonic()
        self.expiry: Optional[threading.Timer] = None  # stops it at WARM_MAX_AGE if no turn took it


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
        self.warm = False  # its CLI was pre-started, and has printed nothing since the turn took it


TurnT = TypeVar("TurnT", bound=LiveTurn)


class LiveHarness(Harness, Generic[TurnT]):
    live = True

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        # Our own lock for the turn state, shared with the reader thread. Not ``self.lock``: the core may hold
        # that one while it calls us (a steer waiting on codex), and the reader must never wait for the core.
        self._mu = threading.RLock()
        self._turn: Optional[TurnT] = None
        self._usage: Dict[str, int] = {}  # totals of the turns that ended
        self._warm: Optional[Warm] = None  # the next turn's CLI, pre-started (see the module docstring)
        self._warm_lock = threading.Lock()  # held while one is started or taken

    # -- pre-started CLIs ------------------------------------------------------------------------------------

    prestarts = False  # the adapter's CLI waits for its first message, so it can be started ahead

    def _command(self, cfg: TurnConfig) -> Tuple[List[str], Dict[str, str]]:
        """The CLI's argv for a turn with ``cfg``, and what it adds to ``cfg.env`` (adapters that prestart)."""
        raise NotImplementedError

    def _fingerprint(self, cfg: TurnConfig) -> Tuple[Any, ...]:
        """What else the CLI reads once at start-up that a turn could change (its settings files)."""
        return ()

    def _key(self, argv: List[str], extra_env: Dict[str, str], cfg: TurnConfig) -> WarmKey:
        env = dict(cfg.env)
        env.update(extra_env)
        run_as = tuple(sorted((cfg.run_as or {}).items()))
        return (tuple(argv), tuple(sorted(env.items())), cfg.cwd, run_as, self._fingerprint(cfg))

    def prestart(self, cfg: TurnConfig) -> bool:
        """Start the CLI of the turn ``cfg`` describes (its message unused), to wait for that turn. A CLI
        pre-started before is stopped first. False when this adapter does not prestart or it cannot start."""
        if not self.prestarts:
            return False
        argv, extra_env = self._command(cfg)
        with self._warm_lock:
            self._drop_warm()
            try:
                proc = spawn_agent(argv, cfg, extra_env)
            except OSError as e:
                self.emit("log", {"level": "debug", "message": "cannot pre-start %s: %s" % (argv[0], e)})
                return False
            warm = Warm(proc, self._key(argv, extra_env, cfg))
            # Not left waiting past the age at which no turn would take it (nor hold its memory that long).
            warm.expiry = threading.Timer(WARM_MAX_AGE, self._expire_warm, [warm])
            warm.expiry.daemon = True
            warm.expiry.start()
            self._warm = warm
        return True

    def _expire_warm(self, warm: Warm) -> None:
        with self._warm_lock:
            if self._warm is warm:
                self._drop_warm()

    def _drop_warm(self) -> None:
        """Stop the pre-started CLI, if any (caller holds ``_warm_lock``)."""
        warm, self._warm = self._warm, None
        if warm is not None:
            if warm.expiry is not None:
                warm.expiry.cancel()
            stop(warm.proc)

    def _take_warm(self, argv: List[str], extra_env: Dict[str, str], cfg: TurnConfig) -> Any:
        """The pre-started CLI when it is exactly what this turn would start, else None (and it is stopped)."""
        with self._warm_lock:
            warm, self._warm = self._warm, None
        if warm is None:
            return None
        if warm.expiry is not None:
            warm.expiry.cancel()
        why = []
        if exiting(warm.proc):
            code = warm.proc.returncode
            why.append("it had exited (%s)" % code if code is not None else "it was exiting")
        elif time.monotonic() - warm.started > WARM_MAX_AGE:
            why.append("it was older than %d s" % WARM_MAX_AGE)
        else:
            key = self._key(argv, extra_env, cfg)
            names = ("the command line", "the environment", "the working directory", "the uid", "settings")
            why += [n for n, a, b in zip(names, warm.key, key) if a != b]
        if not why:
            return warm.proc
        stop(warm.proc)
        self.emit(
            "log",
            {
                "level": "info",
                "message": "%s pre-started for this turn not used (%s differed): started anew"
                % (self.name, ", ".join(why)),
            },
        )
        return None

    # -- turns -----------------------------------------------------------------------------------------------

    def _begin(self, turn: TurnT, prestarted: bool = False) -> None:
        """Make ``turn`` the running one; refused while another runs."""
        with self._mu:
            if self._turn is not None and not self._turn.ended:
                raise RuntimeError("a turn is already running")
            self._turn = turn
        payload: Dict[str, Any] = {"turn": turn.id}
        if prestarted:
            payload["prestarted"] = True  # its CLI was started before the turn, and waited for it
        self.emit("turn_started", payload)

    def _spawn(self, turn: TurnT, argv: List[str], extra_env: Dict[str, str], proc: Any = None) -> bool:
        """Start the turn's CLI (or take ``proc``, pre-started for it) and read its output (``_on_message``,
        ``_on_eof``); False when it cannot start (the turn has then ended failed, 127)."""
        warm = proc is not None
        if proc is None:
            try:
                proc = spawn_agent(argv, turn.cfg, extra_env)
            except OSError as e:
                self._end(turn, "failed", 127, "cannot start %s: %s" % (argv[0], e))
                return False
        with self._mu:  # held until the first writes: the reader's callbacks see a set-up turn
            turn.warm = warm
            turn.proc = proc
            turn.writer = StdinWriter(proc)
            self._attach(turn)
            turn.reader = LineReader(
                proc,
                self.name,
                lambda obj: self._heard(turn, obj),
                lambda: self._on_eof(turn),
                lambda line: self.emit(
                    "log", {"level": "debug", "message": "%s: %s" % (self.name, line[:500])}
                ),
            )
            turn.reader.start()
            self._started(turn)
        return True

    def _heard(self, turn: TurnT, obj: Dict[str, Any]) -> None:
        turn.warm = False  # the CLI took the turn: from here, its end is the turn's
        self._on_message(turn, obj)

    def _warm_died(self, turn: TurnT, code: int) -> bool:
        """A pre-started CLI that exited before it printed anything for the turn (killed, out of memory, in
        the moment between ``_take_warm``'s check and the turn's first write) did not run the turn: start
        it on a fresh CLI instead of failing it. True when it was started again."""
        with self._mu:
            if not turn.warm or turn.interrupted or turn.ended:
                return False
            turn.warm = False
        self.emit(
            "log",
            {
                "level": "info",
                "message": "%s pre-started for this turn exited (%s) before it took the turn: started anew"
                % (self.name, code),
            },
        )
        argv, extra_env = self._command(turn.cfg)
        self._spawn(turn, argv, extra_env)
        return True

    def _attach(self, turn: TurnT) -> None:
        """What the adapter sets up on the turn before its output is read (caller holds ``_mu``)."""

    def _started(self, turn: TurnT) -> None:
        """What the adapter writes once its output is read (caller holds ``_mu``)."""

    def _on_message(self, turn: TurnT, obj: Dict[str, Any]) -> None:
        raise NotImplementedError

    def _on_eof(self, turn: TurnT) -> None:
        raise NotImplementedError

    def _reap(self, turn: TurnT) -> int:
        """The CLI's stdout is closed: wait for its exit (killed after EXIT_GRACE) and the rest of its stderr."""
        proc = turn.proc
        code = wait_or_kill(proc, EXIT_GRACE) if proc is not None else -1
        if turn.reader is not None:
            turn.reader.join_stderr()
        return code

    def _after_message(self, turn: TurnT, events: List[Event], finish: bool) -> None:
        self._emit_all(events)
        if finish and turn.writer is not None:
            turn.writer.close()  # the CLI exits; _on_eof ends the turn

    def _mark_interrupted(self, message: Optional[str], interrupt_id: Optional[str]) -> Optional[TurnT]:
        """The running turn, now marked interrupted (with the message to go on with); None when there is
        nothing to interrupt. Caller holds ``_mu``."""
        turn = self._turn
        if turn is None or turn.ended or turn.finishing or turn.interrupted:
            return None
        turn.interrupted = True
        if message:
            turn.continue_with = (interrupt_id, message)
        return turn

    def answer(self, request_id: str, decision: str, message: Optional[str] = None) -> None:
        if decision not in DECISIONS:
            raise ValueError("decision must be allow, deny or allow_always, not %r" % decision)
        with self._mu:
            turn = self._turn
            req = turn.pending.pop(request_id, None) if turn is not None else None
            if turn is None or req is None or turn.writer is None:
                self.emit(
                    "log", {"level": "warning", "message": "no open permission request %s" % request_id}
                )
                return
            then = self._reply(turn, turn.writer, request_id, req, decision, message)
        if then is not None:
            then()

    def _reply(
        self,
        turn: TurnT,
        writer: StdinWriter,
        request_id: str,
        req: Dict[str, Any],
        decision: str,
        message: Optional[str],
    ) -> Optional[Callable[[], None]]:
        """Write the CLI's answer to the permission request; what to do once ``_mu`` is released, if
        anything. Caller holds ``_mu``."""
        raise NotImplementedError

    def _end(
        self, turn: TurnT, outcome: str, exit_status: int, error: Optional[str], summary: str = ""
    ) -> None:
        """End the turn once: settle what it leaves open (steers, permission prompts, the adapter's own), add
        its usage to the totals and report ``turn_ended``."""
        events: List[Event] = []
        with self._mu:
            if turn.ended:
                return
            turn.ended = True
            turn.finishing = True
            if turn.timer is not None:
                turn.timer.cancel()
            self._settle_steers(turn, events)
            for rid in list(turn.pending):
                events.append(("permission_cancelled", {"request_id": rid}))
            turn.pending = {}
            turn_usage, turn_cost = self._settle_turn(turn, events)
            for k, v in turn_usage.items():
                self._usage[k] = self._usage.get(k, 0) + v
        events.append(
            (
                "turn_ended",
                {
                    "turn": turn.id,
                    "outcome": outcome,
                    "exit_status": exit_status,
                    "summary": summary,
                    "error": error,
                    "usage": turn_usage,
                    "cost_usd": turn_cost,
                },
            )
        )
        self._emit_all(events)

    def _settle_steers(self, turn: TurnT, events: List[Event]) -> None:
        """Report each steer the ending turn did not take in (caller holds ``_mu``)."""
        raise NotImplementedError

    def _settle_turn(self, turn: TurnT, events: List[Event]) -> Tuple[Dict[str, int], Optional[float]]:
        """Close what else the ending turn leaves open; its usage and cost (caller holds ``_mu``)."""
        raise NotImplementedError

    def running(self) -> bool:
        with self._mu:
            return self._turn is not None and not self._turn.ended

    def close(self) -> None:
        with self._mu:
            turn = self._turn
            if turn is not None:
                turn.warm = False  # stopped by us: its exit is the turn's end, not a CLI to replace
        if turn is not None:
            stop(turn.proc)
        with self._warm_lock:
            self._drop_warm()

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
