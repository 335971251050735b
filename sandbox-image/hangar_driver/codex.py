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
import json
import os
import shutil
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

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
from .mcp import codex_toml as mcp_codex_toml

RPC_TIMEOUT = 60.0  # initialize / thread / turn start
STEER_TIMEOUT = 15.0
INTERRUPT_GRACE = 10.0
EXIT_GRACE = 10.0
NO_ACTIVE_TURN = -32600

Event = Tuple[str, Dict[str, Any]]

_DECISIONS_V2 = {"allow": "accept", "allow_always": "acceptForSession", "deny": "decline"}
_DECISIONS_V1 = {"allow": "approved", "allow_always": "approved_for_session", "deny": "denied"}


class RpcError(Exception):
    def __init__(self, code: Optional[int], message: str) -> None:
        Exception.__init__(self, "%s (%s)" % (message, code))
        self.code = code
        self.message = message


class _Rpc(object):
    """Client side of the JSON-RPC connection: our ids, and the answers waited for."""

    def __init__(self, writer: StdinWriter) -> None:
        self.writer = writer
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.waiting = {}  # type: Dict[Any, List[Any]]  # id -> [threading.Event, message]
        self.closed = False

    def send(self, method: str, params: Dict[str, Any]) -> Tuple[Any, List[Any]]:
        slot = [threading.Event(), None]  # type: List[Any]
        with self.lock:
            rid = next(self.ids)
            if self.closed:
                slot[1] = {"error": {"code": None, "message": "codex app-server has exited"}}
                slot[0].set()
                return rid, slot
            self.waiting[rid] = slot
        if not self.writer.write({"id": rid, "method": method, "params": params}):
            self.resolve({"id": rid, "error": {"code": None, "message": "codex app-server stdin is closed"}})
        return rid, slot

    def call(self, method: str, params: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        _rid, slot = self.send(method, params)
        return self.wait(slot, method, timeout)

    @staticmethod
    def wait(slot: List[Any], method: str, timeout: float) -> Dict[str, Any]:
        if not slot[0].wait(timeout):
            raise RpcError(None, "%s: no answer from codex in %ss" % (method, timeout))
        msg = slot[1] or {}
        if "error" in msg:
            err = msg.get("error") or {}
            raise RpcError(err.get("code"), "%s: %s" % (method, err.get("message")))
        result = msg.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        msg = {"method": method}  # type: Dict[str, Any]
        if params is not None:
            msg["params"] = params
        self.writer.write(msg)

    def resolve(self, msg: Dict[str, Any]) -> None:
        with self.lock:
            slot = self.waiting.pop(msg.get("id"), None)
        if slot is not None:
            slot[1] = msg
            slot[0].set()

    def fail_all(self) -> None:
        with self.lock:
            self.closed = True
            waiting, self.waiting = self.waiting, {}
        for slot in waiting.values():
            slot[1] = {"error": {"code": None, "message": "codex app-server has exited"}}
            slot[0].set()


def _mcp_approval(params: Dict[str, Any]) -> bool:
    """Codex asks whether an MCP tool may run as an elicitation of its own (approvals other than never)."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and meta.get("codex_approval_kind") == "mcp_tool_call"


def _mcp_answer(decision: str) -> Dict[str, Any]:
    """The elicitation result for an MCP tool call's approval: accept (for the session) or decline."""
    if decision == "deny":
        return {"action": "decline"}
    result = {"action": "accept", "content": {}}  # type: Dict[str, Any]
    if decision == "allow_always":
        result["_meta"] = {"persist": "session"}
    return result


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string takes JSON's escapes


def codex_home(cfg: TurnConfig) -> str:
    home = cfg.env.get("CODEX_HOME")
    if home:
        return home
    return os.path.join(cfg.env.get("HOME") or cfg.cwd, ".codex")


def write_config(cfg: TurnConfig) -> str:
    """Write $CODEX_HOME/config.toml (top-level keys first: after a [table] they would belong to it)."""
    home = codex_home(cfg)
    extra = cfg.extra
    base_url = extra.get("base_url") or cfg.env.get("OPENAI_BASE_URL")
    model = cfg.model or extra.get("model")
    lines = []  # type: List[str]
    if model:
        lines.append("model = %s" % _toml_str(str(model)))
    if base_url:
        lines.append('model_provider = "hangar"')
    lines.append("check_for_update_on_startup = false")
    if base_url:
        lines += [
            "",
            "[model_providers.hangar]",
            'name = "hangar"',
            "base_url = %s" % _toml_str(str(base_url)),
            'wire_api = "responses"',
            "env_key = %s" % _toml_str(str(extra.get("env_key") or "OPENAI_API_KEY")),
        ]
        for key in ("request_max_retries", "stream_max_retries", "stream_idle_timeout_ms"):
            if extra.get(key) is not None:
                lines.append("%s = %d" % (key, int(extra[key])))
    lines += [
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",  # this alone stops app-server's plugin sync with github.com / chatgpt.com
        "apps = false",
        "remote_plugin = false",
    ]
    lines += mcp_codex_toml(cfg.mcp_servers)  # the Environment's MCP servers (mcp.py)
    if extra.get("codex_config"):
        lines += ["", str(extra["codex_config"])]
    if not os.path.isdir(home):
        os.makedirs(home, 0o700)
    path = os.path.join(home, "config.toml")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o600)
    if cfg.run_as and os.getuid() == 0:
        uid = int(cfg.run_as["uid"])
        gid = int(cfg.run_as.get("gid", uid))
        os.chown(home, uid, gid)
        os.chown(tmp, uid, gid)
    os.rename(tmp, path)
    return path


