"""What every REST request passes before a route sees it, in this order:

1. **Authentication before parsing**: no token or an unknown one is a 401 before a byte of the body is
   read, so an anonymous client can't make hangar parse (or buffer) anything. An mcp-only token (``hangar
   connect``) is a 403 here (it works on ``/mcp`` only), except on the release routes, which answer it with
   the release rule's own text.
2. **Rate limit** per token on the writing routes (POST, PUT, PATCH, DELETE): 429 with ``Retry-After``.
3. **Body limit** (``HANGAR_API_BODY_MAX_BYTES``): 413 naming the limit, from ``Content-Length`` or while
   reading, never reading past it.
4. **Strict JSON**: a JSON body with NaN, Infinity, a number out of float range or a lone surrogate is a 422
   (they can't be stored, and Python's JSON reader lets them through).

Every refusal of an authenticated caller, here or in a route (any 4xx), is written to the audit log as
``api.refused`` with its status and reason; 429s are written at most once per caller every
``RATE_AUDIT_SECONDS`` with the count since the last, so a flood can't turn into a flood of writes.

Not guarded: ``/mcp`` (the MCP SDK authenticates and limits its own bodies), ``/api/governance/events``
(Tower's signature is its credential; it reads its body within its own limit) and the probes.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import minted_tokens
from .auth import MCP_ONLY, Caller, Tokens
from .errors import problem, safe_text
from .ratelimit import RateLimiter

log = logging.getLogger("hangar.api")

CALLER_KEY = "hangar.caller"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
UNGUARDED = ("/api/governance/",)
RATE_AUDIT_SECONDS = 10.0
REASON_MAX = 300  # characters of a refusal's reason kept in the audit log
_CAPTURE = 4096  # bytes of an error answer read back for its reason


def guarded(path: str) -> bool:
    return path.startswith("/api/") and not path.startswith(UNGUARDED)


def authenticate(tokens: Tokens, headers: Headers) -> Caller | str:
    """The caller, or why the request is not authenticated."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "missing bearer token"
    found, refusal = tokens.check(token.strip())
    return found if found is not None and refusal is None else (refusal or "unknown token")


async def _know_minted(state: Any, headers: Headers) -> None:
    """A bearer token this replica doesn't know yet may be one minted on another replica a moment ago."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    tokens: Tokens | None = getattr(state, "tokens", None)
    if scheme.lower() == "bearer" and tokens is not None and tokens.check(token.strip())[0] is None:
        await minted_tokens.refresh_on_miss(state, token.strip())


class _TooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body, reading no more than ``limit`` bytes (:class:`_TooLarge` past it)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _is_json(headers: Headers) -> bool:
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype == "application/json" or (ctype.startswith("application/") and ctype.endswith("+json"))


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def strict_json(body: bytes) -> str | None:
    """Why ``body`` is not JSON hangar takes, or None when it is."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        return "the body is not JSON hangar takes: nested too deeply"
    except ValueError as e:
        return f"the body is not JSON: {safe_text(str(e), 200)}"
    stack = [value]
    while stack:  # iterative: a deep body can't exhaust the stack here
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "the body is not JSON hangar takes: a string holds a lone surrogate (\\ud800-\\udfff)"
    return None


class Guard:
    """The ASGI middleware; the app's state holds ``tokens``, ``db``, ``rate_limiter`` and ``body_max``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._rate_audit: dict[Caller, tuple[float, int]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not guarded(scope["path"]):
            if scope["path"].startswith("/mcp"):  # the SDK authenticates: let it know a fresh minted token
                await _know_minted(scope["app"].state, Headers(scope=scope))
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        headers = Headers(scope=scope)
        await _know_minted(state, headers)
        who = authenticate(state.tokens, headers)
        if isinstance(who, str):
            await problem(401, who, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        scope[CALLER_KEY] = who
        refuse = _Refuser(self, state, who, scope, receive, send)
        if who.kind == "mcp" and not minted_tokens.is_release_route(scope["path"]):
            await refuse(403, MCP_ONLY.format(who=who.subject))
            return
        if scope["method"] in WRITES:
            wait = state.rate_limiter.take(who)
            if wait > 0:
                await refuse.rate_limited(wait)
                return
        limit: int = state.body_max
        declared = headers.get("content-length", "")
        try:
            if declared.isdigit() and int(declared) > limit:
                raise _TooLarge
            body = await read_body(receive, limit)
        except _TooLarge:
            await refuse(
                413, f"the request body is over the limit of {limit} bytes (HANGAR_API_BODY_MAX_BYTES)"
            )
            return
        if body and _is_json(headers):
            why = strict_json(body)
            if why is not None:
                await refuse(422, why)
                return
        await self._route(scope, receive, send, body, who, state)

    async def _route(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, who: Caller, state: Any
    ) -> None:
        """The route, with the body read once and handed on, and its answer watched for a refusal."""
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        status, captured = 0, bytearray()

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and 400 <= status < 500 and len(captured) < _CAPTURE:
                captured.extend(message.get("body", b"")[: _CAPTURE - len(captured)])
            await send(message)

        await self.app(scope, replay, watch)
        if 400 <= status < 500:
            await audit_refusal(state, who, scope, status, _detail(bytes(captured)))

    def rate_audit_due(self, who: Caller, now: float) -> int | None:
        """How many 429s to write now for ``who`` (this one included), or None to count it for later."""
        last, count = self._rate_audit.get(who, (float("-inf"), 0))
        if now - last >= RATE_AUDIT_SECONDS:
            self._rate_audit[who] = (now, 0)
            return count + 1
        self._rate_audit[who] = (last, count + 1)
        return None


class _Refuser:
    """Answers a refusal the guard itself makes, and audits it."""

    def __init__(self, guard: Guard, state: Any, who: Caller, scope: Scope, receive: Receive, send: Send):
        self.guard, self.state, self.who = guard, state, who
        self.scope, self.receive, self.send = scope, receive, send

    async def __call__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        await problem(status, reason, headers)(self.scope, self.receive, self.send)
        await audit_refusal(self.state, self.who, self.scope, status, reason)

    async def rate_limited(self, wait: float) -> None:
        retry = RateLimiter.retry_after(wait)
        limiter: RateLimiter = self.state.rate_limiter
        reason = (
            f"rate limit: at most {limiter.burst:g} writes at once and {limiter.rate:g} a second per token "
            f"(HANGAR_API_WRITE_BURST, HANGAR_API_WRITE_RATE); retry in {retry} s"
        )
        await problem(429, reason, {"Retry-After": retry})(self.scope, self.receive, self.send)
        count = self.guard.rate_audit_due(self.who, time.monotonic())
        if count is not None:
            await audit_refusal(self.state, self.who, self.scope, 429, reason, count=count)


def _detail(captured: bytes) -> str:
    try:
        data = json.loads(captured)
        return str(data.get("detail", "")) if isinstance(data, dict) else ""
    except ValueError:
        return captured[:REASON_MAX].decode("utf-8", "replace")


async def audit_refusal(
    state: Any, who: Caller, scope: Scope, status: int, reason: str, **extra: Any
) -> None:
    """``api.refused`` in the audit log; a failing database is logged, never the caller's problem."""
    db = getattr(state, "db", None)
    if db is None:
        return
    try:
        await db.audit(
            who.subject,
            "api.refused",
            safe_text(scope["path"], 200),
            method=scope["method"],
            status=status,
            reason=safe_text(reason, REASON_MAX),
            **extra,
        )
    except Exception:
        log.exception("could not audit a refusal")
