"""Stateless 2026-07-28 MCP requests as raw HTTP, for the benches that time them without a client library
(``mcp_load.py``'s waiters, ``scale.py``'s inbox reads): the request's ``_meta`` envelope and headers."""

from __future__ import annotations

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def headers(method: str, name: str | None = None) -> dict[str, str]:
    """The headers of one request (``Mcp-Name``: the tool or resource it names, if any)."""
    out = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name:
        out["Mcp-Name"] = name
    return out
