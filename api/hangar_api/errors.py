"""Every error hangar's REST API answers, in one shape: ``{"detail": "<hangar's reason>"}``.

The handlers never fail to encode (a NaN, an Infinity or a lone surrogate in what they would quote is
escaped or left out) and never echo more than a short prefix of the input: a 10 MB body that fails
validation gets a short answer. An apiserver refusal is mapped to the status that says what the client
did (400 → 422, 404 → 404, 409 → 409, 413 → 413, 422 → 422); anything else the apiserver answers, and an
apiserver that can't be reached, is a 503: hangar's dependency is down, not hangar.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from hangar.kube import ApiException

log = logging.getLogger("hangar.api")

DETAIL_MAX = 2000  # characters of a reason an answer carries
APISERVER_STATUS = {400: 422, 404: 404, 409: 409, 413: 413, 422: 422}


class Problem(BaseModel):
    """What every error answer holds."""

    detail: str = Field(description="hangar's reason, in words (at most 2,000 characters)")


def safe_text(text: str, limit: int = DETAIL_MAX) -> str:
    """``text`` cut to ``limit`` characters, lone surrogates escaped: always encodable as UTF-8 JSON."""
    if len(text) > limit:
        text = text[:limit] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def problem(status: int, detail: Any, headers: Mapping[str, str] | None = None) -> Response:
    """An error answer that always encodes."""
    body = json.dumps({"detail": safe_text(str(detail))}, ensure_ascii=False).encode("utf-8")
    return Response(body, status_code=status, headers=dict(headers or {}), media_type="application/json")


def apiserver_reason(e: ApiException) -> str:
    """The apiserver's own words for a refusal (a CEL rule's message, a schema error)."""
    try:
        data = json.loads(e.body or b"{}")
        return str(data.get("message") or e.reason) if isinstance(data, dict) else str(e.reason)
    except Exception:
        return str(e.reason)


def api_error(e: ApiException, what: str = "") -> HTTPException:
    """The client's answer for an apiserver refusal: its status mapped (503 for anything not the
    client's doing), hangar's words first (``what``) and then the apiserver's reason."""
    status = APISERVER_STATUS.get(int(e.status or 0), 503)
    why = apiserver_reason(e)
    if status == 503:
        why = f"the Kubernetes API answered {e.status}: {why}"
    return HTTPException(status, f"{what}: {why}" if what else why)


def validation_detail(exc: RequestValidationError) -> str:
    """The validation errors in words, without the input they refer to: ``field: why`` (a body's field by
    its name, a query or path parameter as ``query.since``), at most five."""
    parts = []
    for err in exc.errors()[:5]:
        where = list(err.get("loc", ()))
        if where[:1] == ["body"] and len(where) > 1:
            where = where[1:]  # a body field by its name alone: "name: …", as the CLI has always shown it
        loc = ".".join(str(p) for p in where)
        msg = str(err.get("msg", "invalid"))
        ctx = err.get("ctx") or {}
        if err.get("type") == "json_invalid" and isinstance(ctx, dict) and ctx.get("error"):
            msg = f"{msg}: {ctx['error']}"
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = len(exc.errors()) - 5
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts) or "invalid request"


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def not_allowed(request: Request) -> Response:
    """405 with every method the path has in ``Allow`` (RFC 9110 §15.5.6): Starlette names only those of the
    first route that matched the path, and a path's GET and POST are two routes. Each method is tried on the
    app's routes as the router would (``BaseRoute.matches``), included routers too."""
    routes = request.app.router.routes
    allow = ", ".join(
        m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] is Match.FULL for r in routes)
    )
    return problem(
        405, f"{request.method} is not allowed on {request.url.path}: use {allow}", {"Allow": allow}
    )


def install(app: FastAPI) -> None:
    """The handlers: hangar's reasons as they are, validation errors in words, apiserver refusals mapped,
    an unreachable apiserver as 503, anything else a 500 that names only the error's type."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            return not_allowed(request)
        return problem(exc.status_code, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> Response:
        return problem(422, validation_detail(exc))

    @app.exception_handler(ApiException)
    async def apiserver(_: Request, exc: ApiException) -> Response:
        err = api_error(exc)
        if err.status_code == 503:
            log.warning("apiserver error: %s %s", exc.status, exc.reason)
        return problem(err.status_code, err.detail, {"Retry-After": "5"} if err.status_code == 503 else None)

    @app.exception_handler(aiohttp.ClientError)
    @app.exception_handler(asyncio.TimeoutError)
    async def unreachable(_: Request, exc: Exception) -> Response:
        log.warning("apiserver unreachable: %s", type(exc).__name__)
        return problem(503, "the Kubernetes API could not be reached: try again", {"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error")
        return problem(500, f"internal error: {type(exc).__name__}")
