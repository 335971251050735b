"""The api's live channel into a session's sandbox: MCP ``exec``, ``process`` and workspace watches.

The api never talks to a sandbox (docs/architecture.md); it asks the operator, which holds the driver link.
This module serves that: an HTTP endpoint on loopback (the api runs in the same pod) whose address and a
fresh bearer token are published in the database at start (table ``endpoints``, name ``live``), so the api
finds it with no setting and nothing else that reaches the port can use it.

``POST /live`` with ``{"session", "op", "body"}`` sends the command to the session's driver (signed with the
run key, like every command) and answers with the driver's ``live`` frames as JSON lines until the
command's ``result`` (a watch: until the client goes, which stops the watch, or the watch ends). An exec
whose client goes before its result is stopped in the sandbox (its process group ended). A session
without a connected sandbox is refused at once (409) rather than queued: a person waits on the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web

from hangar.models import Session
from hangar_driver import protocol as P

from . import metrics
from .context import Context

log = logging.getLogger("hangar.operator.live")

ENDPOINT = "live"
QUEUE_MAX = 1000  # frames waiting for the api per request; output chunks beyond it are dropped
ANSWER_TIMEOUT = 660.0  # seconds without a frame before a request is given up (an exec's bound + margin)


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class LiveWork:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.token = secrets.token_urlsafe(32)
        self._requests: dict[tuple[str, str], asyncio.Queue[dict[str, Any]]] = {}
        self._runner: web.AppRunner | None = None

    # --- frames from the gateway --------------------------------------------------------------------------
    def on_live(self, run: str, body: dict[str, Any]) -> None:
        queue = self._requests.get((run, str(body.get("request"))))
        if queue is None:
            return  # nobody waits on it (gone, or a frame naming another request)
        try:
            queue.put_nowait(body)
        except asyncio.QueueFull:
            if body.get("kind") != "output":
                # Make room for what ends the request; the output it displaces is in the result too.
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                queue.put_nowait(body)

    def disconnected(self, run: str) -> None:
        """The run's driver link broke: what waits on it ends, with the reason."""
        for (r, request), queue in list(self._requests.items()):
            if r == run:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(
                        {"request": request, "kind": "ended", "reason": "the sandbox's driver disconnected"}
                    )

    # --- requests ---------------------------------------------------------------------------------------
    async def run_of(self, session: str) -> str:
        ns = self.ctx.home
        obj = await self.ctx.kube_in(ns).get("sessions", session)
        if obj is None:
            raise Refused(404, f"no session {session!r}")
        s = Session.model_validate(obj)
        run = self.ctx.run_of(ns, s.status.sandbox.run)
        if run is None or not s.status.sandbox.connected or not self.ctx.gateway.connected(run.id):
            raise Refused(
                409,
                f"session {session!r} has no connected sandbox (phase {s.status.phase}); "
                "send it a message to start one",
            )
        return run.id

    async def stream(
        self, session: str, op: str, body: dict[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The driver's frames for one command, until its result (a watch: until it ends or the caller
        stops reading)."""
        if op not in P.LIVE_OPS:
            raise Refused(400, f"op must be one of {', '.join(sorted(P.LIVE_OPS))}")
        try:
            run = await self.run_of(session)
        except Refused:
            metrics.LIVE_REQUESTS.labels(op=op, outcome="refused").inc()
            raise
        cid = "live-" + secrets.token_hex(12)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX)
        self._requests[(run, cid)] = queue
        watching = False
        answered = False
        try:
            await self.ctx.gateway.send(run, op, body, cid)
            while True:
                try:
                    frame = await asyncio.wait_for(queue.get(), ANSWER_TIMEOUT if not watching else None)
                except TimeoutError:
                    metrics.LIVE_REQUESTS.labels(op=op, outcome="ended").inc()
                    yield {"kind": "ended", "reason": "the sandbox did not answer in time"}
                    return
                kind = frame.get("kind")
                if kind in ("result", "ended"):
                    answered = True
                if kind == "result" or (kind == "ended" and not watching):  # once per request
                    outcome = "ended" if kind == "ended" else "ok" if frame.get("ok") else "failed"
                    metrics.LIVE_REQUESTS.labels(op=op, outcome=outcome).inc()
                yield frame
                if kind == "ended" or (kind == "result" and (op != "watch" or not frame.get("ok"))):
                    return
                if kind == "result":
                    watching = True
        finally:
            self._requests.pop((run, cid), None)
            if watching:
                with contextlib.suppress(Exception):
                    await self.ctx.gateway.send(run, "watch", {"action": "stop", "watch": cid})
            elif op == "exec" and not answered:
                # The api went before the answer (a cancelled call or task): the command stops in the
                # sandbox too, rather than running on to its timeout for nobody.
                with contextlib.suppress(Exception):
                    await self.ctx.gateway.send(run, "exec", {"action": "stop", "exec": cid})

    # --- the HTTP endpoint ------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not secrets.compare_digest(request.headers.get("Authorization", ""), f"Bearer {self.token}"):
            return web.json_response({"detail": "unauthorized"}, status=401)
        try:
            ask = await request.json()
            session, op, body = str(ask["session"]), str(ask["op"]), dict(ask["body"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"detail": "expected {session, op, body}"}, status=400)
        frames = self.stream(session, op, body)
        try:
            first = await anext(frames)
        except Refused as e:
            return web.json_response({"detail": e.reason}, status=e.status)
        except StopAsyncIteration:
            return web.json_response({"detail": "no answer"}, status=502)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        try:
            await response.write(json.dumps(first).encode() + b"\n")
            async for frame in frames:
                await response.write(json.dumps(frame).encode() + b"\n")
        finally:
            await frames.aclose()  # a watch whose client went is stopped in the sandbox
        await response.write_eof()
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/live", self._handle)
        # handler_cancellation: a client gone (a watch nobody follows) ends its request, and so the watch.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        port = int(server.sockets[0].getsockname()[1]) if isinstance(server, asyncio.Server) else 0
        await self.ctx.db.put_endpoint(ENDPOINT, f"127.0.0.1:{port}", self.token)
        log.info("live channel for the api on 127.0.0.1:%d", port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
