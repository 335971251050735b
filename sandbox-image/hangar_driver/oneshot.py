"""One-shot harnesses: the CLI gets the message, runs to the end and exits. No steer, no permission prompts.

Standard library only, Python 3.8+.

* ``pi``: ``pi --mode json`` (pi's print mode with every session event as a JSON line on stdout; see
  ``docs/json.md`` in its npm package). The message goes on stdin (pi reads piped stdin as the prompt, so a
  message that starts with ``@`` or ``-`` is not taken for a file or a flag). ``--session <id>`` continues a
  conversation (the id is the one in pi's ``session`` header line, reported as ``conversation``), ``--fork
  <id>`` forks it into a new session (its header reports the new id);
  ``extra["provider"]`` -> ``--provider``, ``cfg.model`` -> ``--model``, ``extra["pi_args"]`` appended.
  ``PI_OFFLINE=1`` is added to the environment unless it is set.
* ``antigravity``: a configurable command, ``extra["command"]`` (a list, or a string split like a shell
  would). The message replaces a ``{message}`` argument, or is passed as the last argument, or on stdin with
  ``extra["message_via"] = "stdin"``. Its stdout is the summary.

``steer`` raises NotLive. ``interrupt`` kills the process group (SIGTERM, SIGKILL after KILL_GRACE seconds);
the turn ends ``interrupted`` with exit status 130. Policies other than ``auto`` need prompts, which these
harnesses cannot give: such a turn fails at once rather than run with checks off.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import threading
from typing import Any, Dict, List, Optional, Tuple

from .harness import Emit, Event, Harness, NotLive, TurnConfig
from .process import LineReader, exit_status, kill_group, spawn_agent, stop, text_of, wait_or_kill

KILL_GRACE = 3.0
SUMMARY_CHARS = 4000


class _Run:
    def __init__(self, cfg: TurnConfig) -> None:
        self.cfg = cfg
        self.proc: Any = None
        self.reader: Optional[LineReader] = None
        self.interrupted = False
        self.ended = False
        self.timer: Optional[threading.Timer] = None
        self.texts: List[str] = []
        self.output: List[str] = []
        self.error: Optional[str] = None
        self.usage = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        self.cost: Optional[float] = None


class OneShotHarness(Harness):
    """Runs one CLI process per turn to its end. Subclasses say how to start it and read its output."""

    live = False

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        # Our own lock for the turn state, shared with the reader thread. Not ``self.lock``: the core may hold
        # that one while it calls us (a steer waiting on codex), and the reader must never wait for the core.
        self._mu = threading.RLock()
        self._run: Optional[_Run] = None
        self._usage: Dict[str, int] = {}
        self._cost: Optional[float] = None

    # subclass hooks
    def command(self, cfg: TurnConfig) -> Tuple[List[str], Optional[str], Dict[str, str]]:
        """(argv, text for stdin or None, extra env)."""
        raise NotImplementedError

    def on_json(self, run: _Run, obj: Dict[str, Any], events: List[Event]) -> None:
        run.output.append(json_line(obj))

    def on_text(self, run: _Run, line: str, events: List[Event]) -> None:
        run.output.append(line)

    def summary(self, run: _Run) -> str:
        return "\n".join(run.output)[-SUMMARY_CHARS:]

    # the contract
    def start_turn(self, cfg: TurnConfig) -> None:
        with self._mu:
            if self._run is not None and not self._run.ended:
                raise RuntimeError("a turn is already running")
            run = _Run(cfg)
            self._run = run
        self.emit("turn_started", {"turn": cfg.turn_id})
        if cfg.approvals != "auto":
            self._end(
                run,
                "failed",
                1,
                "%s runs one-shot and cannot ask for approvals: policy %r needs a live harness "
                "(Claude Code or Codex)" % (self.name, cfg.approvals),
            )
            return
        try:
            argv, stdin_text, extra_env = self.command(cfg)
        except ValueError as e:
            self._end(run, "failed", 1, str(e))
            return
        try:
            proc = spawn_agent(
                argv, cfg, extra_env, stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL
            )
        except OSError as e:
            self._end(run, "failed", 127, "cannot start %s: %s" % (argv[0], e))
            return
        with self._mu:
            run.proc = proc
            run.reader = LineReader(
                proc,
                self.name,
                lambda obj: self._json(run, obj),
                lambda: self._on_eof(run),
                lambda line: self._text(run, line),
            )
            run.reader.start()
        if stdin_text is not None:
            threading.Thread(target=self._feed, args=(proc, stdin_text), daemon=True).start()

    def steer(self, steer_id: str, message: str) -> None:
        raise NotLive("%s runs one-shot: it cannot take a message mid-turn" % self.name)

    def withdraw(self, steer_id: str) -> bool:
        return False

    def answer(self, request_id: str, decision: str, message: Optional[str] = None) -> None:
        raise NotLive("%s runs one-shot: it asks no permissions" % self.name)

    def interrupt(self, message: Optional[str] = None, interrupt_id: Optional[str] = None) -> None:
        # One-shot: the run is stopped whatever the message; the core starts the next turn with it.
        with self._mu:
            run = self._run
            if run is None or run.ended or run.proc is None or run.interrupted:
                return
            run.interrupted = True
            proc = run.proc
            run.timer = threading.Timer(KILL_GRACE, kill_group, [proc, signal.SIGKILL])
            run.timer.daemon = True
            run.timer.start()
        kill_group(proc, signal.SIGTERM)

    def running(self) -> bool:
        with self._mu:
            return self._run is not None and not self._run.ended

    def close(self) -> None:
        with self._mu:
            run = self._run
        if run is not None:
            stop(run.proc)

    # plumbing
    @staticmethod
    def _feed(proc: subprocess.Popen[bytes], text: str) -> None:
        try:
            if proc.stdin is not None:
                proc.stdin.write(text.encode("utf-8"))
                proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def _json(self, run: _Run, obj: Dict[str, Any]) -> None:
        events: List[Event] = []
        with self._mu:
            self.on_json(run, obj, events)
        for name, payload in events:
            self.emit(name, payload)

    def _text(self, run: _Run, line: str) -> None:
        events: List[Event] = []
        with self._mu:
            self.on_text(run, line, events)
        for name, payload in events:
            self.emit(name, payload)

    def _usage_payload(self, run: _Run) -> Dict[str, Any]:
        out: Dict[str, Any] = dict(self._usage)
        for k, v in run.usage.items():
            out[k] = out.get(k, 0) + v
        cost = self._cost
        if run.cost is not None:
            cost = (cost or 0.0) + run.cost
        out["cost_usd"] = cost
        return out

    def _on_eof(self, run: _Run) -> None:
        code = wait_or_kill(run.proc, 10.0)
        if run.reader is not None:
            run.reader.join_stderr()
        with self._mu:
            if run.timer is not None:
                run.timer.cancel()
            interrupted = run.interrupted
            error = run.error
        summary = self.summary(run)
        if interrupted:
            self._end(run, "interrupted", 130, None, summary)
        elif code == 0 and not error:
            self._end(run, "completed", 0, None, summary)
        else:
            stderr = run.reader.stderr_text() if run.reader is not None else ""
            self._end(
                run,
                "failed",
                exit_status(code, True),
                error or "%s exited %s: %s" % (self.name, code, stderr[-2000:]),
                summary,
            )

    def _end(
        self, run: _Run, outcome: str, exit_status: int, error: Optional[str], summary: str = ""
    ) -> None:
        with self._mu:
            if run.ended:
                return
            run.ended = True
            usage = dict(run.usage)
            for k, v in run.usage.items():
                self._usage[k] = self._usage.get(k, 0) + v
            if run.cost is not None:
                self._cost = (self._cost or 0.0) + run.cost
        self.emit(
            "turn_ended",
            {
                "turn": run.cfg.turn_id,
                "outcome": outcome,
                "exit_status": exit_status,
                "summary": summary,
                "error": error,
                "usage": usage,
                "cost_usd": run.cost,
            },
        )


def json_line(obj: Dict[str, Any]) -> str:
    return json.dumps(obj)


class PiHarness(OneShotHarness):
    name = "pi"

    def command(self, cfg: TurnConfig) -> Tuple[List[str], Optional[str], Dict[str, str]]:
        argv = [*list(cfg.argv_prefix or ["pi"]), "--mode", "json"]
        if cfg.extra.get("provider"):
            argv += ["--provider", str(cfg.extra["provider"])]
        if cfg.model:
            argv += ["--model", cfg.model]
        if cfg.conversation:
            argv += ["--fork" if cfg.fork else "--session", cfg.conversation]
        argv += [str(a) for a in (cfg.extra.get("pi_args") or [])]
        extra_env = {} if "PI_OFFLINE" in cfg.env else {"PI_OFFLINE": "1"}
        return argv, cfg.message, extra_env

    def on_json(self, run: _Run, obj: Dict[str, Any], events: List[Event]) -> None:
        kind = obj.get("type")
        if kind == "session" and obj.get("id"):
            events.append(("conversation", {"id": str(obj["id"])}))
        elif kind == "message_end":
            msg = obj.get("message") or {}
            if msg.get("role") != "assistant":
                return
            for block in msg.get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    run.texts.append(block["text"])
                    events.append(("text", {"text": block["text"]}))
                elif block.get("type") == "toolCall":
                    args = block.get("arguments")
                    events.append(
                        (
                            "tool_use",
                            {
                                "tool": block.get("name") or "",
                                "input": args if isinstance(args, dict) else {},
                                "id": str(block.get("id")),
                            },
                        )
                    )
            usage = msg.get("usage") or {}
            if usage:
                run.usage["input_tokens"] += int(usage.get("input") or 0)
                run.usage["output_tokens"] += int(usage.get("output") or 0)
                run.usage["cache_read_input_tokens"] += int(usage.get("cacheRead") or 0)
                run.usage["cache_creation_input_tokens"] += int(usage.get("cacheWrite") or 0)
                cost = (usage.get("cost") or {}).get("total")
                if cost is not None:
                    run.cost = (run.cost or 0.0) + float(cost)
                events.append(("usage", self._usage_payload(run)))
            if msg.get("stopReason") == "error":
                run.error = "pi: %s" % (msg.get("errorMessage") or "the model call failed")
        elif kind == "tool_execution_end":
            result = obj.get("result") or {}
            events.append(
                (
                    "tool_result",
                    {
                        "id": str(obj.get("toolCallId")),
                        "is_error": bool(obj.get("isError")),
                        "output": text_of(result.get("content") if isinstance(result, dict) else result),
                    },
                )
            )

    def on_text(self, run: _Run, line: str, events: List[Event]) -> None:
        events.append(("log", {"level": "debug", "message": "pi: " + line[:500]}))

    def summary(self, run: _Run) -> str:
        return run.texts[-1] if run.texts else ""


class CommandHarness(OneShotHarness):
    """A harness that is just a command (Antigravity): ``extra["command"]``, the message as an argument or on
    stdin, its stdout the answer."""

    name = "antigravity"

    def command(self, cfg: TurnConfig) -> Tuple[List[str], Optional[str], Dict[str, str]]:
        command = cfg.extra.get("command") or cfg.argv_prefix
        if not command:
            raise ValueError("%s: no command configured (extra['command'])" % self.name)
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        if cfg.extra.get("message_via") == "stdin":
            return argv, cfg.message, {}
        if any("{message}" in a for a in argv):
            return [a.replace("{message}", cfg.message) for a in argv], None, {}
        return [*argv, cfg.message], None, {}

    def on_text(self, run: _Run, line: str, events: List[Event]) -> None:
        run.output.append(line)

    def _on_eof(self, run: _Run) -> None:
        out = "\n".join(run.output).strip()
        if out:
            self.emit("text", {"text": out[-SUMMARY_CHARS:]})
        OneShotHarness._on_eof(self, run)
