"""Reconciles on time without a timer per session: exact wake-ups, wake-ups on what frees, and one sweeper.

An idle session costs nothing: nothing looks at it until something happens to it (a watch event, a driver
event) or one of its own deadlines comes (``Wakeups``: the connect timeout of a starting sandbox, the idle
suspension, the next step of a suspension). What a session waits for outside itself wakes it when it changes,
seen in the cache (``cache.py``): a freed slot wakes the sessions waiting for one (oldest first, as many as
are free), a created Environment those that named it, a created Session the forks of it. Every wake-up runs
through the retry queue (backoff on errors). One ``Sweeper`` walks the cache every ``SWEEP_SECONDS`` as the
backstop for what no event says (a pod gone while the operator was down, a reconcile that failed): it reads
only memory, and calls the apiserver only for the sessions it found something wrong with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from hangar.kube import Obj, status_of

from .cache import Key
from .context import Context
from .retry import Retrier

log = logging.getLogger("hangar.operator.sweeper")

SWEEP_SECONDS = 30.0
RESYNC_EVERY = 10  # sweeps between re-listings of the cache (a deletion no watch event reported)
Reconcile = Callable[[str, str], Awaitable[None]]


def _status(obj: Obj) -> dict[str, Any]:
    return status_of(obj)


def holds_slot(obj: Obj) -> bool:
    return bool((_status(obj).get("sandbox") or {}).get("pod"))


def waits_for_slot(obj: Obj) -> bool:
    st = _status(obj)
    return (
        st.get("phase") == "Pending"
        and st.get("reason") == "NoSandboxSlot"
        and not (obj.get("metadata") or {}).get("deletionTimestamp")
    )


class Wakeups:
    """At most one pending wake-up per key. A new one due sooner replaces it; one due later does not: the work
    that runs at the earlier time arms its next wake-up itself (every reconcile computes when it is next due),
    while a later one replacing an earlier one lost a wake-up (a pool's reconcile ending with its next
    max-age wake-up cancelled the "a member is ready" wake-up made a moment before, in the same turn of the
    loop: the pool's status said 1/2 ready until that max age). Nothing runs until it is due."""

    def __init__(self, retry: Retrier) -> None:
        self.retry = retry
        self.handles: dict[str, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def at(self, key: str, when: float, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work`` at Unix time ``when`` (or now, if past)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        delay = max(0.0, when - time.time())
        old = self.handles.get(key)
        if old is not None:
            if old.when() <= loop.time() + delay:
                return
            old.cancel()
        self.handles[key] = loop.call_later(delay, self._fire, key, work)

    def now(self, key: str, work: Callable[[], Awaitable[None]]) -> None:
        self.at(key, 0.0, work)

    def _fire(self, key: str, work: Callable[[], Awaitable[None]]) -> None:
        self.handles.pop(key, None)
        task = asyncio.get_running_loop().create_task(self.retry.run(key, work))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cancel(self, key: str) -> None:
        old = self.handles.pop(key, None)
        if old is not None:
            old.cancel()

    def stop(self) -> None:
        for h in self.handles.values():
            h.cancel()
        self.handles.clear()
        for t in self.tasks:
            t.cancel()


class Sweeper:
    def __init__(self, ctx: Context, wakeups: Wakeups) -> None:
        self.ctx = ctx
        self.wakeups = wakeups
        self.reconcile: Reconcile | None = None  # Sessions.reconcile
        self.check: Reconcile | None = None  # Sandboxes.check
        self.recount: Reconcile | None = None  # Environments.reconcile
        self.wake_pools: Callable[[], None] | None = None  # Pools.wake_short: slots left after the sessions
        self.failed: set[Key] = set()  # sessions whose last reconcile raised
        self.task: asyncio.Task[None] | None = None
        self.sweeps = 0
        ctx.cache.observers.append(self.observe)

    # --- wake-ups on change ------------------------------------------------------------------------------
    def wake(self, ns: str, name: str) -> None:
        reconcile = self.reconcile
        if reconcile is not None:
            self.wakeups.now(f"sessions/{ns}/{name}", lambda: reconcile(ns, name))

    def observe(self, plural: str, old: Obj | None, new: Obj | None) -> None:
        """The cache saw a change: wake what waited for it. Only memory is read here."""
        if plural == "sessions":
            gone = new is None or bool((new.get("metadata") or {}).get("deletionTimestamp"))
            if old is not None and holds_slot(old) and (gone or not holds_slot(new or {})):
                self.wakeups.now("slots", self.fill_slots)
            if old is None and new is not None:
                name = str(new["metadata"]["name"])
                ns = str(new["metadata"].get("namespace") or "")
                for (wns, wname), obj in self.ctx.cache.items("sessions"):
                    st = _status(obj)
                    if (
                        wns == ns
                        and st.get("reason") == "ParentNotFound"
                        and obj["spec"].get("forkOf") == name
                    ):
                        self.wake(wns, wname)
            self._envs_changed(old, new)
        elif plural == "environments" and old is None and new is not None:
            ns, name = str(new["metadata"].get("namespace") or ""), str(new["metadata"]["name"])
            for (wns, wname), obj in self.ctx.cache.items("sessions"):
                st = _status(obj)
                if (
                    wns == ns
                    and st.get("reason") == "EnvironmentNotFound"
                    and obj["spec"].get("environment") == name
                ):
                    self.wake(wns, wname)

    def _envs_changed(self, old: Obj | None, new: Obj | None) -> None:
        """An environment's count of sessions may have changed: recount it (once, a moment later)."""
        if self.recount is None:
            return

        def use(obj: Obj | None) -> tuple[str, str, bool] | None:
            if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
                return None
            spec = obj.get("spec") or {}
            return (
                str(obj["metadata"].get("namespace") or ""),
                str(spec.get("environment")),
                bool(spec.get("stopped")),
            )

        before, after = use(old), use(new)
        if before == after:
            return
        for u in (before, after):
            if u is not None:
                self.recount_at(u[0], u[1], time.time() + 1.0)

    def recount_at(self, ns: str, env: str, when: float) -> None:
        recount = self.recount
        if recount is not None:
            self.wakeups.at(f"environments/{ns}/{env}", when, lambda: recount(ns, env))

    async def fill_slots(self) -> None:
        """Wake the sessions waiting for a sandbox slot, oldest first, as many as there are free slots."""
        cache = self.ctx.cache
        if not cache.primed:
            return
        sessions = list(cache.items("sessions"))
        held = sum(1 for _, obj in sessions if holds_slot(obj)) + len(self.ctx.pool_members)
        free = self.ctx.settings.max_sandboxes - held
        waiting = sorted(
            (obj["metadata"].get("creationTimestamp") or "", key)
            for key, obj in sessions
            if waits_for_slot(obj)
        )
        for _, (ns, name) in waiting[: max(0, free)]:
            self.wake(ns, name)
        if free > len(waiting) and self.wake_pools is not None:
            self.wake_pools()  # waiting sessions first; a pool counts them again before it refills

    # --- the sweeper --------------------------------------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.create_task(self._loop())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            with contextlib.suppress(Exception):
                await self.sweep()

    async def sweep(self) -> int:
        """One pass over the cache; the number of sessions it woke."""
        cache = self.ctx.cache
        if not cache.primed:
            return 0
        self.sweeps += 1
        if self.sweeps % RESYNC_EVERY == 0:
            await self.ctx.resync_cache()
        woken = 0
        now = time.time()
        limit = self.ctx.settings.connect_timeout
        for (ns, name), obj in cache.items("sessions"):
            st = _status(obj)
            sandbox = st.get("sandbox") or {}
            pod = sandbox.get("pod")
            phase = cache.pods.get((ns, pod)) if pod else None
            started = _unix(sandbox.get("startedAt"))
            look = (ns, name) in self.failed or (
                st.get("phase") not in ("Failed", "Stopped")
                and (
                    (pod and phase in (None, "Failed", "Succeeded"))
                    or (st.get("phase") == "Starting" and started is not None and now - started > limit)
                    or st.get("phase") == "Suspending"
                    or st.get("reason") in ("EnvironmentNotFound", "ParentNotFound")
                )
            )
            if look:
                woken += 1
                self._look(ns, name)
        await self.fill_slots()
        for (ns, env), users in self.env_counts().items():
            env_obj = cache.get("environments", ns, env)
            if env_obj is not None and _status(env_obj).get("sessions") != users:
                self.recount_at(ns, env, 0.0)
        return woken

    def _look(self, ns: str, name: str) -> None:
        check, reconcile = self.check, self.reconcile
        if check is None or reconcile is None:
            return

        async def work() -> None:
            await check(ns, name)  # confirms with the apiserver before it releases anything
            await reconcile(ns, name)

        self.wakeups.now(f"sessions/{ns}/{name}", work)

    def env_counts(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {key: 0 for key, _ in self.ctx.cache.items("environments")}
        for (ns, _), obj in self.ctx.cache.items("sessions"):
            spec = obj.get("spec") or {}
            if spec.get("stopped"):
                continue
            key = (ns, str(spec.get("environment")))
            out[key] = out.get(key, 0) + 1
        return out


def _unix(ts: Any) -> float | None:
    if not isinstance(ts, str) or not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
