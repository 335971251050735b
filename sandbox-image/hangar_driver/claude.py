"""Claude Code live adapter: ``claude -p`` with stream-json on stdin and stdout.

Standard library only, Python 3.8+.

One CLI process per turn
------------------------
Each turn runs its own ``claude -p --input-format stream-json --output-format stream-json --verbose
--permission-prompt-tool stdio`` process; ``--resume <session>`` carries the conversation from turn to turn
(with ``--fork-session`` when the turn forks it: the CLI reports the new session id).
Why not one long-lived process:

* A steer that loses the race with its tool (the tool finished just as the line was written) is run by the CLI
  as a follow-on turn of its own. With a process per turn the hangar turn simply lasts until the CLI has
  nothing left: stdin is closed only when every written steer has been taken in, and the process exit ends the
  turn. Nothing the CLI does after "our" result can leak into the next hangar turn or be lost.
* An interrupt ends the turn for sure: ``interrupt`` with ``cancel_queued`` (so steers the CLI has read but
  not taken in do not start a follow-on turn), and if the CLI does not end the turn within INTERRUPT_GRACE
  seconds its process group is killed. Either way the next turn starts from a fresh process and the saved
  session.
* ``allow_always`` lives in the turn and dies with it: the adapter's own grants for shell commands and file
  edits (``claude_grants.py``), the CLI's session rules (destination ``session``, kept in the process) for
  other tools. Nothing is written to settings files and the next turn asks again, as hangar promises.
* Each turn takes its own cwd, env, model, approvals and uid from its TurnConfig.
The CLI start-up (~0.5 s) is paid before the turn: once a turn ends, the next turn's process is started and
waits for its first message (``live.py``, "Pre-started CLIs"); a turn whose configuration differs starts a
fresh one.

Steers
------
Claude reads a user line written mid-turn inside the next tool result while a tool runs; otherwise the CLI
queues it as a turn of its own. So the adapter writes a steer only while a tool is in flight (a ``tool_use``
without its ``tool_result``) and holds it while text streams; held steers are written as soon as the next tool
call appears. Every line carries our own ``uuid``, and the CLI reports each one's fate as
``command_lifecycle`` frames (``queued`` -> ``started`` -> ``completed``, or ``cancelled``):

* ``started`` before the running CLI turn's ``result``: taken into the running turn -> ``delivered``.
* ``started`` after that ``result`` (the race: the tool ended as we wrote): the CLI runs it as a follow-on
  turn; the hangar turn goes on until that one ends too, so the agent answers it in this turn and no output is
  lost -> ``delivered`` as well, plus a ``log`` saying it ran as a follow-on turn.
* ``cancelled`` (an interrupt came first), or never taken in: ``queued`` (the core starts the next turn).
* Held steers still held when the turn ends: ``queued``. ``withdraw`` succeeds for held steers only.

Interrupt: ``control_request`` ``interrupt`` (``cancel_queued``); the CLI confirms with a
``control_response``, withdraws its open permission prompts with ``control_cancel_request``
(-> ``permission_cancelled``) and ends the turn with an ``error_during_execution`` result. The turn ends
``interrupted``, exit status 130 (also when the CLI had just finished on its own: the interrupt was asked for
before the end was seen).

Interrupt with a message: the same, but once the CLI has ended its turn (the interrupt's result) the message
is written as the next user line to the same process, which takes it in: the hangar turn and the conversation
go on with it, and ``interrupted`` (continued) reports the confirmation. The interrupted result is not counted
as the turn's failure. If the CLI had already finished (nothing to interrupt), the turn ends as usual and the
core starts the next turn with the message.

The Environment's MCP servers (``TurnConfig.mcp_servers``) go in with ``--mcp-config`` and
``--strict-mcp-config`` (``mcp.py``); their tools are ``mcp__<server>__<tool>`` and ask like any other tool.

``TurnConfig.extra["claude_args"]``: more command-line arguments. Approvals ``auto`` runs with
``--permission-mode bypassPermissions`` and ``IS_SANDBOX=1`` added to the environment (the CLI refuses that
mode as root otherwise); any other policy leaves the CLI's checks on, adds ask rules for every shell command
and file edit (``--settings``, merged with the Environment's own: ``claude_grants.py``) and its prompts come
here.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Dict, List, Optional, Tuple

from .claude_grants import ASK_TOOLS
from .claude_turn import (
    QUIET_ENV,
    ClaudeTurn,
    live_command,
    session_permissions,
    settings_fingerprint,
    user_line,
    zero_usage,
)
from .harness import Emit, Event, NotLive, TurnConfig
from .live import LiveHarness
from .process import StdinWriter, exit_status, kill_group

__all__ = ["QUIET_ENV", "ClaudeHarness", "live_command"]

INTERRUPT_GRACE = 10.0  # seconds the CLI gets to end an interrupted turn before its process group is killed
# After a result, seconds the CLI gets to take in a steer it has been written (it starts a follow-on turn at
# once, in ~50 ms); past that the process is killed and the steer reported queued.
FOLLOW_ON_GRACE = 30.0
DEFAULT_DENY_MESSAGE = "The user denied this tool call."


class ClaudeHarness(LiveHarness[ClaudeTurn]):
    name = "claude"

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        self._ids = itertools.count(1)
        self._usage = zero_usage()  # totals of the turns that ended
        self._cost = 0.0
        self._have_cost = False

    # -- the contract ----------------------------------------------------------------------------------------

    prestarts = True  # claude -p reads its first message from stdin: it can start before the turn

    def _command(self, cfg: TurnConfig) -> Tuple[List[str], Dict[str, str]]:
        return live_command(cfg)

    def _fingerprint(self, cfg: TurnConfig) -> Tuple[Any, ...]:
        return settings_fingerprint(cfg)

    def start_turn(self, cfg: TurnConfig) -> None:
        turn = ClaudeTurn(cfg)
        argv, extra_env = live_command(cfg)
        proc = self._take_warm(argv, extra_env, cfg)
        self._begin(turn, prestarted=proc is not None)
        self._spawn(turn, argv, extra_env, proc)

    def _started(self, turn: ClaudeTurn) -> None:
        turn.cli_busy = True
        assert turn.writer is not None
        turn.writer.write(user_line(turn.cfg.message, turn.message_uuid))

    def steer(self, steer_id: str, message: str) -> None:
        events: List[Event] = []
        with self._mu:
            turn = self._turn
            if turn is None or turn.ended:
                raise NotLive("no turn running")
            if turn.finishing:
                events.append(("steer", {"steer_id": steer_id, "status": "queued"}))
            elif turn.open_tools and not turn.interrupted:
                turn.write_steer(steer_id, message)
            else:
                turn.held.append((steer_id, message))
        self._emit_all(events)

    def withdraw(self, steer_id: str) -> bool:
        with self._mu:
            turn = self._turn
            if turn is None:
                return False
            for i, (sid, _text) in enumerate(turn.held):
                if sid == steer_id:
                    del turn.held[i]
                    return True
            return False

    def interrupt(self, message: Optional[str] = None, interrupt_id: Optional[str] = None) -> None:
        with self._mu:
            turn = self._mark_interrupted(message, interrupt_id)
            if turn is None:
                return
            request_id = "hangar_interrupt_%d" % next(self._ids)
            turn.interrupt_request_id = request_id
            ok = turn.writer is not None and turn.writer.write(
                {
                    "type": "control_request",
                    "request_id": request_id,
                    # cancel_queued: steers read but not taken in must not start a follow-on turn.
                    "request": {"subtype": "interrupt", "cancel_queued": True},
                }
            )
            self._start_timer(turn, INTERRUPT_GRACE, self._interrupt_timeout)
        if not ok:
            self._interrupt_timeout(turn)

    def _reply(
        self,
        turn: ClaudeTurn,
        writer: StdinWriter,
        request_id: str,
        req: Dict[str, Any],
        decision: str,
        message: Optional[str],
    ) -> None:
        tool_input = req.get("input") or {}
        if decision == "allow":
            response: Dict[str, Any] = {"behavior": "allow", "updatedInput": tool_input}
        elif decision == "allow_always" and req.get("tool") in ASK_TOOLS:
            # The ask rule outranks a session allow rule: the turn remembers the grant (claude_grants.py).
            turn.grants.add(str(req.get("tool")), tool_input if isinstance(tool_input, dict) else {})
            response = {"behavior": "allow", "updatedInput": tool_input}
        elif decision == "allow_always":
            response = {
                "behavior": "allow",
                "updatedInput": tool_input,
                "updatedPermissions": session_permissions(req),
            }
        else:
            response = {"behavior": "deny", "message": message or DEFAULT_DENY_MESSAGE}
        writer.write(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": response},
            }
        )
        return None

    # -- helpers ---------------------------------------------------------------------------------------------

    def _totals(self, turn: Optional[ClaudeTurn]) -> Tuple[Dict[str, int], Optional[float]]:
        usage = dict(self._usage)
        cost = self._cost if self._have_cost else None
        if turn is not None:
            for k, v in turn.usage.items():
                usage[k] = usage.get(k, 0) + v
            if turn.cost is not None:
                cost = (cost or 0.0) + turn.cost
        return usage, cost

    # -- reading the CLI -------------------------------------------------------------------------------------

    def _on_message(self, turn: ClaudeTurn, obj: Dict[str, Any]) -> None:
        events: List[Event] = []
        finish = False
        with self._mu:
            kind = obj.get("type")
            if kind == "assistant":
                turn.on_assistant(obj, events)
            elif kind == "user":
                turn.on_user(obj, events)
            elif kind == "command_lifecycle":
                turn.on_lifecycle(obj, events)
            elif kind == "control_request":
                turn.on_control_request(obj, events)
            elif kind == "control_cancel_request":
                rid = str(obj.get("request_id"))
                if turn.pending.pop(rid, None) is not None:
                    events.append(("permission_cancelled", {"request_id": rid}))
            elif kind == "control_response":
                resp = obj.get("response") or {}
                if resp.get("request_id") == turn.interrupt_request_id and turn.interrupt_request_id:
                    detail = resp.get("response") or {}
                    events.append(
                        (
                            "log",
                            {
                                "level": "info",
                                "message": "claude confirmed the interrupt (%s)"
                                % (resp.get("subtype") or "?")
                                + (": cancelled %d queued message(s)" % len(detail.get("cancelled") or [])),
                            },
                        )
                    )
            elif kind == "system":
                sid = obj.get("session_id")
                if obj.get("subtype") == "init" and sid and sid != turn.session_id:
                    turn.session_id = sid
                    events.append(("conversation", {"id": sid}))
            elif kind == "result":
                finish = self._on_result(turn, obj, events)
        self._after_message(turn, events, finish)

    def _on_result(self, turn: ClaudeTurn, obj: Dict[str, Any], events: List[Event]) -> bool:
        """Record a result; True when the turn is over (nothing written is still waiting to be taken in)."""
        turn.results.append(obj)
        turn.cli_busy = False
        model_usage = obj.get("modelUsage")
        if isinstance(model_usage, dict) and model_usage:
            # Cumulative for the process: sum over models.
            usage = zero_usage()
            for m in model_usage.values():
                if isinstance(m, dict):
                    usage["input_tokens"] += int(m.get("inputTokens") or 0)
                    usage["output_tokens"] += int(m.get("outputTokens") or 0)
                    usage["cache_read_input_tokens"] += int(m.get("cacheReadInputTokens") or 0)
                    usage["cache_creation_input_tokens"] += int(m.get("cacheCreationInputTokens") or 0)
            turn.usage = usage
        elif isinstance(obj.get("usage"), dict):
            u = obj["usage"]
            for k in turn.usage:
                turn.usage[k] += int(u.get(k) or 0)
        if obj.get("total_cost_usd") is not None:
            turn.cost = float(obj["total_cost_usd"])  # cumulative for the process
        usage, cost = self._totals(turn)
        payload: Dict[str, Any] = dict(usage)
        payload["cost_usd"] = cost
        events.append(("usage", payload))
        if turn.interrupted and turn.continue_with is not None and not turn.finishing:
            self._continue_after_interrupt(turn, obj, events)
            return False
        if turn.written and not turn.interrupted:
            # A steer lost the race with its tool: the CLI takes it in as a follow-on turn. Keep going.
            if turn.timer is None:
                self._start_timer(turn, FOLLOW_ON_GRACE, self._follow_on_timeout)
            return False
        turn.finishing = True
        return True

    def _on_eof(self, turn: ClaudeTurn) -> None:
        code = self._reap(turn)
        if self._warm_died(turn, code):
            return
        with self._mu:
            if turn.timer is not None:
                turn.timer.cancel()
            results = list(turn.results)
            interrupted = turn.interrupted
        texts = [str(r["result"]) for r in results if isinstance(r.get("result"), str) and r.get("result")]
        summary = "\n\n".join(texts)
        if interrupted:
            self._end(turn, "interrupted", 130, None, summary)
            return
        errors = [r for r in results if r.get("is_error") or r.get("subtype") not in (None, "success")]
        if not results:
            stderr = turn.reader.stderr_text() if turn.reader is not None else ""
            self._end(
                turn, "failed", code or 1, "claude exited (%s) without a result: %s" % (code, stderr[-2000:])
            )
        elif errors:
            last = errors[-1]
            detail = (
                last.get("result")
                or "; ".join(str(e) for e in (last.get("errors") or []))
                or last.get("subtype")
            )
            self._end(turn, "failed", exit_status(code, True), "claude: %s" % detail, summary)
        else:
            self._end(turn, "completed", exit_status(code), None, summary)

    def _follow_on_timeout(self, turn: ClaudeTurn) -> None:
        with self._mu:
            if turn.ended or turn.proc is None or not turn.written or turn.interrupted:
                return
            proc = turn.proc
            turn.warm = False  # stopped by us: its exit is the turn's end
        self.emit(
            "log", {"level": "warning", "message": "claude did not take in a written steer: stopping it"}
        )
        kill_group(proc)

    def _continue_after_interrupt(
        self, turn: ClaudeTurn, result: Dict[str, Any], events: List[Event]
    ) -> None:
        """The CLI ended its turn for the interrupt: hand it the interrupt's message in the same process."""
        interrupt_id, text = turn.continue_with or (None, "")
        turn.continue_with = None
        turn.interrupted = False
        turn.interrupt_request_id = None
        if turn.timer is not None:
            turn.timer.cancel()
            turn.timer = None
        if result.get("subtype") != "success" and turn.results and turn.results[-1] is result:
            turn.results.pop()  # error_during_execution: what we asked for, not the turn's failure
        turn.message_uuid = str(uuid.uuid4())
        turn.cli_busy = True
        if turn.writer is None or not turn.writer.write(user_line(text, turn.message_uuid)):
            # The CLI is gone: the turn ends as interrupted and the core starts the next turn with it.
            turn.interrupted = True
            return
        events.append(("interrupted", {"turn": turn.id, "interrupt_id": interrupt_id, "continued": True}))

    def _settle_steers(self, turn: ClaudeTurn, events: List[Event]) -> None:
        for sid, _text in turn.held:
            events.append(("steer", {"steer_id": sid, "status": "queued"}))
        turn.held = []
        for sid in turn.written.values():
            events.append(("steer", {"steer_id": sid, "status": "queued"}))
        turn.written = {}

    def _settle_turn(self, turn: ClaudeTurn, events: List[Event]) -> Tuple[Dict[str, int], Optional[float]]:
        if turn.cost is not None:
            self._cost += turn.cost
            self._have_cost = True
        return dict(turn.usage), turn.cost