def fork_state_home(cfg: TurnConfig) -> str:
    """An empty state database directory for a fork's first turn. Codex's state database records each
    thread's rollout by absolute path; a cloned volume mounted at another path (the local pod runner's
    clones) carries the parent's, and thread/fork refuses it ("must be in Codex home directory"). Without
    the database Codex finds the rollout under $CODEX_HOME/sessions itself; later turns use the usual one."""
    path = os.path.join(codex_home(cfg), "fork-state")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, 0o700)
    if cfg.run_as and os.getuid() == 0:
        os.chown(path, int(cfg.run_as["uid"]), int(cfg.run_as.get("gid", cfg.run_as["uid"])))
    return path


class _Turn(object):
    def __init__(self, cfg: TurnConfig, seq: int) -> None:
        self.cfg = cfg
        self.id = cfg.turn_id
        self.seq = seq
        self.proc = None  # type: Any
        self.writer = None  # type: Optional[StdinWriter]
        self.reader = None  # type: Optional[LineReader]
        self.rpc = None  # type: Optional[_Rpc]
        self.thread_id = None  # type: Optional[str]
        self.codex_turn = None  # type: Optional[str]
        self.turn_start_sent = False
        self.pending = {}  # type: Dict[str, Dict[str, Any]]  # open approvals by our request_id
        self.answered = {}  # type: Dict[Any, str]  # codex request id -> our request_id, answered by us
        self.items = {}  # type: Dict[str, Dict[str, Any]]  # items started and not completed
        self.deltas = {}  # type: Dict[str, List[str]]
        self.last_text = ""
        self.token_notes = []  # type: List[Tuple[Optional[str], Dict[str, Any]]]
        self.status = None  # type: Optional[str]
        self.turn_error = None  # type: Optional[str]
        self.last_error = None  # type: Optional[str]
        self.inflight_steers = {}  # type: Dict[str, List[Any]]  # steer_id -> its turn/steer answer slot
        self.interrupted = False
        self.finishing = False
        self.ended = False
        self.timer = None  # type: Optional[threading.Timer]
        self.continue_with = None  # type: Optional[Tuple[Optional[str], str]]  # (interrupt id, message)


