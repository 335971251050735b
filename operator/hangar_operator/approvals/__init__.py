"""The Approval controller: tool calls under a policy, decisions delivered exactly once, and taint."""

from .policy import approval_name, mcp_server_of, resource_reader, shown_command, untrusted_source

__all__ = ["approval_name", "mcp_server_of", "resource_reader", "shown_command", "untrusted_source"]
