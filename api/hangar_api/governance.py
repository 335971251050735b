"""``POST /api/governance/events``: Tower's signed events (spec 002).

The route answers 404 until governance is on (any kind in shadow or enforce) and 503 while the webhook
secret it names is not stored. It takes no hangar token: Tower's signature is the only credential. The
checks (signature, freshness, event, event id, replay) are ``hangar.governance.webhook``'s; this module reads
the body within its limit, audits every refusal ``governance.event_rejected`` with its reason, and acts on
an accepted event:

* ``approval.created`` / ``approval.decided`` are hints: the decision is re-read from Tower
  (``GET /v1/decisions/{id}``) and only that answer counts. It is recorded, and the Approval that carries
  that Tower id (label ``hangar.dev/tower-approval``) gets it as its ``spec.decision``, the way a person's
  decision is written. When Tower can't answer, 503, and the event id is forgotten so the retry is new.
* ``run.stop`` goes through the interrupt path like ``hangar session interrupt``, marks the session stopped
  with who stopped it and why (``spec.stopped``, ``spec.stoppedBy``, ``spec.stopReason``), audited
  ``governance.run_stop``; a run hangar doesn't know answers 200 ``{"ignored": "hangar has no such run"}``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter

from hangar.governance import events, webhook
from hangar.governance.tower import TowerClient, TowerUnavailable
from hangar.kube import ApiException, Kube, Obj
from hangar.models import Approval, Session
from hangar.models import labels as L
from hangar.models.base import NAME_MAX, NAME_PATTERN
from hangar.store import Database

from .errors import Problem
from .schemas import GovernanceAnswer

__all__ = ["Governance", "TowerClient", "WebhookSecrets", "router"]

log = logging.getLogger("hangar.api.governance")
router = APIRouter(tags=["governance"])

EVENT_IDS = "tower-event"
TOWER_LABEL = L.TOWER_APPROVAL
TOWER_DECISION = L.TOWER_DECISION
NO_SUCH_RUN = {"ignored": "hangar has no such run"}
# How long a read secret is trusted before it is read again, so a rotated one is picked up.
SECRET_TTL = 15.0

EVENTS = Counter("hangar_governance_events_total", "Tower events by kind and outcome", ["kind", "outcome"])
REFUSALS = Counter("hangar_governance_refusals_total", "Tower deliveries refused, by reason", ["reason"])


class WebhookSecrets:
    """The signing secrets, read from the Kubernetes Secret that ``HANGAR_GOVERNANCE_WEBHOOK_SECRET`` names
    (``name`` or ``name/key``, key ``webhook-secret`` by default). The value may hold several secrets, one
    a line, while one rotates. Re-read every ``SECRET_TTL`` seconds, and at once (at most once a second)
    when a signature does not match, so a rotation takes effect without a restart."""

    def __init__(self, kube: Kube, ref: str) -> None:
        name, _, key = ref.partition("/")
        self.kube, self.name, self.key = kube, name, key or "webhook-secret"
        self._values: list[bytes] = []
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    async def current(self, refresh: bool = False) -> list[bytes]:
        async with self._lock:
            age = time.monotonic() - self._read_at
            if age > SECRET_TTL or (refresh and age > 1.0):
                self._values = await self._read()
                self._read_at = time.monotonic()
            return self._values

    async def _read(self) -> list[bytes]:
        import base64

        obj = await self.kube.get_core("secrets", self.name)
        raw = ((obj or {}).get("data") or {}).get(self.key)
        if not raw:
            return []
        text = base64.b64decode(raw).decode("utf-8", "replace")
        return [line.strip().encode() for line in text.splitlines() if line.strip()]


class Governance:
    """What the route needs while governance is on."""

    def __init__(
        self,
        kube: Kube,
        db: Database,
        secrets: WebhookSecrets,
        tower: TowerClient | None,
        approval_mode: str = "enforce",
    ) -> None:
        self.kube, self.db, self.secrets, self.tower = kube, db, secrets, tower
        # shadow: Tower's answers are recorded beside what hangar did, never applied as a decision.
        self.approval_mode = approval_mode

    async def close(self) -> None:
        if self.tower is not None:
            await self.tower.close()


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None past ``limit`` bytes (read no further than that)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _refuse(g: Governance, request: Request, status: int, reason: str) -> JSONResponse:
    REFUSALS.labels(reason=reason.split(":")[0].split(" (")[0][:60]).inc()
    claimed = request.headers.get("x-aw-event-id", "")[:200] or "-"
    await g.db.audit("tower", "governance.event_rejected", claimed, reason=reason, status=status)
    log.warning("governance event refused (%s): %s", status, reason)
    return JSONResponse({"detail": reason}, status_code=status)


@router.post(
    "/api/governance/events",
    response_model=GovernanceAnswer,
    responses={
        200: {"description": "Accepted, or ignored (a duplicate, or a run hangar does not have)"},
        400: {"model": Problem, "description": "Not an event, or X-AW-Event-Id is not the body's id"},
        401: {"model": Problem, "description": "Missing, wrong or stale signature"},
        404: {"model": Problem, "description": "Governance is off"},
        409: {"model": Problem, "description": "The run's resources changed meanwhile; Tower retries"},
        413: {"model": Problem, "description": "Body over the limit"},
        422: {"model": Problem, "description": "The apiserver refused what the event asked for"},
        503: {
            "model": Problem,
            "description": "The webhook secret is not stored, or Tower could not be asked",
        },
    },
)
async def governance_events(request: Request) -> JSONResponse:
    g: Governance | None = getattr(request.app.state, "governance", None)
    if g is None:
        raise HTTPException(404, "governance is off (HANGAR_GOVERNANCE)")
    secrets = await g.secrets.current()
    if not secrets:
        secrets = await g.secrets.current(refresh=True)
    if not secrets:
        return JSONResponse(
            {"detail": f"the webhook secret {g.secrets.name}/{g.secrets.key} is not stored"}, status_code=503
        )
    body = await _read_body(request, events.MAX_BODY)
    if body is None:
        return await _refuse(g, request, 413, f"body over {events.MAX_BODY} bytes")

    async def accept(item: str) -> bool:
        return await g.db.accept_id(EVENT_IDS, item, webhook.KEEP_IDS_SECONDS)

    v = await webhook.receive(request.headers, body, secrets, time.time(), accept)
    if v.status == 401 and v.reason == "signature does not match":
        fresh = await g.secrets.current(refresh=True)  # the secret may have rotated since it was read
        if fresh != secrets:
            v = await webhook.receive(request.headers, body, fresh, time.time(), accept)
    if v.event is None:
        return await _refuse(g, request, v.status, v.reason)
    if not v.accepted:
        EVENTS.labels(kind=v.event.kind, outcome="duplicate").inc()
        await g.db.audit("tower", "governance.event_rejected", v.event.id, reason=v.reason, status=200)
        return JSONResponse(v.body)
    try:
        out = await _apply(g, v.event)
    except TowerUnavailable as e:
        await g.db.forget_id(EVENT_IDS, v.event.id)  # Tower's retry then counts as new
        EVENTS.labels(kind=v.event.kind, outcome="tower_unavailable").inc()
        await g.db.audit("tower", "governance.event_rejected", v.event.id, reason=f"Tower unavailable: {e}")
        return JSONResponse({"detail": f"Tower could not be asked: {e}"}, status_code=503)
    except BaseException:
        await g.db.forget_id(EVENT_IDS, v.event.id)  # nothing was applied: let the retry try again
        raise
    EVENTS.labels(kind=v.event.kind, outcome=str(out.get("outcome", "applied"))).inc()
    return JSONResponse(out.get("body", {"ok": True}))


async def _apply(g: Governance, event: events.Event) -> dict[str, Any]:
    if event.kind == "run.stop":
        return await _run_stop(g, event)
    return await _approval_hint(g, event)


async def _approval_hint(g: Governance, event: events.Event) -> dict[str, Any]:
    assert event.approval is not None
    aid = event.approval.id
    if g.tower is None:
        raise TowerUnavailable("HANGAR_GOVERNANCE_URL is not set: decisions can't be re-read")
    decision = await g.tower.decision(aid)
    await g.db.audit(
        "tower",
        "governance.decision_read",
        aid,
        event=event.id,
        kind=event.kind,
        status=decision.status,
        decided_by=decision.decided_by,
    )
    # Kept an hour, refreshed on every re-read: a "decided" before hangar has recorded the call's receipt
    # is applied by the operator once it has (and a shadow answer is recorded from here).
    await g.db.keep_tower_decision(aid, decision.model_dump(mode="json"))
    if decision.status not in ("allowed", "denied"):
        return {"outcome": decision.status, "body": {"ok": True, "decision": decision.status}}
    applied = 0
    found = await g.kube.list("approvals", label_selector=f"{TOWER_LABEL}={aid}") if _label_ok(aid) else []
    for a in found:
        if g.approval_mode == "shadow":
            # Nothing is decided because of Tower: the operator records its answer beside hangar's.
            await _nudge(g.kube, a, decision.status)
            continue
        if await _decide(g.kube, a, decision.status, decision.decided_by, decision.reason):
            applied += 1
        elif decision.status == "allowed":
            await _resume_refused(g, a, aid, event)
    return {"outcome": decision.status, "body": {"ok": True, "decision": decision.status, "applied": applied}}


def _label_ok(value: str) -> bool:
    return bool(re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)) and len(value) <= 63


async def _nudge(k: Kube, a: Obj, status: str) -> None:
    """An annotation change, so the operator reads Tower's answer kept in the database now."""
    try:
        await k.patch(
            "approvals", a["metadata"]["name"], {"metadata": {"annotations": {TOWER_DECISION: status}}}
        )
    except ApiException as e:
        if e.status != 404:
            raise


