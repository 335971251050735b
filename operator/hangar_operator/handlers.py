"""kopf handlers: thin entry points that hand each change to the Runtime's idempotent reconcilers."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from hangar.models import GROUP, VERSION

from .state import runtime

log = logging.getLogger("hangar.operator")


@kopf.on.resume(GROUP, VERSION, "sessions")
@kopf.on.create(GROUP, VERSION, "sessions")
@kopf.on.update(GROUP, VERSION, "sessions")
async def session_changed(name: str, **_: Any) -> None:
    rt = runtime()
    await rt.check_sandbox(name)
    await rt.reconcile_session(name)


@kopf.timer(GROUP, VERSION, "sessions", interval=5.0, idle=5.0)
async def session_tick(name: str, **_: Any) -> None:
    """Retries what waits on something outside the session: a free slot, an environment, a lost pod."""
    rt = runtime()
    await rt.check_sandbox(name)
    await rt.reconcile_session(name)


@kopf.on.resume(GROUP, VERSION, "turns")
@kopf.on.create(GROUP, VERSION, "turns")
async def turn_created(body: kopf.Body, **_: Any) -> None:
    """A new Turn may start now."""
    rt = runtime()
    obj = dict(body)
    await rt.reconcile_turn(obj)
    session = obj["spec"].get("session")
    if session:
        await rt.reconcile_session(session)


@kopf.on.event(GROUP, VERSION, "turns")
async def turn_event(event: kopf.RawEvent, **_: Any) -> None:
    """Requests written into a Turn's spec (steers, withdrawals, interrupts, classes: REST, the CLI,
    kubectl) are delivered (steering.py). A raw event handler: a burst of steers costs no kopf bookkeeping
    writes on the Turn, and events that ask for nothing new are dropped without an API call."""
    if event["type"] == "DELETED":
        return
    rt = runtime()
    obj = dict(event["object"])
    if rt.steering.pending(obj):
        await rt.reconcile_turn(obj)


@kopf.on.event(
    "", "v1", "pods", labels={"app.kubernetes.io/part-of": "hangar", "app.kubernetes.io/component": "sandbox"}
)
async def sandbox_pod_event(event: kopf.RawEvent, **_: Any) -> None:
    pod: dict[str, Any] = dict(event["object"])
    status: dict[str, Any] = pod.get("status") or {}
    phase = status.get("phase")
    if event["type"] == "DELETED":
        await runtime().pod_gone(pod, "was deleted")
    elif phase in ("Failed", "Succeeded"):
        reason = status.get("reason") or phase
        await runtime().pod_gone(pod, f"ended ({reason})")


@kopf.on.event(GROUP, VERSION, "approvals")
async def approval_event(event: kopf.RawEvent, **_: Any) -> None:
    """A decision in spec.decision (REST, the CLI, kubectl patch) is delivered; a pending one is timed.

    A raw event handler: no kopf bookkeeping is written to Approvals, and the listing at start-up is the
    resume (re-arms deadlines, re-sends decisions recorded but not confirmed by the driver)."""
    if event["type"] == "DELETED":
        return
    await runtime().approvals.reconcile(dict(event["object"]))


@kopf.on.resume(GROUP, VERSION, "jobs")
@kopf.on.create(GROUP, VERSION, "jobs")
@kopf.on.update(GROUP, VERSION, "jobs", field="spec")
async def job_changed(name: str, **_: Any) -> None:
    await runtime().jobs.reconcile(name)


@kopf.timer(
    GROUP,
    VERSION,
    "jobs",
    interval=10.0,
    idle=10.0,
    when=lambda status, **_: status.get("state") not in ("done", "failed", "cancelled"),
)
async def job_tick(name: str, **_: Any) -> None:
    """A backstop for changes no attempt session event showed (a turn's question, say)."""
    await runtime().jobs.reconcile(name)


@kopf.on.event(GROUP, VERSION, "sessions", labels={"hangar.dev/job": kopf.PRESENT})
async def attempt_event(event: kopf.RawEvent, **_: Any) -> None:
    """Any change of a job's attempt session (phase, pending approvals, taint, turn ends) re-summarises the
    job. A raw event handler: nothing is written to the session for it."""
    job = ((event["object"].get("metadata") or {}).get("labels") or {}).get("hangar.dev/job")
    if job:
        await runtime().jobs.reconcile(job)
