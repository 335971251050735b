"""The Environment's MCP servers, handed to the agent's CLI.

Standard library only, Python 3.8+.

The operator puts the Environment's ``mcp:`` servers into the sandbox pod as ``HANGAR_MCP_SERVERS``: a JSON
object, name -> ``{"command": [argv...]}`` (stdio: the CLI starts it, so it runs as the agent, with the
agent's environment) or ``{"url": "https://..."}`` (streamable HTTP). Only how to reach a server travels:
its ``trust`` and ``write_tools`` stay with the operator, which decides taint and approvals; the CLI never
sees them, and no hangar credential is ever part of this.

Names are spelled the way Claude Code spells them in tool names (every character other than letters,
digits, ``_`` and ``-`` becomes ``_``), so a tool is ``mcp__<name>__<tool>`` for both CLIs and the
operator's ``write_tools`` patterns match either spelling.

* Claude Code: ``--mcp-config <json>`` plus ``--strict-mcp-config``, so that only the Environment's servers
  are loaded: a server the agent (or the repository) configured itself under a trusted server's name could
  otherwise pass for it.
* Codex: ``[mcp_servers.<name>]`` tables in ``$CODEX_HOME/config.toml``, which the driver rewrites before
  every turn.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple

ENV = "HANGAR_MCP_SERVERS"
MAX_SERVERS = 64
# Spelled with a set, not a regex: ``re`` is not compiled on the driver's way to its hello.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")

if TYPE_CHECKING:
    Servers = Dict[str, Dict[str, Any]]


def spelled(name: str) -> str:
    """The server's name as the CLIs use it in tool names."""
    return "".join(c if c in _SAFE else "_" for c in name) or "_"


def load(raw: str) -> Tuple[Servers, List[str]]:
    """Parse ``HANGAR_MCP_SERVERS``: (servers by spelled name, warnings). Bad entries are dropped with a
    warning rather than failing the sandbox."""
    warnings: List[str] = []
    servers: Servers = {}
    if not raw.strip():
        return servers, warnings
    import json  # here: a sandbox without MCP servers does not import it before its hello (wirejson.py)

    try:
        data = json.loads(raw)
    except ValueError as e:
        return servers, ["%s is not JSON (%s): no MCP servers" % (ENV, e)]
    if not isinstance(data, dict):
        return servers, ["%s must be a JSON object: no MCP servers" % ENV]
    for name in sorted(data)[:MAX_SERVERS]:
        entry = data[name]
        key = spelled(str(name))
        if not isinstance(entry, dict):
            warnings.append("MCP server %s dropped: not an object" % name)
            continue
        if key in servers:
            warnings.append("MCP server %s dropped: another server is also called %s" % (name, key))
            continue
        command = entry.get("command")
        url = entry.get("url")
        if isinstance(command, list) and command and all(isinstance(a, str) for a in command) and command[0]:
            servers[key] = {"command": list(command)}
        elif isinstance(url, str) and url.startswith(("http://", "https://")):
            servers[key] = {"url": url}
        else:
            warnings.append(
                "MCP server %s dropped: it needs a command (a list of strings) or an http(s) url" % name
            )
            continue
        if key != name:
            warnings.append("MCP server %s is called %s by the agent's CLI" % (name, key))
    return servers, warnings


def claude_args(servers: Servers) -> List[str]:
    """Claude Code's command-line arguments for these servers (none when there are none)."""
    if not servers:
        return []
    import json

    config: Dict[str, Any] = {}
    for name, entry in servers.items():
        if "command" in entry:
            config[name] = {"type": "stdio", "command": entry["command"][0], "args": entry["command"][1:]}
        else:
            config[name] = {"type": "http", "url": entry["url"]}
    return ["--mcp-config", json.dumps({"mcpServers": config}), "--strict-mcp-config"]


def codex_toml(servers: Servers) -> List[str]:
    """config.toml lines (tables) for these servers."""
    import json

    lines: List[str] = []
    for name, entry in servers.items():
        lines += ["", "[mcp_servers.%s]" % json.dumps(name)]
        if "command" in entry:
            lines.append("command = %s" % json.dumps(entry["command"][0]))
            lines.append("args = [%s]" % ", ".join(json.dumps(a) for a in entry["command"][1:]))
        else:
            lines.append("url = %s" % json.dumps(entry["url"]))
    return lines
