"""The wiring: every controller built once from the shared Context, each given only what it needs.

Dependencies point one way (no import cycles): turns (ending, steering) ← approvals ← turn outcomes ←
sandboxes ← sessions ← router. The two calls that go back up (a sandbox released → look at the session
again; an interrupt unconfirmed → kill the run) are callbacks set here.
"""

from __future__ import annotations

from dataclasses import dataclass

from hangar.config import Settings
from hangar.kube import Kube
from hangar.store import Database

from .approvals.controller import Approvals
from .approvals.requests import PermissionRequests
from .approvals.taint import Tainting
from .context import Context
from .environments import Environments
from .gateway import Gateway
from .jobs import Jobs
from .k8s_events import Recorder
from .retry import Retrier
from .router import Router
from .sandboxes import Sandboxes
from .sessions import Sessions
from .turns.deadlines import Deadlines
from .turns.outcomes import TurnOutcomes
from .turns.steering import Steering


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

    async def start(self) -> None:
        self.ctx.gateway_port = await self.ctx.gateway.start()

    async def stop(self) -> None:
        self.deadlines.stop()
        self.approvals.stop()
        self.retry.stop()
        await self.ctx.gateway.stop()


def build(kube: Kube, db: Database, settings: Settings, retry: Retrier | None = None) -> Controllers:
    holder: list[Router] = []

    async def key_for_run(run: str) -> bytes | None:
        return await holder[0].key_for_run(run)

    async def on_event(run: str, seq: int, name: str, payload: dict[str, object]) -> None:
        await holder[0].on_event(run, seq, name, payload)

    async def on_connect(run: str, hello: dict[str, object]) -> None:
        await holder[0].on_connect(run, hello)

    async def on_disconnect(run: str) -> None:
        await holder[0].on_disconnect(run)

    async def on_rejected(who: str, reason: str) -> None:
        await holder[0].on_rejected(who, reason)

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
    ctx = Context(kube=kube, db=db, settings=settings, gateway=gateway, events=Recorder())
    deadlines = Deadlines(settings.interrupt_grace)
    steering = Steering(ctx, deadlines)
    tainting = Tainting(ctx)
    approvals = Approvals(ctx, tainting)
    outcomes = TurnOutcomes(ctx, steering, deadlines, approvals)
    sandboxes = Sandboxes(ctx, outcomes, approvals)
    sessions = Sessions(ctx, sandboxes, outcomes, steering, tainting)
    sandboxes.reconcile_session = sessions.reconcile
    deadlines.on_expiry = sessions.kill_unconfirmed
    router = Router(
        ctx, sessions, sandboxes, outcomes, steering, approvals, PermissionRequests(ctx, approvals)
    )
    holder.append(router)
    return Controllers(
        ctx=ctx,
        sessions=sessions,
        sandboxes=sandboxes,
        steering=steering,
        outcomes=outcomes,
        approvals=approvals,
        jobs=Jobs(ctx),
        environments=Environments(ctx),
        router=router,
        retry=retry or Retrier(),
        deadlines=deadlines,
    )
