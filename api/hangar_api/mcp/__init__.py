"""hangar's MCP server on the API sidecar (docs/mcp.md)."""

from .server import mount

__all__ = ["mount"]
