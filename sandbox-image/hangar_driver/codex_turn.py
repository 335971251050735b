"""Codex's turn state and app-server messages: how the requests Codex sends (approvals, MCP elicitations) and
its item notifications change the turn and become hangar events (see ``codex.py`` for the protocol and the
adapter).

Standard library only, Python 3.8+.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .codex_rpc import Rpc
from .harness import Event, TurnConfig
from .live import LiveTurn
from .process import text_of


def _mcp_approval(params: Dict[str, Any]) -> bool:
    """Codex asks whether an MCP tool may run as an elicitation of its own (approvals other than never)."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and meta.get("codex_approval_kind") == "mcp_tool_call"


def _mcp_answer(decision: str) -> Dict[str, Any]:
    """The elicitation result for an MCP tool call's approval: accept (for the session) or decline."""
    if decision == "deny":
        return {"action": "decline"}
    result: Dict[str, Any] = {"action": "accept", "content": {}}
    if decision == "allow_always":
        result["_meta"] = {"persist": "session"}
    return result


def _usage_of(total: Dict[str, Any]) -> Dict[str, int]:
    return {
        "input_tokens": int(total.get("inputTokens") or 0),
        "output_tokens": int(total.get("outputTokens") or 0),
        "cache_read_input_tokens": int(total.get("cachedInputTokens") or 0),
        "reasoning_output_tokens": int(total.get("reasoningOutputTokens") or 0),
    }


