"""Claude Code's turn state and stream-json frames: the command line of a live turn, the user lines hangar
writes, and how each frame the CLI prints changes the turn and becomes hangar events (see ``claude.py`` for
the protocol and the adapter).

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any, Dict, List, Optional, Set, Tuple

from .claude_grants import Grants, ask_settings_args
from .harness import Event, TurnConfig
from .live import LiveTurn
from .mcp import claude_args as mcp_claude_args
from .process import text_of


def zero_usage() -> Dict[str, int]:
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
    argv = [
        *list(cfg.argv_prefix or ["claude"]),
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
    extra_env: Dict[str, str] = {k: "1" for k in QUIET_ENV if k not in cfg.env}
    if cfg.approvals == "auto":
        # The CLI's own checks off. As root it refuses this unless told it runs in a sandbox (it does).
        argv += ["--permission-mode", "bypassPermissions"]
        extra_env["IS_SANDBOX"] = "1"
    # The Environment's MCP servers, and only those (mcp.py).
    argv += mcp_claude_args(cfg.mcp_servers)
    extra_args = [str(a) for a in (cfg.extra.get("claude_args") or [])]
    if cfg.approvals != "auto":
        # Every shell command and file edit asks, the ones the CLI deems read-only too (claude_grants.py).
        extra_args = ask_settings_args(extra_args)
    argv += extra_args
    return argv, extra_env


def settings_fingerprint(cfg: TurnConfig) -> Tuple[Any, ...]:
    """The files Claude Code reads its settings and memory from, as (path, mtime, size) of those that exist:
    a pre-started CLI that read older ones is not used (``live.py``)."""
    home = cfg.env.get("HOME") or ""
    paths = [
        os.path.join(cfg.cwd, ".claude", "settings.json"),
        os.path.join(cfg.cwd, ".claude", "settings.local.json"),
        os.path.join(cfg.cwd, ".mcp.json"),
        os.path.join(cfg.cwd, "CLAUDE.md"),
        os.path.join(cfg.cwd, "CLAUDE.local.md"),
        os.path.join(cfg.cwd, ".claude", "CLAUDE.md"),
        "/etc/claude-code/managed-settings.json",
    ]
    if home:
        paths += [os.path.join(home, ".claude", "settings.json"), os.path.join(home, ".claude", "CLAUDE.md")]
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((path, st.st_mtime_ns, st.st_size))
    return tuple(out)


def user_line(text: str, line_uuid: str) -> Dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        "parent_tool_use_id": None,
        "session_id": "",
        # Our own uuid: the CLI reports this line's fate in command_lifecycle frames keyed by it.
        "uuid": line_uuid,
    }


def session_permissions(req: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The CLI's own suggestions, kept in the running process only (destination ``session``)."""
    out = []
    for s in req.get("suggestions") or []:
        if isinstance(s, dict):
            s = dict(s)
            s["destination"] = "session"
            out.append(s)
    if not out and req.get("tool"):
        rule: Dict[str, Any] = {"toolName": req["tool"]}
        command = (req.get("input") or {}).get("command")
        if isinstance(command, str):
            rule["ruleContent"] = command
        out.append({"type": "addRules", "rules": [rule], "behavior": "allow", "destination": "session"})
    return out


