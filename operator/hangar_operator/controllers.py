"""The wiring: every controller built once from the shared Context, each given only what it needs.

Dependencies point one way (no import cycles): turns (ending, steering) ← approvals ← turn outcomes ←
sandboxes ← sessions ← router. The two calls that go back up (a sandbox released → look at the session
again; an interrupt unconfirmed → kill the run) are callbacks set here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from hangar.config import Settings
from hangar.governance.tower import TowerClient
from hangar.kube import Kube
from hangar.store import Database

from .approvals.controller import Approvals
from .approvals.requests import PermissionRequests
from .approvals.taint import Tainting
from .body_sweeper import BodySweeper
from .context import Context
from .environments import Environments
from .gateway import Gateway
from .governance.suspension import Suspensions
from .governance.tower_calls import TowerCalls
from .jobs import Jobs
from .k8s_events import Recorder
from .live_work import LiveWork
from .pools import Pools
from .retry import Retrier, transient
from .router import Router
from .sandboxes import Sandboxes
from .sessions import Sessions
from .sweeper import Sweeper, Wakeups
from .turns.deadlines import Deadlines
from .turns.outcomes import TurnOutcomes
from .turns.steering import Steering

log = logging.getLogger("hangar.operator")


@dataclass
class Controllers:
    ctx: Context
    sessions: Sessions
    sandboxes: Sandboxes
    steering: Steering
    outcomes: TurnOutcomes
    approvals: Approvals
    jobs: Jobs
    environments: Environments
    router: Router
    retry: Retrier
    deadlines: Deadlines
    tower_calls: TowerCalls
    suspensions: Suspensions
    bodies: BodySweeper
    wakeups: Wakeups
    sweeper: Sweeper
    live: LiveWork
    pools: Pools

    async def start(self) -> None:
        self.ctx.gateway_port = await self.ctx.gateway.start()
        await self.live.start()  # the api's channel for exec, process and watches
        self.tower_calls.start()  # re-reads Tower's decisions now and every minute
        self.bodies.start()  # deletes stored message bodies nothing names, every 10 minutes
        # The watches keep it current from here; a start right after the CRDs went in may be told "not now".
        await transient(self.ctx.resync_cache, within=60.0)
        self.sweeper.start()

    async def write_held(self, within: float = 5.0) -> None:
        """New runs' held Starting writes (held_starts.py): written on the way out, not lost; each ``within``
        seconds, so a lock held by work stuck on the apiserver does not hold up the stop."""

        async def write(key: tuple[str, str]) -> None:
            async with self.ctx.lock(*key):  # which writes it
                pass

        for key in self.ctx.held.keys():
            try:
                await asyncio.wait_for(write(key), within)
            except Exception as e:
                log.warning("session %s/%s: its Starting write was not written on the way out: %s", *key, e)
        self.ctx.held.close()

    async def stop(self) -> None:
        # The wake-ups and retries running or waiting now: cancelled below, then awaited, so none is left
        # pending on the loop (kopf's stop, or the next test on a shared loop, would meet it).
        left = [*self.wakeups.tasks, *self.retry.waiting.values()]
        await self.write_held()
        self.sweeper.stop()
        self.wakeups.stop()
        self.deadlines.stop()
        self.approvals.stop()
        self.tower_calls.stop()
        self.bodies.stop()
        self.suspensions.stop()
        self.retry.stop()
        await asyncio.gather(*left, return_exceptions=True)
        await self.live.stop()
        await self.ctx.gateway.stop()
        if self.ctx.tower is not None:
            await self.ctx.tower.close()


def tower_client(settings: Settings) -> TowerClient | None:
    """Tower's decisions API, while Tower governs approvals (shadow or enforce) and its URL is set."""
    if settings.governance_mode("approval") == "off" or not settings.governance_url:
        return None
    credential = settings.governance_credential.get_secret_value() if settings.governance_credential else ""
    return TowerClient(settings.governance_url, credential)


