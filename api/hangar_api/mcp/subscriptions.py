"""Resource subscriptions: ``notifications/resources/updated`` for ``hangar://sessions/<name>``,
``hangar://sessions/<name>/events``, ``hangar://jobs/<id>`` and ``hangar://jobs/<id>/events``, in both eras.

- 2026-07-28 clients open ``subscriptions/listen`` with ``resourceSubscriptions``: our handler checks that
  the caller may read every URI (before the ack), acknowledges, and writes the stream's notifications itself
  (the SDK's ``ListenHandler`` publishes through a queue, so it can't time a write).
- 2025-era clients send ``resources/subscribe`` / ``resources/unsubscribe`` (``MCPServer`` has no handler for
  them; we add ours on the lowlevel server, which also advertises ``resources.subscribe: true``). The
  notification goes out on the client's session (its GET stream). A session's subscriptions end with it.

Where changes come from: the replica's one stream each of Sessions, Jobs, Approvals and Turns, the API
cache's (``hangar_api/watch_cache.py``; Turns through :class:`hangar_api.turn_watch.TurnWatch`, shared with
the withdraw route), listened to from the first subscription. An object maps to the URIs it shows in: a Session to its own, and its job's if it is a job's
attempt (label ``hangar.dev/job``); a Turn and an Approval to their session's (and so its job's); a Job to its
own. The operator writes the activity events straight to the database, so an ``…/events`` URI is checked
for new events (its scopes' last ``seq``) every half second, and at once when a watched object it belongs to
changes (a status change accompanies nearly every event); it is notified only when there are new events.
Nothing is done for a URI nobody subscribed to.

At most one notification per URI every 250 ms, per subscriber, timed from when the last one was written
(:class:`~.outbox.Outbox`): the first change is sent at once, later ones within the window are folded into
one trailing send at its end, so the last change is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY, InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    EmptyResult,
    ResourceUpdatedNotification,
    ResourceUpdatedNotificationParams,
    SubscribeRequestParams,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel

from hangar.kube import Obj

from .. import turn_watch, watch_cache
from ..auth import Caller
from . import common, live_watch
from .auth import TokensVerifier
from .common import Hub
from .inbox import URI as INBOX
from .outbox import Outbox

log = logging.getLogger("hangar.api.mcp.subscriptions")

EVENTS_POLL_SECONDS = 0.5
MIN_CHECK_GAP = 0.05
JOB_LABEL = "hangar.dev/job"
_URI = re.compile(r"^hangar://(sessions|jobs)/([a-z0-9][-a-z0-9]*)(/events)?(?:\?.*)?$")
_ATTEMPT = re.compile(r"^(.+)-a[0-9]+$")


@dataclass(frozen=True)
class Target:
    """What a subscribable URI names. ``uri`` is its canonical form (no query): ``…/events?since=5`` and
    ``…/events`` change together."""

    kind: str  # "sessions" | "jobs" | "inbox" | "sandboxes" (a workspace watch, live_watch.py)
    name: str
    events: bool
    path: str = ""  # a watch's directory

    @property
    def uri(self) -> str:
        if self.kind == "inbox":
            return INBOX
        if self.kind == "sandboxes":
            return live_watch.canonical(self.name, self.path)
        return f"hangar://{self.kind}/{self.name}" + ("/events" if self.events else "")


def parse(uri: str) -> Target | None:
    if uri == INBOX:
        return Target("inbox", "", False)
    with contextlib.suppress(ToolError):  # a bad watch path: authorize() says why
        watch = live_watch.parse(uri)
        if watch is not None:
            return Target("sandboxes", watch[0], False, watch[1])
    m = _URI.match(uri)
    return Target(m.group(1), m.group(2), bool(m.group(3))) if m else None


def uris_of(kind: str, name: str) -> tuple[str, str]:
    return f"hangar://{kind}/{name}", f"hangar://{kind}/{name}/events"


class TaskStatusNotification(BaseModel):
    """``notifications/tasks``: the task as ``tasks/get`` shows it (the SDK has no type for it)."""

    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: dict[str, Any]


class TaskFeed(Protocol):
    """What ``subscriptions/listen`` needs for ``taskIds`` (``tasks.Tasks``; a protocol: tasks imports us)."""

    async def authorize(self, ctx: ServerRequestContext[Any, Any], task_ids: list[str]) -> None: ...

    async def follow(
        self, task_ids: list[str], send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None: ...


def header_caller(verifier: TokensVerifier, headers: Any) -> Caller:
    """The caller of a lowlevel request: its bearer token (the SDK's auth middleware already refused a
    missing or unknown one with 401)."""
    header = str((headers or {}).get("authorization", ""))
    scheme, _, raw = header.partition(" ")
    tokens = verifier.tokens()
    found = tokens.lookup(raw.strip()) if tokens is not None and scheme.lower() == "bearer" else None
    if found is None:
        raise MCPError(INVALID_REQUEST, "unauthorized: missing or unknown bearer token")
    return found


class Subscriptions:
    """The app's subscriptions: who listens to what, the watches and the event poll feeding them, and the
    throttled fan-out to both eras."""

    def __init__(self, hub: Hub, verifier: TokensVerifier) -> None:
        self.hub = hub
        self.verifier = verifier
        # The SDK's server wants a bus; hangar writes its notifications itself (outboxes), not through it.
        self.bus = InMemorySubscriptionBus()
        self._outboxes: dict[str, set[Outbox]] = {}  # subscribed URI (as the client spelled it) → subscribers
        self._legacy: dict[str, Outbox] = {}  # MCP session id → its outbox
        self._raw: dict[str, set[str]] = {}  # canonical URI → the subscribed spellings of it
        self._session_job: dict[str, str] = {}  # session → job, from the Session watch (label)
        self._seen: dict[str, tuple[tuple[str, int], ...]] = {}  # events URI → its scopes' last seq
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._waiting: dict[str, set[asyncio.Event]] = {}  # canonical URI → its wait_for_turn waiters
        self._generation: dict[str, int] = {}  # canonical URI → changes seen (in this epoch)
        self._epoch = 0
        self.task_feed: TaskFeed | None = None  # notifications/tasks (set by server.build)
        self.watches = live_watch.Watches(hub, self.changed, self.subscribed)

    # --- who listens ------------------------------------------------------------------------------------
    def subscribed(self, canonical: str) -> bool:
        return canonical in self._raw

    def _count(self, uri: str) -> int:
        return len(self._outboxes.get(uri, ()))

    async def _add(self, uri: str, outbox: Outbox) -> None:
        """One more subscriber of ``uri`` (already authorized)."""
        target = parse(uri)
        assert target is not None
        outbox.uris.add(uri)
        self._outboxes.setdefault(uri, set()).add(outbox)
        self._start()
        canonical = target.uri
        first = canonical not in self._raw
        self._raw.setdefault(canonical, set()).add(uri)
        if first and target.events:
            # The baseline is taken before the subscriber is acknowledged: an event after it is notified.
            self._seen[canonical] = await self._fingerprint(target)
            self._wake.set()

    def _remove(self, uri: str, outbox: Outbox) -> None:
        """A subscriber of ``uri`` went: forget the URI when it was the last."""
        outbox.uris.discard(uri)
        subs = self._outboxes.get(uri)
        if subs is not None:
            subs.discard(outbox)
            if not subs:
                del self._outboxes[uri]
        if self._count(uri) > 0:
            return
        target = parse(uri)
        if target is None:
            return
        raw = self._raw.get(target.uri)
        if raw is not None:
            raw.discard(uri)
            if not raw:
                del self._raw[target.uri]
                self._seen.pop(target.uri, None)
                if target.kind == "sandboxes":
                    self.watches.stop(target.uri)

    async def authorize(self, who: Caller, uri: str) -> None:
        """The same rule as reading the resource: sessions for admin and mcp tokens, a jobs token only its
        own jobs (someone else's is "not found"). Refused: an MCPError with the reason. A workspace watch
        starts here (its path checked), so a subscriber is acknowledged only once it runs."""
        try:
            live_watch.parse(uri)
        except ToolError as e:
            raise MCPError(INVALID_PARAMS, str(e), {"uri": uri}) from None
        target = parse(uri)
        if target is None:
            raise MCPError(
                INVALID_PARAMS,
                f"not found: cannot subscribe to {uri!r}: hangar://inbox, hangar://sessions/<name>, "
                "hangar://sessions/<name>/events, hangar://jobs/<id>, hangar://jobs/<id>/events and "
                "hangar://sandboxes/<session>/watch?path=<dir> are subscribable",
                {"uri": uri},
            )
        if target.kind == "inbox":
            return  # every token has an inbox: what it may see
        try:
            if target.kind == "sandboxes":
                await self.watches.authorize(who, target.name, target.path)
            elif target.kind == "sessions":
                await common.get_session(self.hub, who, target.name)
            else:
                await common.get_job(self.hub, who, target.name)
        except ToolError as e:
            code = INVALID_PARAMS if str(e).startswith(("not found", "invalid")) else INVALID_REQUEST
            raise MCPError(code, str(e), {"uri": uri}) from None

    # --- the handlers -----------------------------------------------------------------------------------
    async def on_listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """2026-07-28 ``subscriptions/listen``: authorize every resource URI and task id, acknowledge them (and
        nothing else: hangar sends no list changes), then write this stream's notifications until the client
        goes: ``notifications/resources/updated`` and, for ``taskIds``, ``notifications/tasks``."""
        sub_id = ctx.request_id
        if sub_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen needs a request id")
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or []))
        raw_ids = (params.notifications.model_extra or {}).get("taskIds") or []
        if not isinstance(raw_ids, list) or not all(isinstance(t, str) for t in raw_ids):
            raise MCPError(INVALID_PARAMS, "invalid: notifications.taskIds: a list of task ids")
        task_ids = list(dict.fromkeys(raw_ids))
        if uris:
            who = header_caller(self.verifier, ctx.request.headers if ctx.request is not None else None)
            for uri in uris:
                await self.authorize(who, uri)
        if task_ids:
            if self.task_feed is None:
                raise MCPError(INVALID_PARAMS, "tasks are not served here")
            await self.task_feed.authorize(ctx, task_ids)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: sub_id}

        async def write(uri: str) -> None:
            note = ResourceUpdatedNotification(params=ResourceUpdatedNotificationParams(uri=uri, _meta=meta))
            await ctx.session.send_notification(note, related_request_id=sub_id)

        async def write_task(task: dict[str, Any]) -> None:
            note = TaskStatusNotification(params={**task, "_meta": meta})
            # Not one of the SDK's notification types; it writes any model with a method and params.
            await ctx.session.send_notification(note, related_request_id=sub_id)  # type: ignore[arg-type]

        outbox = Outbox(write)
        follower = None
        try:
            for uri in uris:
                await self._add(uri, outbox)
            extra = {"taskIds": task_ids} if task_ids else {}
            honored = SubscriptionFilter(resource_subscriptions=uris or None, **extra)
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                related_request_id=sub_id,
            )
            if task_ids and self.task_feed is not None:
                follower = asyncio.create_task(self.task_feed.follow(task_ids, write_task))
            await outbox.run()  # until the client disconnects (cancelled) or a write fails
        finally:
            if follower is not None:
                follower.cancel()
            for uri in list(outbox.uris):
                self._remove(uri, outbox)
        return SubscriptionsListenResult(_meta=meta)

    @staticmethod
    def _session_key(ctx: ServerRequestContext[Any, Any]) -> tuple[str, Any]:
        connection = getattr(ctx.session, "_connection", None)
        return getattr(connection, "session_id", None) or f"conn-{id(connection)}", connection

    async def on_subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        """2025-era ``resources/subscribe``: remembered per MCP session until unsubscribed or the session ends;
        the notifications go out on the session's GET stream."""
        uri = str(params.uri)
        who = header_caller(self.verifier, ctx.request.headers if ctx.request is not None else None)
        await self.authorize(who, uri)
        key, connection = self._session_key(ctx)
        outbox = self._legacy.get(key)
        if outbox is None or outbox.broken is not None:
            session = ctx.session

            async def write(u: str) -> None:
                await session.send_resource_updated(u)

            outbox = self._legacy[key] = Outbox(write)
            if connection is not None:
                connection.exit_stack.callback(self._session_closed, key, outbox)
            outbox.start()
        await self._add(uri, outbox)
        return EmptyResult()

    async def on_unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        uri = str(params.uri)
        key, _ = self._session_key(ctx)
        outbox = self._legacy.get(key)
        if outbox is not None and uri in outbox.uris:
            self._remove(uri, outbox)
        return EmptyResult()

    def _session_closed(self, key: str, outbox: Outbox) -> None:
        outbox.stop()
        if self._legacy.get(key) is outbox:
            del self._legacy[key]
        for uri in list(outbox.uris):
            self._remove(uri, outbox)

    def register(self, server: MCPServer[Any]) -> None:
        low = server._lowlevel_server
        low.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, self.on_listen)
        low.add_request_handler("resources/subscribe", SubscribeRequestParams, self.on_subscribe)
        low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, self.on_unsubscribe)

    # --- sending ----------------------------------------------------------------------------------------
    def changed(self, canonical: str) -> None:
        """``canonical`` changed: wake its waiters, mark it (as each subscriber spelled it) in their
        outboxes."""
        if len(self._generation) > 50_000:  # every name ever seen: start counting again, in a new epoch
            self._generation.clear()
            self._epoch += 1
        self._generation[canonical] = self._generation.get(canonical, 0) + 1
        for event in self._waiting.get(canonical, ()):
            event.set()
        for uri in list(self._raw.get(canonical, ())):
            for outbox in list(self._outboxes.get(uri, ())):
                if outbox.broken is not None:  # a session gone: its subscriptions go with it
                    for gone in list(outbox.uris):
                        self._remove(gone, outbox)
                    continue
                outbox.mark(uri)

    # --- waiters (wait_for_turn) ------------------------------------------------------------------------
    def generation(self, canonical: str) -> tuple[int, int]:
        """Which change of ``canonical`` the watches saw last: a snapshot read before it is stale. (Once the
        watches run; before, every target is at (0, 0), and snapshots are kept 250 ms at most anyway.)"""
        return self._epoch, self._generation.get(canonical, 0)

    async def wait_change(self, canonical: str, timeout: float) -> None:
        """Returns when ``canonical`` changes (the watches see it), or after ``timeout`` seconds."""
        self._start()
        event = asyncio.Event()
        waiting = self._waiting.setdefault(canonical, set())
        waiting.add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            waiting.discard(event)
            if not waiting:
                self._waiting.pop(canonical, None)

    # --- where changes come from ------------------------------------------------------------------------
    def _start(self) -> None:
        if self._tasks:
            return
        # The replica's one stream per resource (watch_cache.py): after a lost watch (a 410) its relist
        # tells what changed and what was deleted meanwhile, so no change is missed.
        cache = watch_cache.api_cache_of(self.hub.state)
        turn_watch.turn_watch_of(self.hub.state).listen(self._on_turn)
        cache.listen("sessions", self._on_session, replay=True)  # which sessions are a job's attempts
        cache.listen("jobs", self._on_job)
        cache.listen("approvals", self._on_approval)
        self._tasks = [asyncio.create_task(self._poll_events())]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for outbox in list(self._legacy.values()):
            outbox.stop()
        self.watches.stop_all()

    def _session_changed(self, session: str) -> None:
        self.changed(INBOX)
        uri, events = uris_of("sessions", session)
        self.changed(uri)
        self._kick(events)
        job = self._session_job.get(session)
        if job is None:
            m = _ATTEMPT.match(session)  # not seen yet by the Session watch: the attempt naming says
            job = m.group(1) if m else None
        if job is not None:
            uri, events = uris_of("jobs", job)
            self.changed(uri)
            self._kick(events)

    def _on_session(self, kind: str, obj: Obj) -> None:
        meta = obj["metadata"]
        name = str(meta.get("name", ""))
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        if kind == "DELETED" or not job:
            self._session_job.pop(name, None)
        else:
            self._session_job[name] = str(job)
        self._session_changed(name)
        if kind == "DELETED" and job:
            self._kick(uris_of("jobs", str(job))[1])

    def _on_turn(self, obj: Obj) -> None:
        session = (obj.get("spec") or {}).get("session") or (obj["metadata"].get("labels") or {}).get(
            "hangar.dev/session"
        )
        if session:
            self._session_changed(str(session))

    def _on_approval(self, kind: str, obj: Obj) -> None:
        session = (obj.get("spec") or {}).get("session") or (obj["metadata"].get("labels") or {}).get(
            "hangar.dev/session"
        )
        if session:
            self._session_changed(str(session))

    def _on_job(self, kind: str, obj: Obj) -> None:
        self.changed(INBOX)
        uri, events = uris_of("jobs", str(obj["metadata"].get("name", "")))
        self.changed(uri)
        self._kick(events)

    def _kick(self, events_uri: str) -> None:
        if events_uri in self._raw:
            self._wake.set()

    # --- new events in the database ---------------------------------------------------------------------
    def _scopes(self, target: Target) -> list[str]:
        if target.kind == "sessions":
            return [f"session/{target.name}"]
        attempts = sorted(s for s, j in self._session_job.items() if j == target.name)
        return [f"job/{target.name}", *(f"session/{s}" for s in attempts)]

    async def _fingerprint(self, target: Target) -> tuple[tuple[str, int], ...]:
        return tuple([(scope, await self.hub.db.last_seq(scope)) for scope in self._scopes(target)])

    async def _poll_events(self) -> None:
        """Every half second (and at once when a watched object changed), the subscribed ``…/events`` URIs'
        last ``seq``: a URI whose events grew is notified."""
        while True:
            if any(u.endswith("/events") for u in self._raw):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), EVENTS_POLL_SECONDS)
            else:
                await self._wake.wait()  # nobody follows events: a subscription to some wakes us
            self._wake.clear()
            await asyncio.sleep(MIN_CHECK_GAP)  # a burst of watch changes is one check
            for canonical in [u for u in self._raw if u.endswith("/events")]:
                target = parse(canonical)
                if target is None:
                    continue
                try:
                    now = await self._fingerprint(target)
                except Exception as e:
                    log.info("reading the last events of %s failed: %s", canonical, e)
                    continue
                before = self._seen.get(canonical)
                if canonical not in self._raw:
                    continue  # unsubscribed while we read
                self._seen[canonical] = now
                # A job's new attempt (a new scope) with no events yet is no change.
                if before is not None and {s: q for s, q in now if q} != {s: q for s, q in before if q}:
                    self.changed(canonical)
