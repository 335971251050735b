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
* ``allow_always`` rules (destination ``session``) live in the process and die with it: nothing is written to
  settings files and the next turn asks again, as hangar promises.
* Each turn takes its own cwd, env, model, approvals and uid from its TurnConfig.
The price is the CLI start-up (~0.5 s) per turn.

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
mode as root otherwise); any other policy leaves the CLI's checks on and its prompts come here.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Set, Tuple  # noqa: F401 (type comments)

from .adapters import (
    LineReader,
    StdinWriter,
    exit_status,
    kill_group,
    kill_unconfirmed,
    spawn_agent,
    text_of,
    wait_or_kill,
)
from .harness import Emit, Harness, NotLive, TurnConfig
from .mcp import claude_args as mcp_claude_args

INTERRUPT_GRACE = 10.0  # seconds the CLI gets to end an interrupted turn before its process group is killed
EXIT_GRACE = 10.0  # seconds the CLI gets to exit once its stdin is closed
# After a result, seconds the CLI gets to take in a steer it has been written (it starts a follow-on turn at
# once, in ~50 ms); past that the process is killed and the steer reported queued.
FOLLOW_ON_GRACE = 30.0
DEFAULT_DENY_MESSAGE = "The user denied this tool call."

Event = Tuple[str, Dict[str, Any]]


def _zero_usage() -> Dict[str, int]:
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }



QUIET_ENV = (
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "DISABLE_ERROR_REPORTING",
)

def live_command(cfg: TurnConfig) -> Tuple[List[str], Dict[str, str]]:
    """The CLI's argv for one live turn, and what it adds to the agent's environment (``cfg.env``). The
    turn benchmark's floor (bench/sessions.py) runs the same command, so the two compare like with like."""
    argv = list(cfg.argv_prefix or ["claude"]) + [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-prompt-tool",
        "stdio",
    ]
    if cfg.model:
        argv += ["--model", cfg.model]
    if cfg.conversation:
        argv += ["--resume", cfg.conversation]
        if cfg.fork:
            argv.append("--fork-session")  # a new session id; the parent's file is left as it was
    # hangar-owned settings: a sandboxed CLI neither updates itself nor phones home (telemetry, error
    # reports); the Environment can still set any of these itself.
    extra_env = {
        k: "1"
        for k in QUIET_ENV
        if k not in cfg.env
    }  # type: Dict[str, str]
    if cfg.approvals == "auto":
        # The CLI's own checks off. As root it refuses this unless told it runs in a sandbox (it does).
        argv += ["--permission-mode", "bypassPermissions"]
        extra_env["IS_SANDBOX"] = "1"
    # The Environment's MCP servers, and only those (mcp.py).
    argv += mcp_claude_args(cfg.mcp_servers)
    argv += [str(a) for a in (cfg.extra.get("claude_args") or [])]
    return argv, extra_env


class _Turn(object):
    def __init__(self, cfg: TurnConfig) -> None:
        self.cfg = cfg
        self.id = cfg.turn_id
        self.proc = None  # type: Any
        self.writer = None  # type: Optional[StdinWriter]
        self.reader = None  # type: Optional[LineReader]
        self.message_uuid = str(uuid.uuid4())
        self.held = []  # type: List[Tuple[str, str]]  # (steer_id, text): not written yet
        self.written = {}  # type: Dict[str, str]  # CLI uuid -> steer_id: written, not taken in yet
        self.open_tools = set()  # type: Set[str]
        self.pending = {}  # type: Dict[str, Dict[str, Any]]  # open permission prompts by request_id
        self.results = []  # type: List[Dict[str, Any]]
        self.cli_busy = False  # a CLI turn runs: between a message being taken in and that turn's result
        self.interrupted = False
        self.interrupt_request_id = None  # type: Optional[str]
        self.finishing = False  # the last result is in: stdin closed, waiting for the exit
        self.ended = False
        self.usage = _zero_usage()  # this process's totals (modelUsage is cumulative per process)
        self.cost = None  # type: Optional[float]
        self.timer = None  # type: Optional[threading.Timer]
        self.session_id = None  # type: Optional[str]
        self.continue_with = None  # type: Optional[Tuple[Optional[str], str]]  # (interrupt id, message)
        self.written_at = {}  # type: Dict[str, float]  # steer_id -> when it was written to the CLI