def build(kube: Kube, db: Database, settings: Settings, retry: Retrier | None = None) -> Controllers:
    holder: list[Router] = []

    async def key_for_run(run: str) -> bytes | None:
        return await holder[0].key_for_run(run)

    async def on_event(run: str, seq: int, name: str, payload: dict[str, object]) -> None:
        await holder[0].on_event(run, seq, name, payload)

    async def on_connect(run: str, hello: dict[str, object]) -> None:
        await holder[0].on_connect(run, hello)

    async def on_disconnect(run: str) -> None:
        live.disconnected(run)
        await holder[0].on_disconnect(run)

    async def on_rejected(who: str, reason: str) -> None:
        await holder[0].on_rejected(who, reason)

    retry = retry or Retrier()
    gateway = Gateway(
        host=settings.gateway_host,
        port=settings.gateway_port,
        key_for_run=key_for_run,
        on_event=on_event,
        on_connect=on_connect,
        on_disconnect=on_disconnect,
        on_rejected=on_rejected,
        acked_for_run=db.driver_acked,
    )
    ctx = Context(
        kube=kube, db=db, settings=settings, gateway=gateway, events=Recorder(), tower=tower_client(settings)
    )
    live = LiveWork(ctx)
    gateway.on_live = live.on_live
    # The operator's own writes reach its cache at once (read your writes: a slot taken is counted).
    kube.on_write = ctx.cache.put
    deadlines = Deadlines(settings.interrupt_grace)
    steering = Steering(ctx, deadlines)
    tainting = Tainting(ctx)
    approvals = Approvals(ctx, tainting)
    outcomes = TurnOutcomes(ctx, steering, deadlines, approvals)
    sandboxes = Sandboxes(ctx, outcomes, approvals)
    tower_calls = TowerCalls(ctx, approvals)
    suspensions = Suspensions(ctx, sandboxes, outcomes, approvals)
    # Governance sits above the Approval controller: it is told of every approval reconciled, of a
    # decision for a suspended session's call, and of a call withdrawn.
    approvals.hooks += [tower_calls.hook, suspensions.hook]
    approvals.on_held_decision = suspensions.decided
    approvals.on_withdrawn = tower_calls.withdrawn
    sessions = Sessions(ctx, sandboxes, outcomes, steering, tainting, suspensions)
    sandboxes.reconcile_session = sessions.reconcile
    ctx.write_held = sandboxes.write_held  # taking a session's lock writes its held Starting status first
    suspensions.reconcile_session = sessions.reconcile
    deadlines.on_expiry = sessions.kill_unconfirmed
    wakeups = Wakeups(retry)
    sweeper = Sweeper(ctx, wakeups)
    environments = Environments(ctx)
    pools = Pools(ctx, lambda: sandboxes.in_use("", ""))
    pools.wakeups = wakeups
    pools.on_slot_freed = lambda: wakeups.now("slots", sweeper.fill_slots)
    sweeper.wake_pools = pools.wake_short
    sandboxes.pools = pools
    sessions.wakeups = wakeups
    sweeper.failed = sessions.failed
    sweeper.reconcile, sweeper.check, sweeper.recount = (
        sessions.reconcile,
        sandboxes.check,
        environments.reconcile,
    )
    requests = PermissionRequests(ctx, approvals, tower_calls)
    router = Router(ctx, sessions, sandboxes, outcomes, steering, approvals, requests, suspensions)
    holder.append(router)
    jobs = Jobs(ctx)
    router.on_job_result = jobs.command_result
    return Controllers(
        ctx=ctx,
        sessions=sessions,
        sandboxes=sandboxes,
        steering=steering,
        outcomes=outcomes,
        approvals=approvals,
        jobs=jobs,
        environments=environments,
        router=router,
        retry=retry,
        deadlines=deadlines,
        tower_calls=tower_calls,
        suspensions=suspensions,
        bodies=BodySweeper(ctx),
        wakeups=wakeups,
        sweeper=sweeper,
        live=live,
        pools=pools,
    )
