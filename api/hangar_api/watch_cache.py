"""The API's watch-fed caches of what the approval routes read: Approvals, and of Sessions and Turns only
what those routes check (is the session there, its policy, taint and current turn; a turn's policy); and
which Environments exist, which a session's create checks before it writes (one apiserver round trip less
on the way to a session's sandbox).

A person or a client polls ``GET /api/sessions/{ref}/approvals`` while an agent waits; read from the
apiserver that was a Session, a Turn and an Approval listing per poll (~25 ms of a 10 ms poll on a loaded
machine), and the reads themselves slowed the apiserver the operator was writing the approval to. Each
API replica keeps one watch per resource (not one per request): a list, then a watch from the listing's
resourceVersion (bookmarks keep it current); an expired one (410 Gone) lists again, which drops what was
deleted meanwhile (``Kube.watch`` raises the 410; it never watches on from "now"). The stream is shared:
listeners (``Watched.listen``: the Turn waiters and the MCP subscriptions) hear every change the cache
applied, the differences a relist found among them, and the API's own writes (``Watched.wrote``), each state
of an object once. While a cache is not usable (not listed yet, its watch broken, overflowed) every read goes
to the apiserver, as before: fail closed. The state and its rules are ``object_cache.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from hangar.kube import ApiException, Kube, Obj
from hangar.models import Session, TurnStatus
from hangar.models import labels as L

from .inbox_looks import JobLook, TurnLook, job_look, turn_look
from .object_cache import Change, ObjectCache

log = logging.getLogger("hangar.api.cache")

# At most this many objects per resource; past it, that cache empties and the routes read the apiserver.
CAPACITY = 20_000
# How long an overflowed cache waits before it lists again (to see whether it fits now).
OVERFLOW_RETRY = 60.0


@dataclass(frozen=True)
class SessionLook:
    """What the approval routes and the MCP inbox read of a Session."""

    deleted: bool
    policy: str | None
    current_turn: str | None
    tainted: bool
    job: str | None = None  # the job it is an attempt of


def session_look(obj: Obj) -> SessionLook:
    st = Session.model_validate(obj).status
    return SessionLook(
        deleted=bool(obj["metadata"].get("deletionTimestamp")),
        policy=st.policy,
        current_turn=st.current_turn,
        tainted=st.taint.tainted,
        job=(obj["metadata"].get("labels") or {}).get(L.JOB),
    )


def turn_policy(obj: Obj) -> str | None:
    """The turn's policy (its status alone is read: a Turn's spec can be large, and is not needed)."""
    return TurnStatus.model_validate(obj.get("status") or {}).policy


def approval_kept(obj: Obj) -> Obj:
    """An Approval without its managedFields (most of its size; no route shows them), and of its annotations
    only the operator's stamps of a call that asks (pending from its create, before its status is written)."""
    meta = obj.get("metadata") or {}
    kept = {
        k: meta[k]
        for k in ("name", "namespace", "resourceVersion", "labels", "creationTimestamp")
        if k in meta
    }
    notes = meta.get("annotations") or {}
    stamps = {k: notes[k] for k in L.ASKED_STAMPS if k in notes}
    if stamps:
        kept["annotations"] = stamps
    return {**obj, "metadata": kept}


# Told of each change (kind, object as the apiserver sent it); synchronous, must not block.
Listener = Callable[[str, Obj], None]