async def _resume_refused(g: Governance, a: Obj, aid: str, event: events.Event) -> None:
    """An allow for a call whose turn was stopped (run.stop, a person) resumes nothing: audited."""
    ap = Approval.model_validate(a)
    if ap.status.phase != "Withdrawn":
        return
    session = ap.spec.session or ""
    s = await g.kube.get("sessions", session) if session else None
    stopped = s is not None and Session.model_validate(s).spec.stopped
    await g.db.audit(
        "tower",
        "governance.resume_refused",
        session or ap.name,
        approval=ap.name,
        tower=aid,
        event=event.id,
        reason="the session was stopped" if stopped else (ap.status.reason or "the call no longer waits"),
    )


async def _decide(k: Kube, a: Obj, status: str, by: str | None, reason: str | None) -> bool:
    """Tower's decision as the Approval's ``spec.decision``, once, while it is pending (409: already decided)."""
    ap = Approval.model_validate(a)
    if ap.spec.decision or (ap.status.phase or "Pending") != "Pending":
        return False
    spec: dict[str, Any] = {
        "decision": "allow" if status == "allowed" else "deny",
        "decidedBy": f"tower:{by or ''}",
    }
    if reason:
        spec["message"] = reason[:8192]
    try:
        await k.patch(
            "approvals",
            a["metadata"]["name"],
            {"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]}, "spec": spec},
        )
    except ApiException as e:
        if e.status in (404, 409, 422):
            return False
        raise
    return True


async def _run_stop(g: Governance, event: events.Event) -> dict[str, Any]:
    from .steering import interrupt_session, running_turn

    run = event.run
    by = (run.stopped_by if run else None) or "tower"
    reason = (run.reason if run else None) or ""
    sessions = await _stopped_sessions(g.kube, event)
    if not sessions:
        await g.db.audit(
            "tower",
            "governance.run_stop",
            event.session or event.job or "-",
            stopped_by=by,
            reason=reason,
            event=event.id,
            ignored="hangar has no such run",
        )
        return {"outcome": "no_such_run", "body": dict(NO_SUCH_RUN)}
    names = []
    for s in sessions:
        name = s["metadata"]["name"]
        names.append(name)
        if await running_turn(g.kube, s) is not None:
            try:
                await interrupt_session(g.kube, s, None, f"tower:{by}")
            except HTTPException:
                pass  # it ended meanwhile: stopping the session below is all that is left
        await g.kube.patch(
            "sessions",
            name,
            {"spec": {"stopped": True, "stoppedBy": f"tower:{by}"[:253], "stopReason": reason}},
        )
        await g.db.append_event(
            f"session/{name}", "run_stopped", {"stopped_by": by, "reason": reason, "event": event.id}
        )
        await g.db.audit("tower", "governance.run_stop", name, stopped_by=by, reason=reason, event=event.id)
    return {"outcome": "stopped", "body": {"ok": True, "stopped": names}}


async def _stopped_sessions(k: Kube, event: events.Event) -> list[Obj]:
    """The sessions a run.stop names: its session, else the job's attempts that still run."""
    for name in (event.session, event.job):
        if name and (len(name) > NAME_MAX or not re.fullmatch(NAME_PATTERN, name)):
            return []  # no resource of hangar's can have that name
    if event.session:
        s = await k.get("sessions", event.session)
        return [s] if s is not None else []
    if event.job and await k.get("jobs", event.job) is not None:
        return [
            s
            for s in await k.list("sessions", label_selector=f"hangar.dev/job={event.job}")
            if not (s.get("spec") or {}).get("stopped")
        ]
    return []
