"""hangar's MCP server: streamable HTTP at ``/mcp`` on the API sidecar, one endpoint for both protocol eras
(2026-07-28 requests take the SDK's stateless path, handshake-era clients the ``initialize`` +
``Mcp-Session-Id`` one). ``create_app`` builds it, mounts it and runs its session manager in the app's
lifespan (a mounted app's own lifespan never runs).

Settings (``hangar.config.Settings``, from the environment):

- ``HANGAR_MCP_STATE_KEY``: the key sealing ``requestState`` between 2026-07-28 rounds (32+ bytes of text).
  Give every API replica the same one; without it each process makes its own, and a retry that reaches
  another replica (or comes after a restart) is refused as "Invalid or expired requestState".
- ``HANGAR_MCP_ALLOWED_HOSTS``: comma-separated ``Host`` values (e.g. ``hangar.example.com,127.0.0.1:*``)
  to turn on the SDK's DNS-rebinding check. Off by default: every request carries a bearer token anyway.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from hangar.config import Settings

from .auth import TokensVerifier
from .common import Hub
from .resources import register_resources
from .subscriptions import Subscriptions
from .tools import register

PATH = "/mcp"
# A person may take up to 15 minutes over a form; the sealed state must outlive that.
STATE_TTL_SECONDS = 30 * 60

INSTRUCTIONS = (
    "hangar runs coding agents as named sessions and jobs. wait_for_turn waits for a turn and puts the "
    "agent's tool approvals and questions to you; get_session / get_job read them; send_to_session, "
    "follow_up_job and steer_turn talk to the agent; answer_approval decides a tool approval."
)


def build(app: FastAPI) -> MCPServer[Any]:
    verifier = TokensVerifier(app.state)
    subscriptions = app.state.mcp_subscriptions = Subscriptions(Hub(app.state), verifier)
    settings: Settings = app.state.settings
    key = settings.mcp_state_key
    security = (
        RequestStateSecurity(keys=[key.get_secret_value()], ttl=STATE_TTL_SECONDS)
        if key
        else RequestStateSecurity.ephemeral(ttl=STATE_TTL_SECONDS)
    )
    server: MCPServer[Any] = MCPServer(
        "hangar",
        version="0.1.0",
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        # Static bearer tokens: there is no authorization server, and no resource metadata to publish.
        auth=AuthSettings(issuer_url="https://hangar.invalid", resource_server_url=None),
        request_state_security=security,
        subscriptions=subscriptions.bus,
    )
    register(server, Hub(app.state), verifier)
    register_resources(server, Hub(app.state), verifier)
    subscriptions.register(server)
    return server


def stop(state: Any) -> None:
    """Stops the subscriptions' watches and poll (the app's lifespan ends)."""
    subscriptions: Subscriptions | None = getattr(state, "mcp_subscriptions", None)
    if subscriptions is not None:
        subscriptions.stop()


def mount(app: FastAPI) -> MCPServer[Any]:
    """Build the server and route ``/mcp`` to it. Returns it: the caller runs ``session_manager.run()``."""
    server = build(app)
    settings: Settings = app.state.settings
    hosts = list(settings.mcp_allowed_hosts)
    security = (
        TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts)
        if hosts
        else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    asgi = server.streamable_http_app(streamable_http_path=PATH, transport_security=security)
    # The route passes the request on unchanged (path /mcp), so the SDK app's own auth middleware and
    # route see it as if it stood alone.
    app.router.routes.append(Route(PATH, endpoint=asgi, include_in_schema=False))
    return server
