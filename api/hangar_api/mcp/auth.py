"""Who may use the MCP tools: hangar's bearer tokens (:class:`hangar_api.auth.Tokens`) as the SDK's
``TokenVerifier``.

- no or unknown token: 401 from the SDK's auth middleware, before any MCP message is read;
- ``admin`` and ``mcp`` tokens: every tool on every session and job;
- ``jobs`` tokens: the tools on the jobs they submitted (``spec.submitter`` is the token's subject). Someone
  else's job is "not found", as over REST; sessions are not theirs to use (only their jobs' attempts, through
  the job).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from ..auth import Caller, Tokens


class TokensVerifier:
    """Satisfies ``mcp.server.auth.provider.TokenVerifier``. Reads the app's tokens when asked, so a verifier
    built before the app's lifespan loaded them works."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def tokens(self) -> Tokens | None:
        tokens: Tokens | None = getattr(self.state, "tokens", None)
        return tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        tokens = self.tokens()
        found = tokens.lookup(token) if tokens is not None else None
        if found is None:
            return None
        return AccessToken(token=token, client_id=found.subject, scopes=[found.role], subject=found.subject)


def mcp_caller(verifier: TokensVerifier, ctx: Context[Any, Any] | None) -> Caller:
    """The caller of this tool call: the token the SDK verified for this HTTP request (a static resource
    has no ``ctx``: the verified token alone)."""
    token = get_access_token()
    raw = token.token if token is not None else None
    if raw is None and ctx is not None:
        header = (ctx.headers or {}).get("authorization", "")
        scheme, _, value = header.partition(" ")
        raw = value.strip() if scheme.lower() == "bearer" else None
    tokens = verifier.tokens()
    found = tokens.lookup(raw) if tokens is not None and raw else None
    if found is None:  # the auth middleware lets no such request through; be safe anyway
        raise ToolError("unauthorized: missing or unknown bearer token")
    return found


def acting(who: Caller) -> Caller:
    """The caller as the REST functions see it. An ``mcp`` token reaches every session and job through the
    MCP tools, which the REST layer knows as an admin's reach; its subject (and so every audit entry and
    ``decidedBy``) stays its own."""
    return Caller(who.subject, "admin") if who.role == "mcp" else who


def may_use_sessions(who: Caller) -> bool:
    return who.role in ("admin", "mcp")