class Watched:
    """One resource's cache and the task that lists and watches it, and the listeners of its stream."""

    def __init__(self, k: Kube, plural: str, cache: ObjectCache[Any]) -> None:
        self.k = k
        self.plural = plural
        self.cache = cache
        self.task: asyncio.Task[None] | None = None
        self.listeners: list[Listener] = []

    def listen(self, fn: Listener, replay: bool = False) -> None:
        """Tell ``fn`` of every change from now on (the stream runs once the ``ApiCache`` started).
        ``replay``: first an ADDED stub (``ObjectCache.stub``) of each object held now, for a listener that
        keeps its own map of what exists (an overflowed cache holds none to tell)."""
        if replay:
            for name, (rv, _) in list(self.cache.objs.items()):
                fn("ADDED", self.cache.stub(name, None if rv is None else str(rv)))
        self.listeners.append(fn)

    def wrote(self, obj: Obj) -> None:
        """One of the API's own writes: held at once (read your writes) and told to the listeners, whose
        watch event then, at the same version, is no news."""
        if self.cache.wrote(obj):
            self._tell([("MODIFIED", obj)])

    def event(self, kind: str, obj: Obj) -> None:
        """One watch event: applied to the cache, and told when it is news."""
        if self.cache.apply(kind, obj):
            self._tell([(kind, obj)])

    def listed(self, items: list[Obj], rv: str | None) -> None:
        """A listing: it replaces what the cache holds, and what changed while there was no watch (a 410, a
        broken connection) is told as changes, so no listener misses the gap."""
        self._tell(self.cache.relist(items, rv))

    def _tell(self, changes: list[Change]) -> None:
        for kind, obj in changes:
            for fn in list(self.listeners):
                try:
                    fn(kind, obj)
                except Exception:
                    log.exception("%s listener failed", self.plural)

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name=f"cache-{self.plural}")

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.cache.watching = False

    async def _list(self) -> None:
        self.listed(*await self.k.list_at(self.plural))

    async def _watch(self) -> None:
        """Events from the cache's resourceVersion (``Kube.watch`` watches again from where it got to when
        the apiserver ends a watch). A 410 (the version expired) or any other error goes up: the caller
        lists again. An overflowed cache with listeners goes on watching for them (it holds nothing)."""
        self.cache.watching = True
        async for ev in self.k.watch(self.plural, self.cache.rv, bookmarks=True):
            obj = ev.get("raw_object") or ev.get("object")
            if isinstance(obj, dict):
                self.event(str(ev.get("type") or ""), obj)
            if self.cache.overflowed and not self.listeners:
                return

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                await self._list()
                if self.cache.overflowed and not self.listeners:
                    log.warning("%s: more than %d objects; read from the apiserver", self.plural, CAPACITY)
                    await asyncio.sleep(OVERFLOW_RETRY)
                    continue
                await self._watch()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except ApiException as e:
                self.cache.watching = False
                if e.status != 410:
                    log.info("%s watch broke (%s); listing again in %.1f s", self.plural, e.status, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 30.0)
            except Exception as e:
                self.cache.watching = False
                log.info("%s watch broke (%s); listing again in %.1f s", self.plural, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
            finally:
                self.cache.watching = False


def _exists(obj: Obj) -> bool:
    return True


class ApiCache:
    """The approval routes' and the MCP inbox's caches: Approvals (indexed by session), and of Sessions, Turns
    and Jobs what they read."""

    def __init__(self, k: Kube, capacity: int = CAPACITY) -> None:
        self.approvals: ObjectCache[Obj] = ObjectCache(approval_kept, capacity, label=L.SESSION)
        # Indexed by job: an attempt's job is told with it (MCP subscriptions map a job to its attempts).
        self.sessions: ObjectCache[SessionLook] = ObjectCache(session_look, capacity, label=L.JOB)
        # Indexed by session: a Turn deleted while the watch was lost is told with its session.
        self.turns: ObjectCache[TurnLook] = ObjectCache(turn_look, capacity, label=L.SESSION)
        self.environments: ObjectCache[bool] = ObjectCache(_exists, capacity)
        # Jobs only for MCP (the subscriptions' stream, the inbox): watched from their first use on.
        self.jobs: ObjectCache[JobLook] = ObjectCache(job_look, capacity)
        self.watched = [
            Watched(k, "approvals", self.approvals),
            Watched(k, "sessions", self.sessions),
            Watched(k, "turns", self.turns),
            Watched(k, "environments", self.environments),
            Watched(k, "jobs", self.jobs),
        ]
        self.lazy = {"jobs"}
        self.started = False

    def feed(self, plural: str) -> Watched:
        """The stream of ``plural`` (to listen to it)."""
        return next(w for w in self.watched if w.plural == plural)

    def start(self) -> None:
        # Not on the unit tier's fake (no connection): its tests write to it from their own thread, which
        # its watches' queues can't take. Every read goes to it.
        if self.started or not hasattr(self.watched[0].k, "custom"):
            return
        self.started = True
        for w in self.watched:
            if w.plural not in self.lazy or w.listeners:
                w.start()

    def listen(self, plural: str, fn: Listener, replay: bool = False) -> None:
        """``fn`` hears every change of ``plural`` from this replica's one stream of it (``Watched.listen``)."""
        w = self.feed(plural)
        w.listen(fn, replay)
        if self.started:
            w.start()

    def want(self, plural: str) -> None:
        """A lazy resource's stream is needed from now on (its reads are answered once it is listed)."""
        if self.started:
            self.feed(plural).start()

    def stop(self) -> None:
        for w in self.watched:
            w.stop()

    # --- reads: None means "ask the apiserver" ----------------------------------------------------------
    def session(self, name: str) -> SessionLook | None:
        return self.sessions.get(name) if self.sessions.usable else None

    def turn(self, name: str) -> tuple[bool, str | None]:
        """(held, the turn's policy): not held when the cache can't say."""
        if not self.turns.usable or name not in self.turns.objs:
            return False, None
        look = self.turns.get(name)
        return True, look.policy if look is not None else None

    def all_of(self, plural: str) -> dict[str, Any] | None:
        """Every object of ``plural`` by name, as its cache holds it (its projection), or None: read the
        apiserver."""
        cache: ObjectCache[Any] = self.feed(plural).cache
        return {name: value for name, (_, value) in cache.objs.items()} if cache.usable else None

    def environment_known(self, name: str) -> bool:
        """The Environment is there (False: the cache can't say so, read the apiserver; never "it is not")."""
        return self.environments.usable and name in self.environments.objs

    def approvals_of(self, sessions: list[str]) -> list[Obj] | None:
        return self.approvals.having(sessions) if self.approvals.usable else None

    def approval(self, name: str) -> Obj | None:
        return self.approvals.get(name) if self.approvals.usable else None

    def wrote_approval(self, obj: Obj) -> None:
        with contextlib.suppress(Exception):
            self.feed("approvals").wrote(obj)


def stop_cache(state: Any) -> None:
    c: ApiCache | None = getattr(state, "api_cache", None)
    if c is not None:
        c.stop()


def api_cache_of(state: Any) -> ApiCache:
    """The app's caches (made and started on first use; until listed, reads go to the apiserver)."""
    c: ApiCache | None = getattr(state, "api_cache", None)
    if c is None:
        c = state.api_cache = ApiCache(state.kube)
    c.start()
    return c


async def api_cache(request: Request) -> ApiCache:
    return api_cache_of(request.app.state)


# None: read the apiserver (a caller outside a request, the MCP tools).
CacheDep = Annotated[ApiCache | None, Depends(api_cache)]
