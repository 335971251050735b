"""kopf handlers: thin entry points that hand each change to its kind's controller.

No timer per session or environment: an idle session costs nothing. Deadlines, wake-ups on what frees and
one sweeper do what a periodic look did (sweeper.py).

Shared state comes in kopf's ``memo`` (``memo.controllers``, set by ``main.run``); every handler acts in
the namespace of the object it was given. Raw event handlers (which kopf does not retry) go through the
retry queue (``retry.py``).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from hangar.models import GROUP, VERSION
from hangar.models import labels as L
from hangar.models.job import JOB_FINAL

from .controllers import Controllers
from .foreign_status import pod_status
from .pool_objects import MEMBER as POOL_MEMBER
from .sandbox_objects import SANDBOX

log = logging.getLogger("hangar.operator")


# The pods the handlers below take, selected by the apiserver (``main.configure``): kopf watches a resource
# whole and filters by each handler's labels itself, so without it every status change of every pod in the
# cluster would reach the operator to be decoded and dropped.
POD_SELECTOR = f"{L.PART_OF}=hangar,{L.COMPONENT} in ({SANDBOX},{POOL_MEMBER})"


def _c(memo: Any) -> Controllers:
    controllers: Controllers = memo.controllers
    return controllers


# The cache (cache.py) first: kopf runs event handlers before change handlers, so a reconcile that this
# event starts reads what it says.
@kopf.on.event(GROUP, VERSION, "sessions")
async def session_seen(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    # A DELETED event drops it from the cache, which drops kopf's essence of it too (diffbase.py).
    _c(memo).ctx.cache.seen("sessions", dict(event), namespace)


@kopf.on.event(GROUP, VERSION, "environments")
async def environment_seen(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    _c(memo).ctx.cache.seen("environments", dict(event), namespace)


@kopf.on.resume(GROUP, VERSION, "sessions")
@kopf.on.create(GROUP, VERSION, "sessions")
@kopf.on.update(GROUP, VERSION, "sessions")
async def session_changed(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    assert namespace is not None  # every kind served is namespaced
    c = _c(memo)
    await c.sandboxes.check(namespace, name)
    await c.sessions.reconcile(namespace, name)


@kopf.on.resume(GROUP, VERSION, "turns")
@kopf.on.create(GROUP, VERSION, "turns")
async def turn_created(body: kopf.Body, name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    """A new Turn may start now."""
    assert namespace is not None  # every kind served is namespaced
    c = _c(memo)
    spec = body.get("spec") or {}
    session = spec.get("session")
    if session:
        if spec.get("steers") or spec.get("interrupts"):  # else there is nothing to deliver: no reads
            await _reconcile_turn(c, namespace, session, name)
        await c.sessions.reconcile(namespace, session)


async def _reconcile_turn(c: Controllers, ns: str, session: str, turn: str) -> None:
    async with c.ctx.lock(ns, session):
        await c.steering.reconcile(ns, session, turn)


@kopf.on.event(GROUP, VERSION, "turns")
async def turn_event(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    """Requests written into a Turn's spec (steers, withdrawals, interrupts, classes: REST, the CLI,
    kubectl) are delivered (turns/steering.py). A raw event handler: a burst of steers costs no kopf
    bookkeeping writes on the Turn, and events that ask for nothing new are dropped without an API call."""
    assert namespace is not None  # every kind served is namespaced
    if event["type"] == "DELETED":
        return
    c = _c(memo)
    obj: dict[str, Any] = dict(event["object"])
    session = (obj.get("spec") or {}).get("session")
    name = obj["metadata"]["name"]
    if session and c.steering.pending(namespace, obj):
        await c.retry.run(f"turns/{namespace}/{name}", lambda: _reconcile_turn(c, namespace, session, name))


@kopf.on.event("", "v1", "pods", labels={L.PART_OF: "hangar", L.COMPONENT: SANDBOX})
async def sandbox_pod_event(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    assert namespace is not None  # every kind served is namespaced
    pod: dict[str, Any] = dict(event["object"])
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    session, run, name = labels.get(L.SESSION), labels.get(L.RUN), meta.get("name", "")
    phase = pod_status(pod).phase
    _c(memo).ctx.cache.pod_seen(namespace, name, phase, event["type"] == "DELETED")
    if not session or not run:
        return
    why: str | None = None
    if event["type"] == "DELETED":
        why = "was deleted"
    elif phase in ("Failed", "Succeeded"):
        why = f"ended ({(pod.get('status') or {}).get('reason') or phase})"
    if why is not None:
        c = _c(memo)
        reason = why
        await c.retry.run(
            f"pods/{namespace}/{name}",
            lambda: c.sandboxes.pod_gone(namespace, session, run, name, reason, pod),
        )


@kopf.on.event(GROUP, VERSION, "approvals")
async def approval_event(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    """A decision in spec.decision (REST, the CLI, kubectl patch) is delivered; a pending one is timed.

    A raw event handler: no kopf bookkeeping is written to Approvals, and the listing at start-up is the
    resume (re-arms deadlines, re-sends decisions recorded but not confirmed by the driver)."""
    assert namespace is not None  # every kind served is namespaced
    if event["type"] == "DELETED":
        return
    c = _c(memo)
    seen: dict[str, Any] = dict(event["object"])
    name = seen["metadata"]["name"]
    await c.retry.run(f"approvals/{namespace}/{name}", lambda: c.approvals.reconcile(namespace, name, seen))


@kopf.on.resume(GROUP, VERSION, "jobs")
@kopf.on.create(GROUP, VERSION, "jobs")
@kopf.on.update(GROUP, VERSION, "jobs", field="spec")
async def job_changed(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    assert namespace is not None  # every kind served is namespaced
    await _c(memo).jobs.reconcile(namespace, name)


@kopf.timer(
    GROUP,
    VERSION,
    "jobs",
    interval=10.0,
    idle=10.0,
    when=lambda status, **_: status.get("state") not in JOB_FINAL,
)
async def job_tick(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    """A backstop for changes no attempt session event showed (a turn's question, say)."""
    assert namespace is not None  # every kind served is namespaced
    await _c(memo).jobs.reconcile(namespace, name)


@kopf.on.event(GROUP, VERSION, "sessions", labels={L.JOB: kopf.PRESENT})
async def attempt_event(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    """Any change of a job's attempt session (phase, pending approvals, taint, turn ends) re-summarises the
    job. A raw event handler: nothing is written to the session for it."""
    assert namespace is not None  # every kind served is namespaced
    job = ((event["object"].get("metadata") or {}).get("labels") or {}).get(L.JOB)
    if job:
        c = _c(memo)
        await c.retry.run(f"jobs/{namespace}/{job}", lambda: c.jobs.reconcile(namespace, job))


@kopf.on.resume(GROUP, VERSION, "environments")
@kopf.on.create(GROUP, VERSION, "environments")
@kopf.on.update(GROUP, VERSION, "environments", field="spec")
async def environment_changed(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    assert namespace is not None  # every kind served is namespaced
    await _c(memo).environments.reconcile(namespace, name)
    await _c(memo).pools.reconcile(namespace, name)


@kopf.on.delete(GROUP, VERSION, "environments", optional=True)
async def environment_deleted(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    """Its warm sandboxes go (their owner references would take them too, where a garbage collector runs)."""
    assert namespace is not None  # every kind served is namespaced
    await _c(memo).pools.reconcile(namespace, name)


@kopf.on.event("", "v1", "pods", labels={L.PART_OF: "hangar", L.COMPONENT: POOL_MEMBER})
async def pool_member_event(event: kopf.RawEvent, namespace: str | None, memo: Any, **_: Any) -> None:
    """A warm sandbox that ended or went is replaced."""
    assert namespace is not None  # every kind served is namespaced
    pod: dict[str, Any] = dict(event["object"])
    env = ((pod.get("metadata") or {}).get("labels") or {}).get(L.POOL)
    if env and (event["type"] == "DELETED" or pod_status(pod).phase in ("Failed", "Succeeded")):
        _c(memo).pools.wake(namespace, env)
    elif env:
        _c(memo).pools.pod_seen(namespace, pod)
