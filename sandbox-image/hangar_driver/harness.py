"""The contract between the driver core and one harness adapter (Claude Code, Codex, one-shot).

Standard library only, Python 3.8+: this runs on the environment image's own python3.

An adapter owns the agent CLI process for one sandbox run. The driver core calls it from its own threads;
the adapter reports everything that happens through ``emit`` (thread-safe, never blocks for long) and asks
for permission decisions through ``emit("permission_request", ...)``; the decision comes back through
``answer``. The core serialises calls into one adapter with a lock, so an adapter need not be re-entrant,
but ``emit`` may be called from the adapter's reader thread at any time. That lock is ``Harness.lock``, the
core's: it is held for the whole call, also while ``start_turn`` or ``steer`` waits for the CLI's answer, so
the adapter's own threads (the CLI's readers) must never take it; they keep the turn state under a lock of
their own. Otherwise the reader blocks on a notification while the answer waits behind it in the pipe (codex
``thread/start`` timed out in 60 s that way).

Events (name, payload) an adapter emits:

- ``turn_started``   {"turn": id}
- ``conversation``   {"id": str}   Claude session_id / Codex thread id, for --resume / thread/resume (a forked
                     conversation's new id)
- ``text``           {"text": str}                      assistant text (whole blocks, not deltas)
- ``tool_use``       {"tool": str, "input": dict, "id": str}
- ``tool_result``    {"id": str, "is_error": bool, "output": str (first 4000 chars)}
- ``permission_request`` {"request_id": str, "tool": str, "input": dict, "command": str | None,
                          "cwd": str | None, "suggestions": list}   the CLI waits until ``answer``; the
                          turn runner adds ``asked_at`` (Unix seconds: when the prompt was read)
- ``permission_cancelled`` {"request_id": str}          the CLI withdrew its own request (interrupt)
- ``steer``          {"steer_id": str, "status": "delivered" | "queued", "written_at"?: float}   exactly once
                     per steer accepted by ``steer`` (cancelled ones excepted, see ``withdraw``); ``written_at``
                     (Unix seconds): when the adapter wrote it to the CLI
- ``interrupted``    {"turn": id, "interrupt_id": str | None, "continued": True}   an interrupt with a message
                     was confirmed by the CLI and the same turn goes on with the message (without a message,
                     or when the CLI can't go on, the confirmation is ``turn_ended`` outcome ``interrupted``)
- ``usage``          {"input_tokens": int, "output_tokens": int, "cost_usd": float | None}   cumulative
- ``turn_ended``     {"turn": id, "outcome": "completed" | "failed" | "interrupted",
                      "exit_status": int, "summary": str, "error": str | None,
                      "usage": {...}, "cost_usd": float | None}
- ``log``            {"level": str, "message": str}     anything worth showing in the activity stream
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .commands import NotLive

__all__ = ["Emit", "Event", "Harness", "NotLive", "TurnConfig"]

Emit = Callable[[str, Dict[str, Any]], None]
Event = Tuple[str, Dict[str, Any]]  # (name, payload), as given to ``emit``


class TurnConfig:
    """What a turn needs to start the CLI. Built by the driver core from the start_turn command."""

    def __init__(
        self,
        turn_id: str,
        message: str,
        cwd: str,
        env: Dict[str, str],
        argv_prefix: Optional[List[str]] = None,
        model: Optional[str] = None,
        conversation: Optional[str] = None,
        approvals: str = "auto",
        tainted: bool = False,
        run_as: Optional[Dict[str, int]] = None,
        extra: Optional[Dict[str, Any]] = None,
        fork: bool = False,
        mcp_servers: Optional[Dict[str, Dict[str, Any]]] = None,
    ) -> None:
        self.turn_id = turn_id
        self.message = message
        self.cwd = cwd
        # The agent's environment: scrubbed by the core, never holds the run key or any hangar credential.
        self.env = env
        # How to launch the CLI (e.g. ["claude"] or ["/opt/clis/node_modules/.bin/codex"]).
        self.argv_prefix = argv_prefix
        self.model = model
        # The conversation to continue (Claude session id, Codex thread id), None for a new one.
        self.conversation = conversation
        # Continue ``conversation`` as a new one (a session fork): the CLI copies it and leaves it as it was.
        self.fork = fork
        # "auto" runs with the CLI's permission checks off; anything else asks over stdio.
        self.approvals = approvals
        self.tainted = tainted
        # {"uid": n, "gid": n}: the agent's uid, different from the driver's. None: same uid (tests only).
        self.run_as = run_as
        self.extra = extra or {}
        # The Environment's MCP servers (``mcp.load``): name -> {"command": [...]} or {"url": ...}.
        self.mcp_servers = mcp_servers or {}


class Harness:
    """Base class: one adapter instance per sandbox run, reused across turns."""

    name = "base"
    live = False  # True when steer/interrupt/permission prompts work mid-turn

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.lock = threading.RLock()  # the core's (see the module docstring): never taken by reader threads

    def start_turn(self, cfg: TurnConfig) -> None:
        """Start a turn. Returns once the CLI has the message; the turn's end comes as ``turn_ended``."""
        raise NotImplementedError

    def steer(self, steer_id: str, message: str) -> None:
        """Add a message to the running turn. Raises NotLive if this harness cannot.

        The adapter reports the steer's fate with exactly one ``steer`` event: ``delivered`` once the CLI
        has it inside the running turn, ``queued`` when the turn ended first (the core then starts the next
        turn with it). Until one of those is emitted the steer may be withdrawn.
        """
        raise NotLive(self.name)

    def withdraw(self, steer_id: str) -> bool:
        """Take back a steer not yet handed to the CLI. True: withdrawn (no ``steer`` event will follow).
        False: too late, it was (or is being) delivered or queued."""
        return False

    def interrupt(self, message: Optional[str] = None, interrupt_id: Optional[str] = None) -> None:
        """Stop the running turn. Without ``message`` the turn ends with ``turn_ended`` outcome ``interrupted``
        (exit 130). With one, a live adapter has the CLI stop what it is doing and go on with the message in
        the same turn and conversation, and reports ``interrupted`` (continued) once the CLI confirmed; an
        adapter that can't ends the turn as without one (the core then starts the next turn with it)."""
        raise NotImplementedError

    def answer(self, request_id: str, decision: str, message: Optional[str] = None) -> None:
        """Answer a ``permission_request``: decision is ``allow``, ``deny`` or ``allow_always``."""
        raise NotLive(self.name)

    def running(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the CLI process, if any."""
