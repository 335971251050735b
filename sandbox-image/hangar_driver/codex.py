"""Codex live adapter: ``codex app-server``, JSON-RPC over stdio (a JSON object per line, no "jsonrpc" field).

Standard library only, Python 3.8+.

One app-server process per turn: initialize / initialized, ``thread/start`` (or ``thread/resume`` with the
conversation id for continuity, ``thread/fork`` when the turn forks it), ``turn/start``; the turn ends with ``turn/completed``, then stdin is closed
and the process exits. As for Claude, per-turn processes give each turn its own cwd/env/model/approvals/uid,
make an interrupt final (the process is killed if it does not confirm in time), and keep ``acceptForSession``
grants in that one process: the next turn asks again.

``$CODEX_HOME/config.toml`` is written before each start with the offline settings (no update check, analytics
off, plugins/apps off) and, when ``TurnConfig.extra["base_url"]`` (or ``OPENAI_BASE_URL`` in ``cfg.env``) is
set, a ``hangar`` model provider speaking the Responses API there, with its key read from the env var named by
``extra["env_key"]`` (default ``OPENAI_API_KEY``). ``extra``'s ``request_max_retries``, ``stream_max_retries``
and ``stream_idle_timeout_ms`` go into that provider; ``extra["codex_config"]`` is appended verbatim (TOML
tables other than the ones written here).

Steers: ``turn/steer`` with the running turn's id. Codex takes it at once (it preempts an in-flight model
stream, or is added after a running tool): ``delivered``. ``-32600`` (no active turn: it ended first), or any
other failure: ``queued``. Codex never needs a steer held, so ``withdraw`` always says False.

Interrupt: ``turn/interrupt``; confirmed by ``turn/completed`` with status ``interrupted`` (open approvals are
resolved through ``serverRequest/resolved`` -> ``permission_cancelled``). Outcome ``interrupted``, exit 130.
With a message, the confirmation is followed by ``turn/start`` with the message on the same thread in the same
app-server process: the hangar turn and the conversation go on with it (``interrupted``, continued).

Approvals: ``approvalPolicy`` ``never`` + sandbox ``danger-full-access`` when approvals are ``auto``, else
``untrusted`` (the sandbox pod is the sandbox). ``item/commandExecution/requestApproval`` and
``item/fileChange/requestApproval`` (and the legacy ``execCommandApproval`` / ``applyPatchApproval``) become
``permission_request``; ``answer`` sends accept / acceptForSession / decline. Codex's decline carries no text,
so a deny message is passed to the agent as a steer right after the decline. An MCP tool call asks through an
``mcpServer/elicitation/request`` whose ``_meta.codex_approval_kind`` is ``mcp_tool_call``: it becomes a
``permission_request`` for ``mcp__<server>__<tool>`` (Claude Code's spelling, also used for the tool's
``tool_use``) and is answered accept / decline (other elicitations are declined).

The Environment's MCP servers (``TurnConfig.mcp_servers``) are written into config.toml as
``[mcp_servers.<name>]`` tables (``mcp.py``). A Responses API ``web_search_call`` shows as a ``webSearch``
item: ``tool_use``/``tool_result`` ``web_search``, which the operator counts as reading web content.

The environment is ``cfg.env`` plus ``RUST_LOG=error`` when it names no log level (codex's warnings about an
unknown model would otherwise fill the stderr tail kept for errors).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .codex_config import fork_state_home, write_config
from .codex_rpc import NO_ACTIVE_TURN, Rpc, RpcError
from .codex_turn import CodexTurn, _mcp_answer, _mcp_approval
from .harness import Emit, Event, NotLive, TurnConfig
from .live import EXIT_GRACE, LiveHarness
from .process import StdinWriter, exit_status, kill_group

__all__ = ["CodexHarness", "RpcError", "_mcp_answer", "_mcp_approval", "write_config"]

RPC_TIMEOUT = 60.0  # initialize / thread / turn start
STEER_TIMEOUT = 15.0
INTERRUPT_GRACE = 10.0

_DECISIONS_V2 = {"allow": "accept", "allow_always": "acceptForSession", "deny": "decline"}
_DECISIONS_V1 = {"allow": "approved", "allow_always": "approved_for_session", "deny": "denied"}


class CodexHarness(LiveHarness[CodexTurn]):
    name = "codex"

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        self._seq = itertools.count(1)

    # -- the contract ----------------------------------------------------------------------------------------

    def start_turn(self, cfg: TurnConfig) -> None:
        turn = CodexTurn(cfg, next(self._seq))
        self._begin(turn)
        try:
            write_config(cfg)
        except OSError as e:
            self._end(turn, "failed", 1, "cannot write codex config: %s" % e)
            return
        argv = [*list(cfg.argv_prefix or ["codex"]), "app-server"]
        extra_env = {} if "RUST_LOG" in cfg.env else {"RUST_LOG": "error"}
        if cfg.fork and cfg.conversation:
            try:
                extra_env["CODEX_SQLITE_HOME"] = fork_state_home(cfg)
            except OSError as e:
                self._end(turn, "failed", 1, "cannot prepare the fork's codex state: %s" % e)
                return
        if not self._spawn(turn, argv, extra_env):
            return
        rpc = turn.rpc
        assert rpc is not None
        auto = cfg.approvals == "auto"
        settings: Dict[str, Any] = {
            "cwd": cfg.cwd,
            "approvalPolicy": "never" if auto else "untrusted",
            "sandbox": "danger-full-access",
        }
        if cfg.model:
            settings["model"] = cfg.model
        try:
            rpc.call(
                "initialize",
                {"clientInfo": {"name": "hangar", "title": "hangar", "version": "0.1.0"}},
                RPC_TIMEOUT,
            )
            rpc.notify("initialized")
            if cfg.conversation:
                params = dict(settings)
                params["threadId"] = cfg.conversation
                # thread/fork copies the thread into a new one (its id comes back in ``thread``).
                result = rpc.call("thread/fork" if cfg.fork else "thread/resume", params, RPC_TIMEOUT)
            else:
                result = rpc.call("thread/start", settings, RPC_TIMEOUT)
            thread_id = str((result.get("thread") or {}).get("id") or cfg.conversation or "")
            with self._mu:
                turn.thread_id = thread_id
            self.emit("conversation", {"id": thread_id})
            with self._mu:
                turn.turn_start_sent = True
            result = rpc.call(
                "turn/start",
                {"threadId": thread_id, "input": [{"type": "text", "text": cfg.message}]},
                RPC_TIMEOUT,
            )
            with self._mu:
                turn.codex_turn = str((result.get("turn") or {}).get("id") or "")
        except RpcError as e:
            detail = str(e)
            if e.code is None:  # no answer: what codex said on stderr is all there is
                detail += ": " + (turn.reader.stderr_text()[-1500:] if turn.reader is not None else "")
            with self._mu:
                if turn.ended:
                    return
                turn.turn_error = "codex: %s" % detail
                turn.finishing = True
                # app-server exits once its stdin is closed (killed if not); _on_eof ends the turn.
                turn.timer = threading.Timer(EXIT_GRACE, kill_group, [turn.proc])
                turn.timer.daemon = True
                turn.timer.start()
            if turn.writer is not None:
                turn.writer.close()

    def steer(self, steer_id: str, message: str) -> None:
        slot: Optional[List[Any]] = None
        with self._mu:
            turn = self._turn
            if turn is None or turn.ended:
                raise NotLive("no turn running")
            if not (turn.finishing or turn.rpc is None or not turn.codex_turn):
                written_at = time.time()
                _rid, slot = turn.rpc.send("turn/steer", self._steer_params(turn, message))
                turn.inflight_steers[steer_id] = slot
        if slot is None:
            self.emit("steer", {"steer_id": steer_id, "status": "queued"})
            return
        status = "queued"
        try:
            Rpc.wait(slot, "turn/steer", STEER_TIMEOUT)
            status = "delivered"
        except RpcError as e:
            if e.code != NO_ACTIVE_TURN:
                self.emit(
                    "log", {"level": "warning", "message": "codex refused steer %s: %s" % (steer_id, e)}
                )
        with self._mu:
            mine = turn.inflight_steers.pop(steer_id, None) is not None
        if mine:  # else _end reported it
            self.emit("steer", {"steer_id": steer_id, "status": status, "written_at": written_at})

    def withdraw(self, steer_id: str) -> bool:
        return False  # nothing is ever held: a steer goes to codex at once

    def interrupt(self, message: Optional[str] = None, interrupt_id: Optional[str] = None) -> None:
        with self._mu:
            turn = self._mark_interrupted(message, interrupt_id)
            if turn is None:
                return
            rpc = turn.rpc
            params = {"threadId": turn.thread_id, "turnId": turn.codex_turn}
            self._start_timer(turn, INTERRUPT_GRACE, self._interrupt_timeout)
        if rpc is None or not turn.codex_turn:
            self._interrupt_timeout(turn)
            return
        rpc.send("turn/interrupt", params)  # confirmed by turn/completed (status interrupted)

    def _reply(
        self,
        turn: CodexTurn,
        writer: StdinWriter,
        request_id: str,
        req: Dict[str, Any],
        decision: str,
        message: Optional[str],
    ) -> Optional[Callable[[], None]]:
        turn.answered[req["rpc_id"]] = request_id
        if req.get("mcp"):
            writer.write({"id": req["rpc_id"], "result": _mcp_answer(decision)})
        else:
            if req["legacy"]:
                value: Any = _DECISIONS_V1[decision]
                if decision == "deny":
                    value = {"denied": {"rejection": message or "The user denied this."}}
            else:
                value = _DECISIONS_V2[decision]
            writer.write({"id": req["rpc_id"], "result": {"decision": value}})
        if not (decision == "deny" and message and not req["legacy"]):
            return None
        # Codex's decline carries no text: hand the agent the reason as a steer (once _mu is released).
        said = "I denied %s: %s" % (req.get("command") or "that change", message)

        def pass_it_on() -> None:
            try:
                self._send_steer(turn, said)
            except RpcError as e:
                self.emit(
                    "log", {"level": "warning", "message": "could not pass the deny message on: %s" % e}
                )

        return pass_it_on

    # -- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _steer_params(turn: CodexTurn, text: str) -> Dict[str, Any]:
        return {
            "threadId": turn.thread_id,
            "expectedTurnId": turn.codex_turn,
            "input": [{"type": "text", "text": text}],
        }

    def _send_steer(self, turn: CodexTurn, text: str) -> None:
        with self._mu:
            rpc = turn.rpc
            params = self._steer_params(turn, text)
        if rpc is None:
            raise RpcError(None, "no codex process")
        rpc.call("turn/steer", params, STEER_TIMEOUT)

    def _cumulative(self, turn: CodexTurn) -> Dict[str, Any]:
        usage = dict(self._usage)
        for k, v in turn.usage().items():
            usage[k] = usage.get(k, 0) + v
        out: Dict[str, Any] = dict(usage)
        out["cost_usd"] = None
        return out

    # -- reading codex ---------------------------------------------------------------------------------------

    def _on_message(self, turn: CodexTurn, msg: Dict[str, Any]) -> None:
        if "id" in msg and "method" not in msg:
            if turn.rpc is not None:
                turn.rpc.resolve(msg)
            return
        events: List[Event] = []
        finish = False
        with self._mu:
            method = str(msg.get("method") or "")
            params = msg.get("params") or {}
            if "id" in msg:
                turn.on_server_request(msg["id"], method, params, events)
            else:
                finish = self._on_notification(turn, method, params, events)
        self._after_message(turn, events, finish)

    def _on_notification(
        self, turn: CodexTurn, method: str, params: Dict[str, Any], events: List[Event]
    ) -> bool:
        if turn.on_item(method, params, events):
            return False
        if method == "thread/tokenUsage/updated":
            total = (params.get("tokenUsage") or {}).get("total") or {}
            turn.token_notes.append((params.get("turnId"), total))
            events.append(("usage", self._cumulative(turn)))
        elif method == "turn/started":
            started = (params.get("turn") or {}).get("id")
            if started and turn.turn_start_sent and not turn.codex_turn:
                turn.codex_turn = str(started)  # the turn started after an interrupt with a message
        elif method == "turn/completed":
            done = params.get("turn") or {}
            if not turn.turn_start_sent or (turn.codex_turn and done.get("id") != turn.codex_turn):
                return False
            if (
                done.get("status") == "interrupted"
                and turn.interrupted
                and turn.continue_with is not None
                and turn.rpc is not None
                and turn.thread_id
            ):
                self._continue_after_interrupt(turn, events)
                return False
            turn.status = str(done.get("status") or "")
            err = done.get("error")
            if isinstance(err, dict):
                turn.turn_error = str(err.get("message") or err)
            elif err:
                turn.turn_error = str(err)
            turn.finishing = True
            return True
        return False

    def _on_eof(self, turn: CodexTurn) -> None:
        if turn.rpc is not None:
            turn.rpc.fail_all()
        code = self._reap(turn)
        with self._mu:
            status = turn.status
            interrupted = turn.interrupted
            error = turn.turn_error
        summary = turn.last_text
        if interrupted or status == "interrupted":
            self._end(turn, "interrupted", 130, None, summary)
        elif status == "completed":
            self._end(turn, "completed", 0, None, summary)
        else:
            if not error:
                stderr = turn.reader.stderr_text() if turn.reader is not None else ""
                error = "codex: %s" % (
                    turn.last_error or "exited (%s) before the turn completed: %s" % (code, stderr[-1500:])
                )
            self._end(turn, "failed", exit_status(code, True), error, summary)

    def _continue_after_interrupt(self, turn: CodexTurn, events: List[Event]) -> None:
        """codex stopped the turn for the interrupt: start the next codex turn on the same thread with the
        interrupt's message. Called in the reader thread, so the answer is awaited in a thread of its own."""
        interrupt_id, text = turn.continue_with or (None, "")
        turn.continue_with = None
        turn.interrupted = False
        turn.codex_turn = None
        for iid, item in list(turn.items.items()):
            if item.get("type") != "agentMessage":
                events.append(("tool_result", {"id": iid, "is_error": True, "output": "(interrupted)"}))
        turn.items = {}
        turn.deltas = {}
        assert turn.rpc is not None
        _rid, slot = turn.rpc.send(
            "turn/start", {"threadId": turn.thread_id, "input": [{"type": "text", "text": text}]}
        )
        events.append(("interrupted", {"turn": turn.id, "interrupt_id": interrupt_id, "continued": True}))

        def started() -> None:
            try:
                result = Rpc.wait(slot, "turn/start", RPC_TIMEOUT)
            except RpcError as e:
                with self._mu:
                    if turn.ended:
                        return
                    turn.turn_error = "codex: going on after the interrupt: %s" % e
                    turn.finishing = True
                if turn.writer is not None:
                    turn.writer.close()  # app-server exits; _on_eof ends the turn (failed)
                return
            with self._mu:
                if turn.timer is not None:
                    turn.timer.cancel()
                    turn.timer = None
                if not turn.codex_turn:
                    turn.codex_turn = str((result.get("turn") or {}).get("id") or "")

        threading.Thread(target=started, name="codex-continue", daemon=True).start()

    def _attach(self, turn: CodexTurn) -> None:
        assert turn.writer is not None
        turn.rpc = Rpc(turn.writer)

    def _settle_steers(self, turn: CodexTurn, events: List[Event]) -> None:
        for sid, slot in list(turn.inflight_steers.items()):
            # A steer whose turn/steer answer is still being read: codex's answer decides, if it came.
            answered = slot[0].is_set() and isinstance(slot[1], dict) and "result" in slot[1]
            events.append(("steer", {"steer_id": sid, "status": "delivered" if answered else "queued"}))
        turn.inflight_steers = {}

    def _settle_turn(self, turn: CodexTurn, events: List[Event]) -> Tuple[Dict[str, int], Optional[float]]:
        for iid, item in list(turn.items.items()):
            # Aborted items get no item/completed: close them here.
            if item.get("type") == "agentMessage":
                partial = "".join(turn.deltas.get(iid) or [])
                if partial:
                    events.append(
                        (
                            "log",
                            {
                                "level": "info",
                                "message": "codex dropped a partial message (%d chars)" % len(partial),
                            },
                        )
                    )
            else:
                events.append(("tool_result", {"id": iid, "is_error": True, "output": "(aborted)"}))
        turn.items = {}
        return turn.usage(), None