def _usage_of(total: Dict[str, Any]) -> Dict[str, int]:
    return {
        "input_tokens": int(total.get("inputTokens") or 0),
        "output_tokens": int(total.get("outputTokens") or 0),
        "cache_read_input_tokens": int(total.get("cachedInputTokens") or 0),
        "reasoning_output_tokens": int(total.get("reasoningOutputTokens") or 0),
    }


class CodexHarness(Harness):
    name = "codex"
    live = True

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        # Our own lock for the turn state, shared with the reader thread. Not ``self.lock``: the core may hold
        # that one while it calls us (a steer waiting on codex), and the reader must never wait for the core.
        self._mu = threading.RLock()
        self._turn = None  # type: Optional[_Turn]
        self._seq = itertools.count(1)
        self._usage = {}  # type: Dict[str, int]  # totals of the turns that ended

    # -- the contract ----------------------------------------------------------------------------------------

    def start_turn(self, cfg: TurnConfig) -> None:
        with self._mu:
            if self._turn is not None and not self._turn.ended:
                raise RuntimeError("a turn is already running")
            turn = _Turn(cfg, next(self._seq))
            self._turn = turn
        self.emit("turn_started", {"turn": cfg.turn_id})
        try:
            write_config(cfg)
        except OSError as e:
            self._end(turn, "failed", 1, "cannot write codex config: %s" % e)
            return
        argv = list(cfg.argv_prefix or ["codex"]) + ["app-server"]
        extra_env = {} if "RUST_LOG" in cfg.env else {"RUST_LOG": "error"}
        if cfg.fork and cfg.conversation:
            try:
                extra_env["CODEX_SQLITE_HOME"] = fork_state_home(cfg)
            except OSError as e:
                self._end(turn, "failed", 1, "cannot prepare the fork's codex state: %s" % e)
                return
        try:
            proc = spawn_agent(argv, cfg, extra_env)
        except OSError as e:
            self._end(turn, "failed", 127, "cannot start %s: %s" % (argv[0], e))
            return
        with self._mu:
            turn.proc = proc
            turn.writer = StdinWriter(proc)
            turn.rpc = _Rpc(turn.writer)
            turn.reader = LineReader(
                proc,
                "codex",
                lambda obj: self._on_message(turn, obj),
                lambda: self._on_eof(turn),
                lambda line: self.emit("log", {"level": "debug", "message": "codex: " + line[:500]}),
            )
            turn.reader.start()
        rpc = turn.rpc
        auto = cfg.approvals == "auto"
        settings = {
            "cwd": cfg.cwd,
            "approvalPolicy": "never" if auto else "untrusted",
            "sandbox": "danger-full-access",
        }  # type: Dict[str, Any]
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
                turn.timer = threading.Timer(EXIT_GRACE, kill_group, [proc])
                turn.timer.daemon = True
                turn.timer.start()
            if turn.writer is not None:
                turn.writer.close()

    def steer(self, steer_id: str, message: str) -> None:
        slot = None  # type: Optional[List[Any]]
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
            _Rpc.wait(slot, "turn/steer", STEER_TIMEOUT)
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
            turn = self._turn
            if turn is None or turn.ended or turn.finishing or turn.interrupted:
                return
            turn.interrupted = True
            if message:
                turn.continue_with = (interrupt_id, message)
            rpc = turn.rpc
            params = {"threadId": turn.thread_id, "turnId": turn.codex_turn}
            turn.timer = threading.Timer(INTERRUPT_GRACE, self._interrupt_timeout, [turn])
            turn.timer.daemon = True
            turn.timer.start()
        if rpc is None or not turn.codex_turn:
            self._interrupt_timeout(turn)
            return
        rpc.send("turn/interrupt", params)  # confirmed by turn/completed (status interrupted)

    def answer(self, request_id: str, decision: str, message: Optional[str] = None) -> None:
        if decision not in _DECISIONS_V2:
            raise ValueError("decision must be allow, deny or allow_always, not %r" % decision)
        with self._mu:
            turn = self._turn
            req = turn.pending.pop(request_id, None) if turn is not None else None
            if turn is None or req is None or turn.writer is None:
                self.emit(
                    "log", {"level": "warning", "message": "no open permission request %s" % request_id}
                )
                return
            turn.answered[req["rpc_id"]] = request_id
            if req.get("mcp"):
                turn.writer.write({"id": req["rpc_id"], "result": _mcp_answer(decision)})
            else:
                if req["legacy"]:
                    value = _DECISIONS_V1[decision]  # type: Any
                    if decision == "deny":
                        value = {"denied": {"rejection": message or "The user denied this."}}
                else:
                    value = _DECISIONS_V2[decision]
                turn.writer.write({"id": req["rpc_id"], "result": {"decision": value}})
        if decision == "deny" and message and not req["legacy"]:
            # Codex's decline carries no text: hand the agent the reason as a steer.
            what = req.get("command") or "that change"
            try:
                self._send_steer(turn, "I denied %s: %s" % (what, message))
            except RpcError as e:
                self.emit(
                    "log", {"level": "warning", "message": "could not pass the deny message on: %s" % e}
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
    def _steer_params(turn: _Turn, text: str) -> Dict[str, Any]:
        return {
            "threadId": turn.thread_id,
            "expectedTurnId": turn.codex_turn,
            "input": [{"type": "text", "text": text}],
        }

    def _send_steer(self, turn: _Turn, text: str) -> None:
        with self._mu:
            rpc = turn.rpc
            params = self._steer_params(turn, text)
        if rpc is None:
            raise RpcError(None, "no codex process")
        rpc.call("turn/steer", params, STEER_TIMEOUT)

    def _emit_all(self, events: List[Event]) -> None:
        for name, payload in events:
            self.emit(name, payload)

    def _turn_usage(self, turn: _Turn) -> Dict[str, int]:
        """This turn's tokens: the thread's total now, less its total before the turn (a resumed thread
        reports its earlier total first, under the earlier turn's id)."""
        ours = [t for tid, t in turn.token_notes if turn.codex_turn and tid == turn.codex_turn]
        before = [t for tid, t in turn.token_notes if not (turn.codex_turn and tid == turn.codex_turn)]
        if not ours:
            if turn.codex_turn or not before:
                return _usage_of({})
            ours, before = before[-1:], before[:-1]
        now = _usage_of(ours[-1])
        base = _usage_of(before[-1]) if before else _usage_of({})
        return dict((k, max(0, now[k] - base[k])) for k in now)

    def _cumulative(self, turn: _Turn) -> Dict[str, Any]:
        usage = dict(self._usage)
        for k, v in self._turn_usage(turn).items():
            usage[k] = usage.get(k, 0) + v
        out = dict(usage)  # type: Dict[str, Any]
        out["cost_usd"] = None
        return out

    # -- reading codex ---------------------------------------------------------------------------------------

    def _on_message(self, turn: _Turn, msg: Dict[str, Any]) -> None:
        if "id" in msg and "method" not in msg:
            if turn.rpc is not None:
                turn.rpc.resolve(msg)
            return
        events = []  # type: List[Event]
        finish = False
        with self._mu:
            method = str(msg.get("method") or "")
            params = msg.get("params") or {}
            if "id" in msg:
                self._on_server_request(turn, msg["id"], method, params, events)
            else:
                finish = self._on_notification(turn, method, params, events)
        self._emit_all(events)
        if finish and turn.writer is not None:
            turn.writer.close()  # app-server exits; _on_eof ends the turn

    def _on_server_request(
        self, turn: _Turn, rpc_id: Any, method: str, params: Dict[str, Any], events: List[Event]
    ) -> None:
        request_id = "codex-%d-%s" % (turn.seq, rpc_id)
        if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
            legacy = method == "execCommandApproval"
            command = params.get("command")
            if isinstance(command, list):
                command = " ".join(str(c) for c in command)
            cwd = params.get("cwd") or turn.cfg.cwd
            tool_input = {"command": command, "cwd": cwd}  # type: Dict[str, Any]
            actions = params.get("commandActions")
            if isinstance(actions, list):
                tool_input["parsed"] = [a.get("command") for a in actions if isinstance(a, dict)]
            if params.get("reason"):
                tool_input["reason"] = params["reason"]
            turn.pending[request_id] = {"rpc_id": rpc_id, "legacy": legacy, "command": command}
            events.append(
                (
                    "permission_request",
                    {
                        "request_id": request_id,
                        "tool": "shell",
                        "input": tool_input,
                        "command": command if isinstance(command, str) else None,
                        "cwd": cwd,
                        "suggestions": params.get("availableDecisions") or [],
                    },
                )
            )
        elif method in ("item/fileChange/requestApproval", "applyPatchApproval"):
            legacy = method == "applyPatchApproval"
            item = turn.items.get(str(params.get("itemId"))) or {}
            tool_input = {"changes": item.get("changes") or params.get("fileChanges") or []}
            if params.get("reason"):
                tool_input["reason"] = params["reason"]
            if params.get("grantRoot"):
                tool_input["grant_root"] = params["grantRoot"]
            turn.pending[request_id] = {"rpc_id": rpc_id, "legacy": legacy, "command": None}
            events.append(
                (
                    "permission_request",
                    {
                        "request_id": request_id,
                        "tool": "apply_patch",
                        "input": tool_input,
                        "command": None,
                        "cwd": turn.cfg.cwd,
                        "suggestions": [],
                    },
                )
            )
        elif method == "mcpServer/elicitation/request" and _mcp_approval(params):
            self._mcp_permission(turn, rpc_id, request_id, params, events)
        elif method == "mcpServer/elicitation/request":
            if turn.writer is not None:
                turn.writer.write({"id": rpc_id, "result": {"action": "decline"}})
        else:
            # Permission-profile requests, user input, dynamic tools, auth refresh: not ours to grant.
            if turn.writer is not None:
                turn.writer.write(
                    {"id": rpc_id, "error": {"code": -32601, "message": "hangar does not handle %s" % method}}
                )
            events.append(("log", {"level": "warning", "message": "codex asked %s: refused" % method}))

    @staticmethod
    def _mcp_permission(
        turn: _Turn, rpc_id: Any, request_id: str, params: Dict[str, Any], events: List[Event]
    ) -> None:
        """An MCP tool call waiting for approval: a permission_request for ``mcp__<server>__<tool>``."""
        meta = params.get("_meta") or {}
        server = str(params.get("serverName") or "")
        tool = "mcp__%s__%s" % (server, meta.get("tool_name") or "")
        tool_input = meta.get("tool_params")
        turn.pending[request_id] = {
            "rpc_id": rpc_id,
            "legacy": False,
            "mcp": True,
            "command": "the MCP tool %s of %s" % (meta.get("tool_name"), server),
        }
        events.append(
            (
                "permission_request",
                {
                    "request_id": request_id,
                    "tool": tool,
                    "input": tool_input if isinstance(tool_input, dict) else {},
                    "command": None,
                    "cwd": turn.cfg.cwd,
                    "suggestions": [],
                },
            )
        )

    def _on_notification(self, turn: _Turn, method: str, params: Dict[str, Any], events: List[Event]) -> bool:
        if method == "item/started":
            item = params.get("item") or {}
            iid = str(item.get("id"))
            kind = item.get("type")
            if kind in (
                "commandExecution",
                "fileChange",
                "mcpToolCall",
                "webSearch",
                "agentMessage",
                "dynamicToolCall",
            ):
                turn.items[iid] = item
            if kind == "commandExecution":
                events.append(
                    (
                        "tool_use",
                        {
                            "tool": "shell",
                            "input": {"command": item.get("command"), "cwd": item.get("cwd")},
                            "id": iid,
                        },
                    )
                )
            elif kind == "fileChange":
                events.append(
                    (
                        "tool_use",
                        {"tool": "apply_patch", "input": {"changes": item.get("changes")}, "id": iid},
                    )
                )
            elif kind == "mcpToolCall":
                name = "mcp__%s__%s" % (item.get("server"), item.get("tool"))  # Claude Code's spelling
                args = item.get("arguments")
                events.append(
                    ("tool_use", {"tool": name, "input": args if isinstance(args, dict) else {}, "id": iid})
                )
            elif kind == "webSearch":
                events.append(
                    ("tool_use", {"tool": "web_search", "input": {"query": item.get("query")}, "id": iid})
                )
        elif method == "item/agentMessage/delta":
            turn.deltas.setdefault(str(params.get("itemId")), []).append(str(params.get("delta") or ""))
        elif method == "item/completed":
            item = params.get("item") or {}
            iid = str(item.get("id"))
            kind = item.get("type")
            turn.items.pop(iid, None)
            turn.deltas.pop(iid, None)
            if kind == "agentMessage":
                text = item.get("text") or ""
                if text:
                    turn.last_text = text
                    events.append(("text", {"text": text}))
            elif kind == "commandExecution":
                status = item.get("status")
                code = item.get("exitCode")
                events.append(
                    (
                        "tool_result",
                        {
                            "id": iid,
                            "is_error": status != "completed" or (code is not None and code != 0),
                            "output": text_of(item.get("aggregatedOutput") or "") or "(%s)" % status,
                        },
                    )
                )
            elif kind in ("fileChange", "mcpToolCall", "webSearch", "dynamicToolCall"):
                status = item.get("status")
                result = item.get("result") or item.get("error") or ""
                events.append(
                    (
                        "tool_result",
                        {
                            "id": iid,
                            "is_error": status in ("failed", "declined"),
                            "output": text_of(result) if result else "(%s)" % status,
                        },
                    )
                )
        elif method == "serverRequest/resolved":
            rpc_id = params.get("requestId")
            if rpc_id in turn.answered:
                turn.answered.pop(rpc_id, None)
            else:
                request_id = "codex-%d-%s" % (turn.seq, rpc_id)
                if turn.pending.pop(request_id, None) is not None:
                    events.append(("permission_cancelled", {"request_id": request_id}))
        elif method == "thread/tokenUsage/updated":
            total = (params.get("tokenUsage") or {}).get("total") or {}
            turn.token_notes.append((params.get("turnId"), total))
            events.append(("usage", self._cumulative(turn)))
        elif method == "error":
            err = params.get("error") or {}
            turn.last_error = str(err.get("message") or err)
            level = "info" if params.get("willRetry") else "warning"
            events.append(("log", {"level": level, "message": "codex: %s" % turn.last_error}))
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

    def _on_eof(self, turn: _Turn) -> None:
        if turn.rpc is not None:
            turn.rpc.fail_all()
        proc = turn.proc
        code = wait_or_kill(proc, EXIT_GRACE) if proc is not None else -1
        if turn.reader is not None:
            turn.reader.join_stderr()
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

    def _continue_after_interrupt(self, turn: _Turn, events: List[Event]) -> None:
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
                result = _Rpc.wait(slot, "turn/start", RPC_TIMEOUT)
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
            for sid, slot in list(turn.inflight_steers.items()):
                # A steer whose turn/steer answer is still being read: codex's answer decides, if it came.
                answered = slot[0].is_set() and isinstance(slot[1], dict) and "result" in slot[1]
                events.append(("steer", {"steer_id": sid, "status": "delivered" if answered else "queued"}))
            turn.inflight_steers = {}
            for rid in list(turn.pending):
                events.append(("permission_cancelled", {"request_id": rid}))
            turn.pending = {}
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
            turn_usage = self._turn_usage(turn)
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
                    "cost_usd": None,
                },
            )
        )
        self._emit_all(events)
