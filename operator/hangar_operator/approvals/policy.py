"""Pure rules of the approvals side: names, what a person is shown, which tool results taint, and the times a
sandbox claims."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hangar.approvals import canonical_json, display_command
from hangar.models.environment import EnvironmentSpec

AGENT_HOME = "/home/agent"
# Claude Code's and Codex's web tools: their results are untrusted content.
WEB_TOOLS = frozenset({"WebFetch", "WebSearch", "web_search", "web_fetch"})
# The CLIs' own tools that read an MCP server's resource ({"server": …, "uri": …}).
MCP_RESOURCE_TOOLS = frozenset({"ReadMcpResourceTool", "read_mcp_resource"})
MAX_TAINT_REASONS = 20
# How long before the operator received it a time the sandbox claims is still kept: an event resent after the
# driver's link was down a while is old but may be true; older than this it is dropped.
SANDBOX_TIME_MAX_AGE = timedelta(hours=1)


def approval_name(run: str, request_id: str) -> str:
    """``ap-<12 hex>``, the same for the same prompt: a re-applied driver event finds its Approval."""
    return "ap-" + hashlib.sha256(f"{run}\0{request_id}".encode()).hexdigest()[:12]


def shown_command(tool: str, tool_input: dict[str, Any], command: str | None) -> str:
    """What a person is shown: the shell command, else the tool and its input; at most 2,000 chars with
    both ends kept and the cut marked."""
    if command:
        return display_command(command)
    return display_command(f"{tool} {canonical_json(tool_input)}")


def mcp_server_of(tool: str) -> str | None:
    """The MCP server of a tool name: Claude ``mcp__<server>__<tool>``, Codex ``mcp:<server>.<tool>``."""
    if tool.startswith("mcp__"):
        server = tool[5:].split("__", 1)[0]
        return server or None
    if tool.startswith("mcp:"):
        server = tool[4:].split(".", 1)[0]
        return server or None
    return None


def resource_reader(tool: str, tool_input: Any) -> str | None:
    """A CLI tool reading an MCP server's resource, named as that server's tool (``mcp__<server>__<tool>``),
    so that its result taints like the server's own tools; None for any other tool."""
    if tool not in MCP_RESOURCE_TOOLS or not isinstance(tool_input, dict):
        return None
    server = tool_input.get("server")
    return f"mcp__{server}__{tool}" if isinstance(server, str) and server else None


def untrusted_source(tool: str, env: EnvironmentSpec | None) -> str | None:
    """Why reading this tool's result taints the turn, or None."""
    if tool in WEB_TOOLS:
        return f"read web content ({tool})"
    server = mcp_server_of(tool)
    if server is None:
        return None
    trust = "untrusted"
    for name, entry in (env.mcp if env else {}).items():
        spelled = {name, "".join(c if c.isalnum() or c in "_-" else "_" for c in name)}
        if server in spelled:
            trust = entry.trust
            break
    if trust == "trusted":
        return None
    return f"read a result of untrusted MCP server {server} ({tool})"


def sandbox_time(value: Any, received: datetime, not_before: datetime | None = None) -> datetime | None:
    """A time the sandbox claims (Unix seconds, its own clock), bounded by the operator's: one after
    ``received`` (when the operator had the event) is clamped to it; one before ``not_before`` (the turn's
    start), or more than ``SANDBOX_TIME_MAX_AGE`` before ``received``, is dropped (None), as is anything but a
    finite number. The sandbox is not trusted: the result is for showing and measuring only."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    earliest = received - SANDBOX_TIME_MAX_AGE
    if not_before is not None:
        earliest = max(earliest, not_before)
    # Compared as numbers first: a huge or negative value can't become a datetime.
    if value > received.timestamp():
        return received
    if value < earliest.timestamp():
        return None
    return datetime.fromtimestamp(float(value), UTC)
