"""``hangar_api_requests_total``: every HTTP request the app answers, by method, route and status.

A plain ASGI middleware, not Starlette's ``@app.middleware("http")`` (``BaseHTTPMiddleware``): that one runs
the rest of the app in a task of its own and hands the answer back through memory streams, ~1.5 ms of a
quiet machine's time on every request (more under load), most of it between the route's answer and its
first byte on the wire — on the way of every ``POST``, a session's create among them. Here the answer's
start is only looked at as it passes: once it is sent, its status is counted with the route routing found
(the app writes ``scope["route"]`` into the same scope), so a stream is counted as it begins, as before. A
request the app fails on without answering (an exception) is not counted here, as before: the server's
error middleware outside answers it.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUESTS = Counter("hangar_api_requests_total", "API requests", ["method", "route", "status"])
LATENCY = Histogram("hangar_api_request_seconds", "API request latency", ["route"])


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def seen(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                REQUESTS.labels(scope["method"], route, str(message["status"])).inc()

        await self.app(scope, receive, seen)
