"""The API's watch-fed caches of what the approval routes read: Approvals, and of Sessions and Turns only
what those routes check (is the session there, its policy, taint and current turn; a turn's policy); and
which Environments exist, which a session's create checks before it writes (one apiserver round trip less
on the way to a session's sandbox).

A person or a client polls ``GET /api/sessions/{ref}/approvals`` while an agent waits; read from the
apiserver that was a Session, a Turn and an Approval listing per poll (~25 ms of a 10 ms poll on a loaded
machine), and the reads themselves slowed the apiserver the operator was writing the approval to. Each
API replica keeps one watch per resource (not one per request): a list, then a watch from the listing's
resourceVersion (bookmarks keep it current); an expired one (410 Gone) lists again, which drops what was
deleted meanwhile. While a cache is not usable (not listed yet, its watch broken, overflowed) every read
goes to the apiserver, as before: fail closed. The state and its rules are ``object_cache.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from kubernetes_asyncio import watch

from hangar.kube import ApiException, Kube, Obj
from hangar.models import GROUP, VERSION, Session, TurnStatus
from hangar.models import labels as L

from .object_cache import ObjectCache

log = logging.getLogger("hangar.api.cache")

# At most this many objects per resource; past it, that cache empties and the routes read the apiserver.
CAPACITY = 20_000
# A watch the apiserver ends after this long (it is watched again from where it was).
WATCH_SECONDS = 300
# How long an overflowed cache waits before it lists again (to see whether it fits now).
OVERFLOW_RETRY = 60.0


@dataclass(frozen=True)
class SessionLook:
    """What the approval routes read of a Session."""

    deleted: bool
    policy: str | None
    current_turn: str | None
    tainted: bool


def session_look(obj: Obj) -> SessionLook:
    st = Session.model_validate(obj).status
    return SessionLook(
        deleted=bool(obj["metadata"].get("deletionTimestamp")),
        policy=st.policy,
        current_turn=st.current_turn,
        tainted=st.taint.tainted,
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
    stamps = {k: notes[k] for k in (L.REQUESTED_AT, L.DEADLINE) if k in notes}
    if stamps:
        kept["annotations"] = stamps
    return {**obj, "metadata": kept}


class Watched:
    """One resource's cache and the task that lists and watches it."""

    def __init__(self, k: Kube, plural: str, cache: ObjectCache[Any]) -> None:
        self.k = k
        self.plural = plural
        self.cache = cache
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name=f"cache-{self.plural}")

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.cache.watching = False

    async def _list(self) -> None:
        out: Obj = await self.k.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.k.namespace, self.plural
        )
        self.cache.relist(out.get("items") or [], (out.get("metadata") or {}).get("resourceVersion"))

    async def _watch(self) -> None:
        """Events from the cache's resourceVersion until the apiserver ends the watch (then again from where
        it got to). A 410 (the version expired) or any other error goes up: the caller lists again."""
        while not self.cache.overflowed:
            w = watch.Watch()
            async with w.stream(
                self.k.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.k.namespace,
                self.plural,
                resource_version=self.cache.rv,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
            ) as stream:
                self.cache.watching = True
                async for ev in stream:
                    obj = ev.get("raw_object") or ev.get("object")
                    if isinstance(obj, dict):
                        self.cache.apply(str(ev.get("type") or ""), obj)
                    if self.cache.overflowed:
                        break

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                await self._list()
                if self.cache.overflowed:
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
    """The approval routes' caches: Approvals (indexed by session), Sessions and Turns (what is read)."""

    def __init__(self, k: Kube, capacity: int = CAPACITY) -> None:
        self.approvals: ObjectCache[Obj] = ObjectCache(approval_kept, capacity, label=L.SESSION)
        self.sessions: ObjectCache[SessionLook] = ObjectCache(session_look, capacity)
        self.turns: ObjectCache[str | None] = ObjectCache(turn_policy, capacity)
        self.environments: ObjectCache[bool] = ObjectCache(_exists, capacity)
        self.watched = [
            Watched(k, "approvals", self.approvals),
            Watched(k, "sessions", self.sessions),
            Watched(k, "turns", self.turns),
            Watched(k, "environments", self.environments),
        ]
        self.started = False

    def start(self) -> None:
        # A Kube without a connection (the unit tier's fake) has nothing to watch: every read goes to it.
        if self.started or not hasattr(self.watched[0].k, "custom"):
            return
        self.started = True
        for w in self.watched:
            w.start()

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
        return True, self.turns.get(name)

    def environment_known(self, name: str) -> bool:
        """The Environment is there (False: the cache can't say so, read the apiserver; never "it is not")."""
        return self.environments.usable and name in self.environments.objs

    def approvals_of(self, sessions: list[str]) -> list[Obj] | None:
        return self.approvals.having(sessions) if self.approvals.usable else None

    def approval(self, name: str) -> Obj | None:
        return self.approvals.get(name) if self.approvals.usable else None

    def wrote_approval(self, obj: Obj) -> None:
        with contextlib.suppress(Exception):
            self.approvals.wrote(obj)


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


def api_cache(request: Request) -> ApiCache:
    return api_cache_of(request.app.state)


# None: read the apiserver (a caller outside a request, the MCP tools).
CacheDep = Annotated[ApiCache | None, Depends(api_cache)]
