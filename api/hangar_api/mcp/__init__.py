"""hangar's MCP server on the API sidecar (docs/mcp.md)."""

from .server import mount, stop

__all__ = ["mount", "stop"]