class CodexTurn(LiveTurn):
    """One turn's app-server process, and how Codex's requests and item notifications change the turn (into
    events)."""

    def __init__(self, cfg: TurnConfig, seq: int) -> None:
        LiveTurn.__init__(self, cfg)
        self.seq = seq
        self.rpc: Optional[Rpc] = None
        self.thread_id: Optional[str] = None
        self.codex_turn: Optional[str] = None
        self.turn_start_sent = False
        self.answered: Dict[Any, str] = {}  # codex request id -> our request_id, answered by us
        self.items: Dict[str, Dict[str, Any]] = {}  # items started and not completed
        self.deltas: Dict[str, List[str]] = {}
        self.last_text = ""
        self.token_notes: List[Tuple[Optional[str], Dict[str, Any]]] = []
        self.status: Optional[str] = None
        self.turn_error: Optional[str] = None
        self.last_error: Optional[str] = None
        self.inflight_steers: Dict[str, List[Any]] = {}  # steer_id -> its turn/steer answer slot

    def usage(self) -> Dict[str, int]:
        """This turn's tokens: the thread's total now, less its total before the turn (a resumed thread
        reports its earlier total first, under the earlier turn's id)."""
        ours = [t for tid, t in self.token_notes if self.codex_turn and tid == self.codex_turn]
        before = [t for tid, t in self.token_notes if not (self.codex_turn and tid == self.codex_turn)]
        if not ours:
            if self.codex_turn or not before:
                return _usage_of({})
            ours, before = before[-1:], before[:-1]
        now = _usage_of(ours[-1])
        base = _usage_of(before[-1]) if before else _usage_of({})
        return dict((k, max(0, now[k] - base[k])) for k in now)

    def on_server_request(
        self, rpc_id: Any, method: str, params: Dict[str, Any], events: List[Event]
    ) -> None:
        request_id = "codex-%d-%s" % (self.seq, rpc_id)
        if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
            legacy = method == "execCommandApproval"
            command = params.get("command")
            if isinstance(command, list):
                command = " ".join(str(c) for c in command)
            cwd = params.get("cwd") or self.cfg.cwd
            tool_input: Dict[str, Any] = {"command": command, "cwd": cwd}
            actions = params.get("commandActions")
            if isinstance(actions, list):
                tool_input["parsed"] = [a.get("command") for a in actions if isinstance(a, dict)]
            if params.get("reason"):
                tool_input["reason"] = params["reason"]
            self._ask(
                {"rpc_id": rpc_id, "legacy": legacy, "command": command},
                events,
                request_id=request_id,
                tool="shell",
                input=tool_input,
                command=command if isinstance(command, str) else None,
                cwd=cwd,
                suggestions=params.get("availableDecisions") or [],
            )
        elif method in ("item/fileChange/requestApproval", "applyPatchApproval"):
            legacy = method == "applyPatchApproval"
            item = self.items.get(str(params.get("itemId"))) or {}
            tool_input = {"changes": item.get("changes") or params.get("fileChanges") or []}
            if params.get("reason"):
                tool_input["reason"] = params["reason"]
            if params.get("grantRoot"):
                tool_input["grant_root"] = params["grantRoot"]
            self._ask(
                {"rpc_id": rpc_id, "legacy": legacy, "command": None},
                events,
                request_id=request_id,
                tool="apply_patch",
                input=tool_input,
            )
        elif method == "mcpServer/elicitation/request" and _mcp_approval(params):
            self.mcp_permission(rpc_id, request_id, params, events)
        elif method == "mcpServer/elicitation/request":
            if self.writer is not None:
                self.writer.write({"id": rpc_id, "result": {"action": "decline"}})
        else:
            # Permission-profile requests, user input, dynamic tools, auth refresh: not ours to grant.
            if self.writer is not None:
                self.writer.write(
                    {"id": rpc_id, "error": {"code": -32601, "message": "hangar does not handle %s" % method}}
                )
            events.append(("log", {"level": "warning", "message": "codex asked %s: refused" % method}))

    def mcp_permission(
        self, rpc_id: Any, request_id: str, params: Dict[str, Any], events: List[Event]
    ) -> None:
        """An MCP tool call waiting for approval: a permission_request for ``mcp__<server>__<tool>``."""
        meta = params.get("_meta") or {}
        server = str(params.get("serverName") or "")
        tool = "mcp__%s__%s" % (server, meta.get("tool_name") or "")
        tool_input = meta.get("tool_params")
        self._ask(
            {
                "rpc_id": rpc_id,
                "legacy": False,
                "mcp": True,
                "command": "the MCP tool %s of %s" % (meta.get("tool_name"), server),
            },
            events,
            request_id=request_id,
            tool=tool,
            input=tool_input if isinstance(tool_input, dict) else {},
        )

    def _ask(self, pending: Dict[str, Any], events: List[Event], **request: Any) -> None:
        """Keep an approval codex waits on (``pending``: how to answer it) and report it as a
        permission_request (fields not given: no command, the turn's cwd, no suggestions)."""
        self.pending[str(request["request_id"])] = pending
        payload = dict(request)
        payload.setdefault("command", None)
        payload.setdefault("cwd", self.cfg.cwd)
        payload.setdefault("suggestions", [])
        events.append(("permission_request", payload))

    def on_item(self, method: str, params: Dict[str, Any], events: List[Event]) -> bool:
        """An item, approval or error notification; False when ``method`` is none of those."""
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
                self.items[iid] = item
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
            self.deltas.setdefault(str(params.get("itemId")), []).append(str(params.get("delta") or ""))
        elif method == "item/completed":
            item = params.get("item") or {}
            iid = str(item.get("id"))
            kind = item.get("type")
            self.items.pop(iid, None)
            self.deltas.pop(iid, None)
            if kind == "agentMessage":
                text = item.get("text") or ""
                if text:
                    self.last_text = text
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
            if rpc_id in self.answered:
                self.answered.pop(rpc_id, None)
            else:
                request_id = "codex-%d-%s" % (self.seq, rpc_id)
                if self.pending.pop(request_id, None) is not None:
                    events.append(("permission_cancelled", {"request_id": request_id}))
        elif method == "error":
            err = params.get("error") or {}
            self.last_error = str(err.get("message") or err)
            level = "info" if params.get("willRetry") else "warning"
            events.append(("log", {"level": level, "message": "codex: %s" % self.last_error}))
        else:
            return False
        return True
