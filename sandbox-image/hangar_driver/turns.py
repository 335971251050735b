"""The turn runner: the harness adapter for this run, the turn commands the gateway sends (start_turn,
steer, withdraw, interrupt, answer, taint), and the events the adapter reports, put in the turn's context.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any, Callable, Dict, Optional, Set

from . import hardening, precleared
from .commands import CommandError, safe_name, str_field
from .config import Config
from .handback import HandbackWatcher
from .harness import Harness, NotLive, TurnConfig

log = logging.getLogger("hangar.driver")
_NUMBERED = re.compile(r"^(.*-)([0-9]{1,9})$")  # the operator names turns <session>-<n>

DECISIONS = ("allow", "deny", "allow_always")


class TurnRunner:
    """Owns the adapter and which turn runs. ``emit_raw`` puts an event in the outbox as it is."""

    def __init__(
        self,
        cfg: Config,
        watcher: HandbackWatcher,
        emit_raw: Callable[[str, Dict[str, Any]], None],
        stopping: threading.Event,
    ) -> None:
        self.cfg = cfg
        self.watcher = watcher
        self._emit_raw = emit_raw
        self.stopping = stopping
        self.tainted = False
        self.io_dir: Optional[str] = None  # the running turn's $HANGAR_IO
        self.turns_started: Set[str] = set()
        self.current_turn: Optional[str] = None  # the turn last started
        self.last_cfg: Optional[TurnConfig] = None  # and its configuration
        self.conversation: Optional[str] = None  # the conversation the adapter last reported
        self.closed = False  # close() was called: no CLI is pre-started any more
        self.harness: Optional[Harness] = None
        self.error: Optional[str] = None  # why there is no harness
        # The call Tower allowed while the session was suspended (precleared.py): allowed once, unasked.
        self.precleared: Optional[Dict[str, Any]] = None
        try:
            # Imported here: an adapter that cannot even be imported leaves the driver up to say why.
            from .adapters import make_harness

            self.harness = make_harness(cfg.harness, self.emit)
        except Exception as exc:
            self.error = "harness %s unavailable: %s: %s" % (cfg.harness, exc.__class__.__name__, exc)
            log.error("%s", self.error)

    @property
    def live(self) -> bool:
        return bool(self.harness is not None and self.harness.live)

    def running(self) -> bool:
        h = self.harness
        if h is None:
            return False
        with h.lock:
            return bool(h.running())

    def close(self) -> None:
        """Stop the CLI, if any (and the one pre-started; none is started after this)."""
        h = self.harness
        if h is not None:
            with h.lock:
                self.closed = True
                h.close()

    def emit(self, name: str, payload: Dict[str, Any]) -> None:
        """The adapters' emit: thread-safe, never raises. A turn's hand-back lines are read before its
        ``turn_ended`` goes out, so they come first."""
        try:
            if not isinstance(name, str) or not isinstance(payload, dict):
                raise TypeError("emit(%r, %r)" % (type(name), type(payload)))
            if name == "permission_request":
                # What the control plane's rules resolve paths against, as this sandbox sees them.
                payload = dict(payload)
                # When the CLI's prompt was read (this is the adapter's reader thread, right after the line):
                # where "the agent asked" is measured from. The sandbox's own clock: shown, never relied on.
                payload["asked_at"] = time.time()
                payload.setdefault("home", self.cfg.agent_home)
                if self.current_turn:
                    # The turn it belongs to, so the operator need not read the session to find it.
                    payload.setdefault("turn", self.current_turn)
                if self.io_dir:
                    payload.setdefault("io", self.io_dir)
                call = self.precleared
                if precleared.matches(call, self.current_turn, payload.get("tool"), payload.get("input")):
                    assert call is not None
                    self.precleared = None  # once
                    payload["precleared"] = {
                        "approval": call.get("approval"),
                        "tower": call.get("tower"),
                        "args_hash": call["args_hash"],
                    }
                    rid = str(payload.get("request_id") or "")
                    # Not on this (the adapter's reader) thread: the answer takes the harness lock.
                    threading.Thread(
                        target=self._allow_precleared, args=(rid,), name="hangar-precleared", daemon=True
                    ).start()
            if name in ("steer", "interrupted") and not payload.get("turn") and self.current_turn:
                # The adapter reports a steer's fate before the next turn can start: it is this turn's.
                payload = dict(payload)
                payload["turn"] = self.current_turn
            if name == "conversation" and isinstance(payload.get("id"), str):
                self.conversation = payload["id"]
            if name == "turn_ended":
                turn = payload.get("turn")
                if isinstance(turn, str):
                    try:
                        self.watcher.finish_turn(turn)
                    except Exception:
                        log.exception("reading the hand-back of turn %s", turn)
                    if turn == self.current_turn:
                        # Not on this (the adapter's reader) thread: starting a process takes a while.
                        threading.Thread(
                            target=self._prestart_next, args=(turn,), name="hangar-prestart", daemon=True
                        ).start()
        except Exception:
            log.exception("bad event from the adapter")
            return
        self._emit_raw(name, payload)

    def _prestart_next(self, ended: str) -> None:
        """Have the adapter start the next turn's CLI now (``live.py``, "Pre-started CLIs"), configured as
        that turn will most likely be: the next turn's name (``<session>-<n+1>``) and $HANGAR_IO, the same
        model, approvals, environment and argv, and the conversation just reported, not forked."""
        h = self.harness
        m = _NUMBERED.match(ended)
        prev = self.last_cfg
        if h is None or not getattr(h, "prestarts", False) or m is None or prev is None:
            return
        turn = "%s%d" % (m.group(1), int(m.group(2)) + 1)
        try:
            with h.lock:  # start_turn takes it too: the next turn waits for this start, then takes it
                if self.closed or self.stopping.is_set() or self.current_turn != ended:
                    return
                if turn in self.turns_started:
                    return
                if h.running():
                    return
                io_dir = os.path.join(self.cfg.state_dir, "io", turn)
                hardening.secure_dir(io_dir, self.cfg.agent_uid, self.cfg.agent_gid, 0o700)
                env = dict(prev.env)
                env["HANGAR_IO"] = io_dir
                cfg = TurnConfig(
                    turn_id=turn,
                    message="",
                    cwd=prev.cwd,
                    env=env,
                    argv_prefix=prev.argv_prefix,
                    model=prev.model,
                    conversation=self.conversation or prev.conversation,
                    fork=False,
                    approvals=prev.approvals,
                    tainted=self.tainted,
                    run_as=prev.run_as,
                    extra=prev.extra,
                    mcp_servers=prev.mcp_servers,
                )
                h.prestart(cfg)  # type: ignore[attr-defined]
        except Exception:
            log.exception("pre-starting the CLI of turn %s", turn)

    def _allow_precleared(self, request_id: str) -> None:
        h = self.harness
        if h is None:
            return
        try:
            with h.lock:
                h.answer(request_id, "allow", None)
        except Exception:
            log.exception("allowing the pre-cleared call %s", request_id)

    def need_harness(self) -> Harness:
        if self.harness is None:
            raise CommandError(self.error or "no harness")
        return self.harness

    # --------------------------------------------------------------- commands

    def _parse(self, h: Harness, body: Dict[str, Any]) -> Dict[str, Any]:
        """The fields of a ``start_turn`` or ``prepare_turn`` body, checked (its message aside): the same
        rules for both, so a CLI prepared for a turn is started exactly as the turn would start it."""
        turn = body.get("turn")
        if not safe_name(turn):
            raise CommandError("turn must be a name of letters, digits, '.', '_' and '-' (up to 128)")
        approvals = str_field(body, "approvals", required=False, limit=40) or "auto"
        if approvals != "auto" and hardening.HARDENING_ERROR is not None:
            raise CommandError(
                "approvals %s needs the driver hardened, and this sandbox's python3 could not "
                "make it non-dumpable (%s): use an image with python3 3.8 or later, with ctypes"
                % (approvals, hardening.HARDENING_ERROR)
            )
        if approvals != "auto" and not h.live:
            raise CommandError(
                "harness %s has no permission prompts: approvals %s needs a live harness"
                % (self.cfg.harness, approvals)
            )
        if turn in self.turns_started:
            raise CommandError("turn %s was already started" % turn)
        conversation = str_field(body, "conversation", required=False, limit=200)
        fork = body.get("fork", False)
        if not isinstance(fork, bool):
            raise CommandError("fork must be true or false")
        if fork and not conversation:
            raise CommandError("fork needs the conversation to fork")
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
        model = str_field(body, "model", required=False, limit=200)
        return {
            "turn": turn,
            "approvals": approvals,
            "conversation": conversation,
            "fork": fork,
            "env": env,
            "extra": extra,
            "argv": argv,
            "model": model,
        }

    def _config(self, f: Dict[str, Any], message: str) -> TurnConfig:
        """The turn's configuration from ``_parse``'s fields, its $HANGAR_IO made."""
        io_dir = os.path.join(self.cfg.state_dir, "io", f["turn"])
        hardening.secure_dir(io_dir, self.cfg.agent_uid, self.cfg.agent_gid, 0o700)
        env = dict(f["env"])
        env["HANGAR_IO"] = io_dir
        return TurnConfig(
            turn_id=f["turn"],
            message=message,
            cwd=self.cfg.workspace,
            env=env,
            argv_prefix=f["argv"],
            model=f["model"],
            conversation=f["conversation"],
            fork=f["fork"],
            approvals=f["approvals"],
            tainted=self.tainted,
            run_as=self.cfg.run_as,
            extra=f["extra"],
            mcp_servers=self.cfg.mcp_servers,
        )

    def start_turn(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self.need_harness()
        f = self._parse(h, body)
        turn = f["turn"]
        message = str_field(body, "message", limit=2 * 1024 * 1024)
        assert message is not None
        if self.stopping.is_set():
            # The pod is going away (SIGTERM, shutdown): the turn must run in the next sandbox, not die here.
            raise CommandError("the sandbox is shutting down: turn %s was not started" % turn)
        with h.lock:
            if h.running():
                raise CommandError("a turn is already running")
        if body.get("tainted"):
            self.tainted = True
        cfg = self._config(f, message)
        self.io_dir = cfg.env["HANGAR_IO"]
        self.turns_started.add(turn)
        self.current_turn = turn
        self.last_cfg = cfg
        self.watcher.start_turn(turn, self.io_dir)
        try:
            with h.lock:
                h.start_turn(cfg)
        except Exception:
            self.watcher.finish_turn(turn)
            raise
        return {"turn": turn, "io": self.io_dir}

    def prepare_turn(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """Pre-start the CLI of the turn the operator will start next, configured as ``start_turn`` with the
        same body (its message aside) would start it (``live.py``, "Pre-started CLIs"): for a sandbox's
        first turn, which no turn before pre-started. Nothing of it is a turn: no turn event, no turn started
        (one ``log`` line says it), and a ``start_turn`` whose configuration differs starts a fresh CLI. ``prestarted`` says whether a CLI
        now waits, ``why`` why not when none does."""
        h = self.need_harness()
        f = self._parse(h, body)
        if not getattr(h, "prestarts", False):
            return {"prestarted": False, "why": "harness %s does not pre-start its CLI" % self.cfg.harness}
        with h.lock:  # start_turn takes it too: a turn that follows waits for this start, then takes it
            if self.closed or self.stopping.is_set():
                return {"prestarted": False, "why": "the sandbox is shutting down"}
            if h.running():
                return {"prestarted": False, "why": "a turn is running"}
            cfg = self._config(f, "")
            cfg.tainted = cfg.tainted or bool(body.get("tainted"))
            ok = bool(h.prestart(cfg))  # type: ignore[attr-defined]
        if not ok:
            return {"prestarted": False, "why": "the CLI could not start"}
        # A line in the session's log, not a turn's event: when the CLI started to wait for its turn.
        self._emit_raw(
            "log",
            {"level": "debug", "message": "%s pre-started for turn %s" % (self.cfg.harness, f["turn"])},
        )
        return {"prestarted": True}

    def steer(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self.need_harness()
        steer_id = str_field(body, "steer_id", limit=200)
        message = str_field(body, "message", limit=2 * 1024 * 1024)
        turn = str_field(body, "turn", required=False, limit=200)
        assert steer_id is not None and message is not None
        if not h.live:
            raise CommandError(
                "harness %s cannot be steered: the message starts the next turn" % self.cfg.harness
            )
        with h.lock:
            ended = not h.running() or (turn is not None and turn != self.current_turn)
            if not ended:
                try:
                    h.steer(steer_id, message)
                except NotLive:
                    ended = True
        if ended:
            # The turn it was meant for ended before it arrived: it starts the next turn.
            self.emit(
                "steer",
                {
                    "steer_id": steer_id,
                    "status": "queued",
                    "turn": turn,
                    "reason": "the turn had ended before the steer reached the driver",
                },
            )
            return {"steer_id": steer_id, "status": "queued", "at": time.time()}
        return {"steer_id": steer_id, "at": time.time()}

    def withdraw(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self.need_harness()
        steer_id = str_field(body, "steer_id", limit=200)
        with h.lock:
            withdrawn = bool(h.withdraw(steer_id or ""))
        return {"steer_id": steer_id, "withdrawn": withdrawn}

    def interrupt(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self.need_harness()
        turn = str_field(body, "turn", required=False, limit=200)
        interrupt_id = str_field(body, "interrupt_id", required=False, limit=200)
        message = str_field(body, "message", required=False, limit=2 * 1024 * 1024)
        with h.lock:
            if not h.running() or (turn is not None and turn != self.current_turn):
                return {"running": False, "continues": False, "interrupt_id": interrupt_id}
            continues = bool(message) and h.live
            if continues:
                h.interrupt(message=message, interrupt_id=interrupt_id)
            else:
                h.interrupt()
        return {"running": True, "continues": continues, "interrupt_id": interrupt_id}

    def answer(self, body: Dict[str, Any]) -> Dict[str, Any]:
        h = self.need_harness()
        request_id = str_field(body, "request_id", limit=200)
        decision = body.get("decision")
        if decision not in DECISIONS:
            raise CommandError("decision must be one of %s" % ", ".join(DECISIONS))
        message = str_field(body, "message", required=False, limit=64 * 1024)
        assert request_id is not None
        try:
            with h.lock:
                h.answer(request_id, decision, message)
        except NotLive:
            raise CommandError("harness %s takes no permission answers now" % self.cfg.harness) from None
        return {"request_id": request_id, "decision": decision}

    def taint(self, body: Dict[str, Any]) -> Dict[str, Any]:
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