class ClaudeTurn(LiveTurn):
    """One turn's ``claude -p`` process, and how the frames it prints change the turn (into events)."""

    def __init__(self, cfg: TurnConfig) -> None:
        LiveTurn.__init__(self, cfg)
        self.message_uuid = str(uuid.uuid4())
        self.held: List[Tuple[str, str]] = []  # (steer_id, text): not written yet
        self.written: Dict[str, str] = {}  # CLI uuid -> steer_id: written, not taken in yet
        self.open_tools: Set[str] = set()
        self.results: List[Dict[str, Any]] = []
        self.cli_busy = False  # a CLI turn runs: between a message being taken in and that turn's result
        self.interrupt_request_id: Optional[str] = None
        self.usage = zero_usage()  # this process's totals (modelUsage is cumulative per process)
        self.cost: Optional[float] = None
        self.session_id: Optional[str] = None
        self.written_at: Dict[str, float] = {}  # steer_id -> when it was written to the CLI
        self.grants = Grants()  # this turn's allow_always answers for ASK_TOOLS (claude_grants.py)

    def write_steer(self, steer_id: str, text: str) -> None:
        line_uuid = str(uuid.uuid4())
        self.written[line_uuid] = steer_id
        self.written_at[steer_id] = time.time()
        if self.writer is None or not self.writer.write(user_line(text, line_uuid)):
            # The CLI is gone: it never got it. The turn's end reports it queued.
            pass

    def on_assistant(self, obj: Dict[str, Any], events: List[Event]) -> None:
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
                self.open_tools.add(tid)
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
        if new_tool and self.held and not self.interrupted and not self.finishing:
            # A tool is in flight now: the CLI will read held steers with its result.
            held, self.held = self.held, []
            for sid, text in held:
                self.write_steer(sid, text)

    def on_user(self, obj: Dict[str, Any], events: List[Event]) -> None:
        if obj.get("parent_tool_use_id") or obj.get("isReplay"):
            return
        content = (obj.get("message") or {}).get("content")
        if not isinstance(content, list):
            return
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                tid = str(block.get("tool_use_id"))
                self.open_tools.discard(tid)
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

    def on_lifecycle(self, obj: Dict[str, Any], events: List[Event]) -> None:
        line_uuid = str(obj.get("command_uuid"))
        state = obj.get("state")
        if line_uuid == self.message_uuid:
            if state == "started":
                self.cli_busy = True
            return
        steer_id = self.written.get(line_uuid)
        if steer_id is None:
            return
        if state == "started":
            del self.written[line_uuid]
            if self.timer is not None and not self.interrupted:
                self.timer.cancel()
                self.timer = None
            if not self.cli_busy:
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
            self.cli_busy = True
            events.append(
                (
                    "steer",
                    {
                        "steer_id": steer_id,
                        "status": "delivered",
                        "written_at": self.written_at.pop(steer_id, None),
                    },
                )
            )
        elif state == "cancelled":
            del self.written[line_uuid]
            events.append(("steer", {"steer_id": steer_id, "status": "queued"}))

    def allow_granted(self, rid: str, tool: str, tool_input: Dict[str, Any], events: List[Event]) -> None:
        """A call an earlier allow_always of this turn covers: allowed here, as the CLI's own session rule
        would have allowed it (the ask rule outranks those)."""
        if self.writer is not None:
            self.writer.write(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "success",
                        "request_id": rid,
                        "response": {"behavior": "allow", "updatedInput": tool_input},
                    },
                }
            )
        command = tool_input.get("command")
        what = command if isinstance(command, str) else "%s %s" % (tool, json.dumps(tool_input)[:200])
        events.append(
            (
                "log",
                {"level": "info", "message": "allowed by this turn's allow_always: %s" % what[:500]},
            )
        )

    def on_control_request(self, obj: Dict[str, Any], events: List[Event]) -> None:
        rid = str(obj.get("request_id"))
        req = obj.get("request") or {}
        if req.get("subtype") == "can_use_tool":
            tool_input = req.get("input") or {}
            tool = str(req.get("tool_name") or "")
            if isinstance(tool_input, dict) and self.grants.covers(tool, tool_input):
                self.allow_granted(rid, tool, tool_input, events)
                return
            pending = {
                "tool": req.get("tool_name") or "",
                "input": tool_input,
                "suggestions": req.get("permission_suggestions") or [],
            }
            self.pending[rid] = pending
            command = tool_input.get("command") if isinstance(tool_input, dict) else None
            events.append(
                (
                    "permission_request",
                    {
                        "request_id": rid,
                        "tool": pending["tool"],
                        "input": tool_input,
                        "command": command if isinstance(command, str) else None,
                        "cwd": self.cfg.cwd,
                        "suggestions": pending["suggestions"],
                    },
                )
            )
            return
        # Nothing else is ours to answer (hooks, MCP, elicitation): say so rather than leave the CLI waiting.
        if self.writer is not None:
            self.writer.write(
                {
                    "type": "control_response",
                    "response": {
                        "subtype": "error",
                        "request_id": rid,
                        "error": "hangar does not handle %s" % req.get("subtype"),
                    },
                }
            )
