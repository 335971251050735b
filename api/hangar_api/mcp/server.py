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

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import FastAPI
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.request_state import RequestStateSecurity
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    InputRequiredResult,
    ServerCapabilities,
    TextContent,
)
from pydantic import AnyUrl, ValidationError
from starlette.routing import Route

from hangar.config import Settings

from . import artifacts
from .auth import TokensVerifier, mcp_caller
from .common import Hub, invalid_text
from .events import BoundedEventStore
from .live import register_live
from .live_watch import register_watch
from .resources import read_special, register_resources
from .subscriptions import Subscriptions
from .tasks import Tasks
from .tools import register

PATH = "/mcp"
# A person may take up to 15 minutes over a form; the sealed state must outlive that.
STATE_TTL_SECONDS = 30 * 60
# SSE `retry:` (ms) a handshake-era client waits before it resumes a dropped stream with Last-Event-ID.
RETRY_MS = 1000
# Protocol versions without the resource_link content block (it came with 2025-06-18).
NO_RESOURCE_LINKS = frozenset({"2024-11-05", "2025-03-26"})
SpecialRead = Callable[[str, Context[Any, Any]], Awaitable[list[ReadResourceContents] | None]]

INSTRUCTIONS = (
    "hangar runs coding agents as named sessions and jobs. wait_for_turn waits for a turn and puts the "
    "agent's tool approvals and questions to you; get_session / get_job read them; send_to_session, "
    "follow_up_job and steer_turn talk to the agent; answer_approval decides a tool approval."
)


class HangarServer(MCPServer[Any]):
    """The SDK's server with hangar's refusals: a tool error's text is the refusal itself (``not found: …``,
    ``invalid: name: …``), without the SDK's ``Error executing tool <name>:`` prefix, so a client can match
    on the kind; arguments that fail the input schema say which field and which rule. ``wait_for_turn``'s
    artifacts come as ``resource_link`` blocks too; a patch or an artifact is read with its own MIME type."""

    special_read: SpecialRead | None = None

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        if self.special_read is not None and context is not None:
            special = await self.special_read(str(uri), context)
            if special is not None:
                return special
        return await super().read_resource(uri, context)

    async def _handle_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        result = await super()._handle_call_tool(ctx, params)
        if not isinstance(result, CallToolResult):
            return result
        if not result.is_error:
            if params.name == "wait_for_turn" and ctx.protocol_version not in NO_RESOURCE_LINKS:
                extra = artifacts.links(result.structured_content or {})
                if extra:
                    return result.model_copy(update={"content": [*result.content, *extra]})
            return result
        prefix = f"Error executing tool {params.name}: "
        texts = [c.text.removeprefix(prefix) for c in result.content if isinstance(c, TextContent)]
        return CallToolResult(content=[TextContent(type="text", text=t) for t in texts], is_error=True)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise ToolError(invalid_text(e.__cause__)) from e.__cause__
            raise


def same_capabilities(server: MCPServer[Any]) -> None:
    """Both eras see the same capabilities: tools, and resources with ``subscribe`` (served by
    ``resources/subscribe`` and ``subscriptions/listen``). No ``listChanged``: hangar's tool and resource
    lists never change at run time. No ``prompts``: it has none (``prompts/*`` is "method not found")."""
    low = server._lowlevel_server
    for method in ("prompts/list", "prompts/get"):
        low._request_handlers.pop(method, None)

    def capabilities(
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        # The handshake-era derivation for every version: listChanged from no options (false), subscribe
        # from the resources/subscribe handler.
        return type(low).get_capabilities(low, None, experimental_capabilities, extensions)

    low.get_capabilities = capabilities  # type: ignore[method-assign]


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
    tasks = app.state.mcp_tasks = Tasks(verifier, Hub(app.state))
    subscriptions.task_feed = tasks
    server = HangarServer(
        "hangar",
        version="0.1.0",
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        # Static bearer tokens: there is no authorization server, and no resource metadata to publish.
        auth=AuthSettings(issuer_url="https://hangar.invalid", resource_server_url=None),
        request_state_security=security,
        subscriptions=subscriptions.bus,
        extensions=[tasks],
    )
    register(server, Hub(app.state), verifier)
    register_resources(server, Hub(app.state), verifier)
    hub = Hub(app.state)

    async def special(uri: str, ctx: Context[Any, Any]) -> list[ReadResourceContents] | None:
        return await read_special(hub, verifier, uri, ctx)

    server.special_read = special
    # Live sandbox work through the operator (exec, process, workspace watches): live.py, live_watch.py.
    register_live(server, Hub(app.state), lambda ctx: mcp_caller(verifier, ctx), tasks)
    register_watch(server, Hub(app.state), lambda ctx: mcp_caller(verifier, ctx), subscriptions.watches)
    subscriptions.register(server)
    same_capabilities(server)
    return server


def stop(state: Any) -> None:
    """Stops the subscriptions' watches and poll, and the tasks still running (the app's lifespan ends)."""
    subscriptions: Subscriptions | None = getattr(state, "mcp_subscriptions", None)
    if subscriptions is not None:
        subscriptions.stop()
    tasks: Tasks | None = getattr(state, "mcp_tasks", None)
    if tasks is not None:
        tasks.stop()


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
    # Event ids and `retry:` on the handshake era's SSE streams, so a client that loses one (mid
    # wait_for_turn) resumes it with Last-Event-ID (SEP-1699). 2026-07-28 requests are stateless: a dropped
    # one is sent again (see docs/mcp.md).
    asgi = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=security,
        event_store=BoundedEventStore(),
        retry_interval=RETRY_MS,
    )
    # The route passes the request on unchanged (path /mcp), so the SDK app's own auth middleware and
    # route see it as if it stood alone.
    app.router.routes.append(Route(PATH, endpoint=asgi, include_in_schema=False))
    return server