class ClaudeHarness(Harness):
    name = "claude"
    live = True

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        # Our own lock for the turn state, shared with the reader thread. Not ``self.lock``: the core may hold
        # that one while it calls us (a steer waiting on codex), and the reader must never wait for the core.
        self._mu = threading.RLock()
        self._turn = None  # type: Optional[_Turn]
        self._ids = itertools.count(1)
        self._usage = _zero_usage()  # totals of the turns that ended
        self._cost = 0.0
        self._have_cost = False

    # -- the contract ----------------------------------------------------------------------------------------

    def start_turn(self, cfg: TurnConfig) -> None:
        with self._mu:
            if self._turn is not None and not self._turn.ended:
                raise RuntimeError("a turn is already running")
            turn = _Turn(cfg)
            self._turn = turn
        self.emit("turn_started", {"turn": cfg.turn_id})
        argv, extra_env = live_command(cfg)
        try:
            proc = spawn_agent(argv, cfg, extra_env)
        except OSError as e:
            self._end(turn, "failed", 127, "cannot start %s: %s" % (argv[0], e))
            return
        with self._mu:
            turn.proc = proc
            turn.writer = StdinWriter(proc)
            turn.reader = LineReader(
                proc,
                "claude",
                lambda obj: self._on_message(turn, obj),
                lambda: self._on_eof(turn),
                lambda line: self.emit("log", {"level": "debug", "message": "claude: " + line[:500]}),
            )
            turn.reader.start()
            turn.cli_busy = True
            turn.writer.write(self._user_line(cfg.message, turn.message_uuid))

    def steer(self, steer_id: str, message: str) -> None:
        events = []  # type: List[Event]
        with self._mu:
            turn = self._turn
            if turn is None or turn.ended:
                raise NotLive("no turn running")
            if turn.finishing:
                events.append(("steer", {"steer_id": steer_id, "status": "queued"}))
            elif turn.open_tools and not turn.interrupted:
                self._write_steer(turn, steer_id, message)
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
            turn = self._turn
            if turn is None or turn.ended or turn.finishing or turn.interrupted:
                return
            turn.interrupted = True
            if message:
                turn.continue_with = (interrupt_id, message)
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
            turn.timer = threading.Timer(INTERRUPT_GRACE, self._interrupt_timeout, [turn])
            turn.timer.daemon = True
            turn.timer.start()
        if not ok:
            self._interrupt_timeout(turn)

    def answer(self, request_id: str, decision: str, message: Optional[str] = None) -> None:
        with self._mu:
            turn = self._turn
            req = turn.pending.pop(request_id, None) if turn is not None else None
            if turn is None or req is None or turn.writer is None:
                self.emit(
                    "log", {"level": "warning", "message": "no open permission request %s" % request_id}
                )
                return
            tool_input = req.get("input") or {}
            if decision == "allow":
                response = {"behavior": "allow", "updatedInput": tool_input}  # type: Dict[str, Any]
            elif decision == "allow_always":
                response = {
                    "behavior": "allow",
                    "updatedInput": tool_input,
                    "updatedPermissions": self._session_permissions(req),
                }
            elif decision == "deny":
                response = {"behavior": "deny", "message": message or DEFAULT_DENY_MESSAGE}
            else:
                turn.pending[request_id] = req
                raise ValueError("decision must be allow, deny or allow_always, not %r" % decision)
            turn.writer.write(
                {
                    "type": "control_response",
                    "response": {"subtype": "success", "request_id": request_id, "response": response},
                }
            )

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

    # -- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _user_line(text: str, line_uuid: str) -> Dict[str, Any]:
        return {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
            "parent_tool_use_id": None,
            "session_id": "",
            # Our own uuid: the CLI reports this line's fate in command_lifecycle frames keyed by it.
            "uuid": line_uuid,
        }

    def _write_steer(self, turn: _Turn, steer_id: str, text: str) -> None:
        line_uuid = str(uuid.uuid4())
        turn.written[line_uuid] = steer_id
        turn.written_at[steer_id] = time.time()
        if turn.writer is None or not turn.writer.write(self._user_line(text, line_uuid)):
            # The CLI is gone: it never got it. The turn's end reports it queued.
            pass

    @staticmethod
    def _session_permissions(req: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The CLI's own suggestions, kept in the running process only (destination ``session``)."""
        out = []
        for s in req.get("suggestions") or []:
            if isinstance(s, dict):
                s = dict(s)
                s["destination"] = "session"
                out.append(s)
        if not out and req.get("tool"):
            rule = {"toolName": req["tool"]}  # type: Dict[str, Any]
            command = (req.get("input") or {}).get("command")
            if isinstance(command, str):
                rule["ruleContent"] = command
            out.append({"type": "addRules", "rules": [rule], "behavior": "allow", "destination": "session"})
        return out

    def _emit_all(self, events: List[Event]) -> None:
        for name, payload in events:
            self.emit(name, payload)

    def _totals(self, turn: Optional[_Turn]) -> Tuple[Dict[str, int], Optional[float]]:
        usage = dict(self._usage)
        cost = self._cost if self._have_cost else None
        if turn is not None:
            for k, v in turn.usage.items():
                usage[k] = usage.get(k, 0) + v
            if turn.cost is not None:
                cost = (cost or 0.0) + turn.cost
        return usage, cost

    # -- reading the CLI -------------------------------------------------------------------------------------

    def _on_message(self, turn: _Turn, obj: Dict[str, Any]) -> None:
        events = []  # type: List[Event]
        finish = False
        with self._mu:
            kind = obj.get("type")
            if kind == "assistant":
                self._on_assistant(turn, obj, events)
            elif kind == "user":
                self._on_user(turn, obj, events)
            elif kind == "command_lifecycle":
                self._on_lifecycle(turn, obj, events)
            elif kind == "control_request":
                self._on_control_request(turn, obj, events)
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
        self._emit_all(events)
        if finish and turn.writer is not None:
            turn.writer.close()  # the CLI exits; _on_eof ends the turn

    def _on_assistant(self, turn: _Turn, obj: Dict[str, Any], events: List[Event]) -> None:
        if obj.get("parent_tool_use_id"):
            return  # a subagent's own messages
        content = (obj.get("message") or {}).get("content") or []
        new_tool = False
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                events.append(("text", {"text": block["text"]}))
            elif block.get("type") == "tool_use":
                tid = str(block.get("id"))
                turn.open_tools.add(tid)
                new_tool = True
                events.append(
                    (
                        "tool_use",
                        {"tool": block.get("name") or "", "input": block.get("input") or {}, "id": tid},
                    )
                )
            elif block.get("type") == "server_tool_use":
                # A tool the model's API ran itself (web_search, web_fetch): its result is in this message.
                events.append(
                    (
                        "tool_use",
                        {
                            "tool": block.get("name") or "",
                            "input": block.get("input") or {},
                            "id": str(block.get("id")),
                        },
                    )
                )
            elif str(block.get("type") or "").endswith("_tool_result") and block.get("tool_use_id"):
                result = block.get("content")
                failed = isinstance(result, dict) and str(result.get("type") or "").endswith("_error")
                events.append(
                    (
                        "tool_result",
                        {"id": str(block.get("tool_use_id")), "is_error": failed, "output": text_of(result)},
                    )
                )
        if new_tool and turn.held and not turn.interrupted and not turn.finishing:
            # A tool is in flight now: the CLI will read held steers with its result.
            held, turn.held = turn.held, []
            for sid, text in held:
                self._write_steer(turn, sid, text)

    def _on_user(self, turn: _Turn, obj: Dict[str, Any], events: List[Event]) -> None:
        if obj.get("parent_tool_use_id") or obj.get("isReplay"):
            return
        content = (obj.get("message") or {}).get("content")
        if not isinstance(content, list):
            return
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                tid = str(block.get("tool_use_id"))
                turn.open_tools.discard(tid)
                events.append(
                    (
                        "tool_result",
                        {
                            "id": tid,
                            "is_error": bool(block.get("is_error")),
                            "output": text_of(block.get("content")),
                        },
                    )
                )

    def _on_lifecycle(self, turn: _Turn, obj: Dict[str, Any], events: List[Event]) -> None:
        line_uuid = str(obj.get("command_uuid"))
        state = obj.get("state")
        if line_uuid == turn.message_uuid:
            if state == "started":
                turn.cli_busy = True
            return
        steer_id = turn.written.get(line_uuid)
        if steer_id is None:
            return
        if state == "started":
            del turn.written[line_uuid]
            if turn.timer is not None and not turn.interrupted:
                turn.timer.cancel()
                turn.timer = None
            if not turn.cli_busy:
                events.append(
                    (
                        "log",
                        {
                            "level": "info",
                            "message": "steer %s reached claude after its tool had finished: the CLI "
                            "runs it as a follow-on turn within this turn" % steer_id,
                        },
                    )
                )
            turn.cli_busy = True
            events.append(
                (
                    "steer",
                    {
                        "steer_id": steer_id,
                        "status": "delivered",
                        "written_at": turn.written_at.pop(steer_id, None),
                    },
                )
            )
        elif state == "cancelled":
            del turn.written[line_uuid]
            events.append(("steer", {"steer_id": steer_id, "status": "queued"}))

    def _on_control_request(self, turn: _Turn, obj: Dict[str, Any], events: List[Event]) -> None:
        rid = str(obj.get("request_id"))
        req = obj.get("request") or {}
        if req.get("subtype") == "can_use_tool":
            tool_input = req.get("input") or {}
            pending = {
                "tool": req.get("tool_name") or "",
                "input": tool_input,
                "suggestions": req.get("permission_suggestions") or [],
            }
            turn.pending[rid] = pending
            command = tool_input.get("command") if isinstance(tool_input, dict) else None
            events.append(
                (
                    "permission_request",
                    {
                        "request_id": rid,
                        "tool": pending["tool"],
                        "input": tool_input,
                        "command": command if isinstance(command, str) else None,
                        "cwd": turn.cfg.cwd,
                        "suggestions": pending["suggestions"],
                    },
                )
            )
            return
        # Nothing else is ours to answer (hooks, MCP, elicitation): say so rather than leave the CLI waiting.
        if turn.writer is not None:
            turn.writer.write(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "error",
                        "request_id": rid,
                        "error": "hangar does not handle %s" % req.get("subtype"),
                    },
                }
            )

    def _on_result(self, turn: _Turn, obj: Dict[str, Any], events: List[Event]) -> bool:
        """Record a result; True when the turn is over (nothing written is still waiting to be taken in)."""
        turn.results.append(obj)
        turn.cli_busy = False
        model_usage = obj.get("modelUsage")
        if isinstance(model_usage, dict) and model_usage:
            # Cumulative for the process: sum over models.
            usage = _zero_usage()
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
        payload = dict(usage)  # type: Dict[str, Any]
        payload["cost_usd"] = cost
        events.append(("usage", payload))
        if turn.interrupted and turn.continue_with is not None and not turn.finishing:
            self._continue_after_interrupt(turn, obj, events)
            return False
        if turn.written and not turn.interrupted:
            # A steer lost the race with its tool: the CLI takes it in as a follow-on turn. Keep going.
            if turn.timer is None:
                turn.timer = threading.Timer(FOLLOW_ON_GRACE, self._follow_on_timeout, [turn])
                turn.timer.daemon = True
                turn.timer.start()
            return False
        turn.finishing = True
        return True

    def _on_eof(self, turn: _Turn) -> None:
        proc = turn.proc
        code = wait_or_kill(proc, EXIT_GRACE) if proc is not None else -1
        if turn.reader is not None:
            turn.reader.join_stderr()
        with self._mu:
            if turn.timer is not None:
                turn.timer.cancel()
            results = list(turn.results)
            interrupted = turn.interrupted
        texts = [r.get("result") for r in results if isinstance(r.get("result"), str) and r.get("result")]
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

    def _follow_on_timeout(self, turn: _Turn) -> None:
        with self._mu:
            if turn.ended or turn.proc is None or not turn.written or turn.interrupted:
                return
            proc = turn.proc
        self.emit(
            "log", {"level": "warning", "message": "claude did not take in a written steer: stopping it"}
        )
        kill_group(proc)

    def _continue_after_interrupt(self, turn: _Turn, result: Dict[str, Any], events: List[Event]) -> None:
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
        if turn.writer is None or not turn.writer.write(self._user_line(text, turn.message_uuid)):
            # The CLI is gone: the turn ends as interrupted and the core starts the next turn with it.
            turn.interrupted = True
            return
        events.append(("interrupted", {"turn": turn.id, "interrupt_id": interrupt_id, "continued": True}))

    def _interrupt_timeout(self, turn: _Turn) -> None:
        kill_unconfirmed(self, turn)

    def _end(
        self, turn: _Turn, outcome: str, exit_status: int, error: Optional[str], summary: str = ""
    ) -> None:
        events = []  # type: List[Event]
        with self._mu:
            if turn.ended:
                return
            turn.ended = True
            turn.finishing = True
            if turn.timer is not None:
                turn.timer.cancel()
            for sid, _text in turn.held:
                events.append(("steer", {"steer_id": sid, "status": "queued"}))
            turn.held = []
            for sid in turn.written.values():
                events.append(("steer", {"steer_id": sid, "status": "queued"}))
            turn.written = {}
            for rid in list(turn.pending):
                events.append(("permission_cancelled", {"request_id": rid}))
            turn.pending = {}
            turn_usage = dict(turn.usage)
            turn_cost = turn.cost
            for k, v in turn.usage.items():
                self._usage[k] = self._usage.get(k, 0) + v
            if turn.cost is not None:
                self._cost += turn.cost
                self._have_cost = True
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
