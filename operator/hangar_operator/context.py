"""What every controller shares, passed in (kopf's ``memo``), never reached through a module global."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from hangar.config import Settings
from hangar.governance.tower import TowerClient
from hangar.kube import Kube, Obj
from hangar.store import Database

from . import runs
from .cache import Cache
from .gateway import Gateway
from .held_starts import HeldStarts
from .k8s_events import Recorder

log = logging.getLogger("hangar.operator")


@dataclass
class Context:
    kube: Kube  # the home namespace's; ``kube_in`` acts in another
    db: Database
    settings: Settings
    gateway: Gateway
    events: Recorder
    # One lock per (namespace, session): every change to a session, its sandbox, turns and approvals.
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    # Run keys of the sandboxes this process started or verified (by run id); dropped on release.
    run_keys: dict[str, bytes] = field(default_factory=dict)
    slot_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Sessions whose run is being made: their slot is taken before their status says so (Sandboxes.start).
    reserved: set[tuple[str, str]] = field(default_factory=set)
    # Unclaimed warm sandboxes (pools.py), (namespace, pod) -> environment: each holds a slot.
    pool_members: dict[tuple[str, str], str] = field(default_factory=dict)
    gateway_port: int = 0
    # Tower's decisions API, while the approval kind is in shadow or enforce and HANGAR_GOVERNANCE_URL is set.
    tower: TowerClient | None = None
    # What the watches last saw (cache.py): slot counts and sweeps without an apiserver call.
    cache: Cache = field(default_factory=Cache)
    # New runs' Starting writes, held until their drivers connect (held_starts.py); ``write_held`` writes
    # one (set in controllers.py), which taking the session's lock does first.
    held: HeldStarts = field(default_factory=HeldStarts)
    write_held: Callable[[str, str], Awaitable[None]] | None = None

    @property
    def home(self) -> str:
        return self.settings.namespace

    def serves(self, namespace: str) -> bool:
        """Is ``namespace`` one this operator serves (HANGAR_WATCH_NAMESPACES, ``*``: every one)?"""
        return self.settings.watch_all or namespace in self.settings.watch_namespaces

    async def list_served(self, plural: str) -> list[Obj]:
        """Every object of ``plural`` in the namespaces this operator serves."""
        if self.settings.watch_all:
            return await self.kube.list_all(plural)
        return [x for ns in self.settings.watch_namespaces for x in await self.kube_in(ns).list(plural)]

    async def resync_cache(self) -> None:
        await self.cache.prime(self.list_served)

    async def cached(self, namespace: str, plural: str, name: str) -> Obj | None:
        """The object as the watch cache holds it once primed (``cache.py``: the operator's own writes are in
        it at once, so for what only the operator writes it is as current as a read), else as read from the
        apiserver. The cache's own object, not a copy: a caller that changes it copies it first."""
        obj = self.cache.fresh(plural, namespace, name)
        if obj is not None:
            return obj
        return await self.kube_in(namespace).get(plural, name)

    def kube_in(self, namespace: str) -> Kube:
        return self.kube.scoped(namespace)

    def lock(self, namespace: str, session: str, keep_held: bool = False) -> SessionLock:
        """The session's lock. Taking it writes the session's held Starting status first, so whoever holds
        it sees the status as written; ``keep_held``: the caller folds that write into its own (a connect)."""
        lock = self.locks.setdefault((namespace, session), asyncio.Lock())
        return SessionLock(lock, None if keep_held else self, namespace, session)

    def drop_lock(self, namespace: str, session: str) -> None:
        self.locks.pop((namespace, session), None)

    def gateway_address(self) -> str:
        return self.settings.gateway_address or f"127.0.0.1:{self.gateway_port}"

    def scope(self, kind: str, namespace: str, name: str) -> str:
        return runs.scope(self.home, kind, namespace, name)

    def run(self, namespace: str, session: str, n: int) -> runs.Run:
        return runs.make_run(self.home, namespace, session, n)

    def run_of(self, namespace: str, pod: str | None) -> runs.Run | None:
        return runs.run_of_pod(self.home, namespace, pod) if pod else None

    async def activity(
        self, namespace: str, session: str, kind: str, payload: dict[str, Any], turn: str | None = None
    ) -> None:
        """An activity event of a session (what the api's event stream shows)."""
        await self.db.append_event(self.scope("session", namespace, session), kind, payload, turn)


class SessionLock:
    def __init__(self, lock: asyncio.Lock, ctx: Context | None, namespace: str, session: str) -> None:
        self.lock, self.ctx, self.key = lock, ctx, (namespace, session)

    async def __aenter__(self) -> None:
        await self.lock.acquire()
        ctx = self.ctx
        if ctx is not None and ctx.write_held is not None and ctx.held.has(self.key):
            try:
                await ctx.write_held(*self.key)
            except BaseException:
                self.lock.release()
                raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.lock.release()


def resource(namespace: str, name: str) -> dict[str, str]:
    """The ``extra`` of a log record about one resource (the JSON log formatter shows it)."""
    return {"resource": f"{namespace}/{name}"}
