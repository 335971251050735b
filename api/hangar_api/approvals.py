"""REST routes for a session's tool approvals: what the agent waits on, and deciding it.

A decision is written to the Approval's ``spec.decision`` (with ``decidedBy`` and ``message``), the way
``kubectl patch`` would; the operator delivers it to the agent and records the outcome in ``status``. The
write is a compare-and-set on the Approval's resourceVersion, checked against its state first, so an
approval is decided once: a second decision, an expired or withdrawn approval, or one hangar resolved by
policy gets a 409 and nothing changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import Field

from hangar.kube import ApiException, Kube, Obj
from hangar.models import Approval, ApprovalStatus
from hangar.models.approval import asked_times, sandbox_asked, waiting
from hangar.models.limits import bounded
from hangar.store import Database

from . import names
from . import schemas as S
from .auth import Caller
from .deps import Admin, DbDep, KubeDep, get_session
from .errors import api_error
from .fields import RequestBody
from .names import ApprovalId, SessionRef
from .routing import Route
from .views import stamp
from .watch_cache import ApiCache, CacheDep, SessionLook, session_look, turn_policy

router = APIRouter(prefix="/api/sessions", tags=["approvals"], route_class=Route)


MESSAGE_MAX = 8192


class DecisionBody(RequestBody):
    decision: Literal["allow", "deny", "allow_always"]
    message: Annotated[str, Field(max_length=MESSAGE_MAX), bounded(MESSAGE_MAX)] | None = Field(
        default=None, description=f"What the agent is told (at most {MESSAGE_MAX} bytes in UTF-8)"
    )


def approval_view(a: Obj) -> dict[str, Any]:
    """The view shows what it can of an Approval whose spec is partial, so its status is typed on its own."""
    spec: dict[str, Any] = a.get("spec") or {}
    stored: dict[str, Any] = a.get("status") or {}
    st = ApprovalStatus.model_validate(stored)
    requested, deadline = asked_times(st, a.get("metadata") or {})
    return {
        "id": a["metadata"]["name"],
        "session": spec.get("session"),
        "turn": spec.get("turn"),
        "tool": spec.get("tool"),
        "command": spec.get("command"),
        "args_hash": spec.get("argsHash"),
        "policy": spec.get("policy"),
        "tainted": bool(spec.get("tainted")),
        "why": spec.get("why", ""),
        "rule": spec.get("rule", ""),
        "governed": bool(spec.get("governed")),
        "phase": st.phase or "Pending",
        "decision": st.decision or spec.get("decision"),
        "by": st.by or spec.get("decidedBy"),
        "message": st.message if st.message is not None else spec.get("message"),
        "resolved_by": st.resolved_by,
        "requested_at": stamp(requested),
        # The sandbox's own word on when its agent asked (bounded by the operator): for measuring only.
        "sandbox_asked_at": stamp(sandbox_asked(st, a.get("metadata") or {})),
        "deadline": stamp(deadline),
        "decided_at": stamp(st.decided_at),
        "delivered_at": stamp(st.delivered_at),
        "reason": st.reason,
        # Tower (spec 002): the call filed with it, its receipt, and its answer (shadow: beside hangar's), as
        # Tower gave it (its time stamp is Tower's own).
        "tower": spec.get("tower"),
        "receipt": st.receipt,
        "tower_answer": stored.get("tower"),
    }


async def session_approvals(k: Kube, ref: str) -> list[Obj]:
    return await approvals_of(k, [ref])


async def approvals_of(k: Kube, sessions: Collection[str], cache: ApiCache | None = None) -> list[Obj]:
    """The approvals of these sessions (a session, or a job's attempts). With ``cache``: as this replica's
    watch-fed cache holds them when it can say (its own decisions applied at once), else listed."""
    names = sorted(set(sessions))
    if not names:
        return []
    items = cache.approvals_of(names) if cache is not None else None
    if items is None:
        selector = (
            f"hangar.dev/session={names[0]}"
            if len(names) == 1
            else f"hangar.dev/session in ({','.join(names)})"
        )
        items = await k.list("approvals", label_selector=selector)
    # Only the ones the operator requested (it writes their status); a hand-made Approval is not one.
    return [a for a in items if _requested(Approval.model_validate(a), names)]


def _requested(a: Approval, sessions: Collection[str]) -> bool:
    """The operator requested it: it wrote its status, or created it as a call that asks (pending from its
    create on: its status follows)."""
    return (bool(a.status.phase) or waiting(a)) and a.spec.session in sessions


async def waiting_on(
    k: Kube, sessions: Collection[str], cache: ApiCache | None, *, attempts: bool = False
) -> list[dict[str, Any]]:
    """The approvals these sessions wait on, oldest first, in the shape of ``status.pendingApprovals`` (with
    each one's session for a job's ``attempts``), read from the Approvals themselves as ``wait_for_turn``
    and ``GET …/approvals`` read them: the operator writes a session's list after the Approval, off the
    session's lock, so a view from it could miss an approval ``wait_for_turn`` has just reported. One
    decided but not applied yet waits on nobody."""
    items = [a for a in await approvals_of(k, sessions, cache) if not (a.get("spec") or {}).get("decision")]
    pending, _ = pending_and_recent(items, 0)
    keep = ("id", "session", "turn", "tool", "command")
    return [{key: (p[key] if key != "session" or attempts else None) for key in keep} for p in pending]


def pending_and_recent(items: list[Obj], limit: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The approvals waiting (oldest first) and the latest ``limit`` resolved ones (newest first)."""
    typed = [Approval.model_validate(a) for a in items]
    pending = [(ap, a) for ap, a in zip(typed, items, strict=True) if waiting(ap)]
    done = [(ap, a) for ap, a in zip(typed, items, strict=True) if not waiting(ap)]
    pending.sort(key=lambda x: stamp(asked_times(x[0].status, x[0].metadata)[0]) or "")
    done.sort(key=lambda x: stamp(x[0].status.decided_at) or "", reverse=True)
    return [approval_view(a) for _, a in pending], [approval_view(a) for _, a in done[:limit]]


def refusal(a: Obj) -> str | None:
    """Why this approval can't take a decision now, or None when it can."""
    ap = Approval.model_validate(a)
    name, spec, st = ap.name, ap.spec, ap.status
    phase = st.phase
    if waiting(ap) and not spec.decision:
        return None  # Pending, or created as a call that asks, its status not written yet
    if waiting(ap) or st.resolved_by == "person":
        decision = st.decision or spec.decision
        by = st.by or spec.decided_by or "someone"
        return f"approval {name} was already decided: {decision} by {by}; the first decision is kept"
    if phase == "Expired":
        return f"approval {name} expired: {st.message or 'denied, no decision in time'}"
    if phase == "Withdrawn":
        return f"approval {name} was withdrawn: {st.reason or 'the agent no longer waits on it'}"
    if st.resolved_by == "policy":
        return f"approval {name} was resolved by the policy ({spec.policy}): {st.decision}"
    if phase in ("Allowed", "Denied"):
        return f"approval {name} was already decided: {st.decision} by {st.resolved_by}"
    return f"approval {name} is not pending"


@router.get("/{ref}/approvals", response_model=S.SessionApprovals)
async def list_approvals(
    ref: SessionRef,
    _: Admin,
    k: KubeDep,
    c: CacheDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """The running turn's policy (else the session's), the approvals the agent waits on, and recent ones."""
    # Read from this replica's watch-fed caches (watch_cache.py) when they can answer, else the apiserver.

    async def session_and_policy() -> SessionLook:
        look = await session_look_of(k, c, ref)
        if look.current_turn:
            held, policy = c.turn(look.current_turn) if c is not None else (False, None)
            if not held:
                turn = await k.get("turns", look.current_turn)
                policy = turn_policy(turn) if turn else None
            if policy:
                return replace(look, policy=policy)
        return look

    cached = c.approvals_of([ref]) if c is not None else None
    if cached is not None:
        look = await session_and_policy()
        items = [a for a in cached if _requested(Approval.model_validate(a), [ref])]
    else:
        # The listing does not depend on the session's reads: both at once (a person or a client polls
        # this while an agent waits). A session that is not there is still a 404: gather raises its error.
        look, items = await asyncio.gather(session_and_policy(), session_approvals(k, ref))
    pending, recent = pending_and_recent(items, limit)
    return {
        "session": ref,
        "policy": look.policy or "auto",
        "tainted": look.tainted,
        "pending": pending,
        "recent": recent,
    }


async def session_look_of(k: Kube, c: ApiCache | None, ref: str) -> SessionLook:
    """The session as the cache holds it, else as read (404 when it is not there, or is being deleted). A
    session the cache does not hold is read: its watch event may not be here yet."""
    names.check_path("session", ref)
    look = c.session(ref) if c is not None else None
    if look is None:
        look = session_look(await get_session(k, ref))
    if look.deleted:
        raise HTTPException(404, f"no session {names.shown(ref)}")
    return look


async def get_approval(k: Kube, ref: str, approval: str) -> Obj:
    return await approval_in(k, [ref], approval, f"session {ref!r}")


async def approval_in(
    k: Kube, sessions: Collection[str], approval: str, where: str, cache: ApiCache | None = None
) -> Obj:
    """Approval ``approval`` if one of ``sessions`` requested it, else 404 naming ``where``. With ``cache``,
    as the cache holds it when it does (a decision's first look: its write is a compare-and-set)."""
    a = None
    if names.valid("approval", approval):
        a = cache.approval(approval) if cache is not None else None
        if a is None or not _requested(Approval.model_validate(a), sessions):
            a = await k.get("approvals", approval)
    if a is None or not _requested(Approval.model_validate(a), sessions):
        raise HTTPException(404, f"{where} has no approval {names.shown(approval)}")
    return a


@router.get("/{ref}/approvals/{approval}", response_model=S.ApprovalView)
async def read_approval(
    ref: SessionRef, approval: ApprovalId, _: Admin, k: KubeDep, c: CacheDep
) -> dict[str, Any]:
    await session_look_of(k, c, ref)
    return approval_view(await approval_in(k, [ref], approval, f"session {ref!r}", c))


@router.post("/{ref}/approvals/{approval}", response_model=S.ApprovalView)
async def decide_approval(
    ref: SessionRef,
    approval: ApprovalId,
    body: DecisionBody,
    who: Admin,
    k: KubeDep,
    d: DbDep,
    c: CacheDep = None,
) -> dict[str, Any]:
    """Decide a pending approval: allow, deny (the message reaches the agent) or allow_always (calls like
    this one for the rest of the turn). 409 when it can't take a decision any more; nothing changes then."""
    where = f"session {ref!r}"
    # Both reads at once (an agent waits on this decision); a session that is not there is said first.
    looks: tuple[SessionLook | BaseException, Obj | BaseException] = await asyncio.gather(
        session_look_of(k, c, ref), approval_in(k, [ref], approval, where, c), return_exceptions=True
    )
    for look in looks:
        if isinstance(look, BaseException):
            raise look
    found = looks[1]
    assert isinstance(found, dict)
    return await decide(k, d, who, [ref], approval, body, where, first=found, cache=c, session=ref)


async def decide(
    k: Kube,
    d: Database,
    who: Caller,
    sessions: Collection[str],
    approval: str,
    body: DecisionBody,
    where: str,
    first: Obj | None = None,
    cache: ApiCache | None = None,
    **audit: Any,
) -> dict[str, Any]:
    """Decide ``approval``, which must belong to one of ``sessions`` (404 naming ``where`` otherwise).
    ``first``: the Approval as the caller just read it or the cache held it (the first look; the write is a
    compare-and-set, and a look that lost it reads the apiserver). ``cache``: the first look without
    ``first``, and told of the write, so this replica's next listing shows the decision."""
    for attempt in range(10):
        # The first look may be the cache's; after a lost compare-and-set, the apiserver's.
        look = cache if attempt == 0 else None
        a, first = first or await approval_in(k, sessions, approval, where, look), None
        why = refusal(a)
        if why:
            raise HTTPException(409, why)
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": a["metadata"]["resourceVersion"]},
            "spec": {"decision": body.decision, "decidedBy": who.subject},
        }
        if body.message:
            patch["spec"]["message"] = body.message
        try:
            out = await k.patch("approvals", approval, patch)  # a merge patch at that version
        except ApiException as e:
            if e.status == 409:
                continue  # changed since we read it (or the cache's look was behind): read it again
            if e.status == 422:
                # The apiserver's decide-once rule: it left Pending in between.
                raise HTTPException(409, f"approval {approval} is no longer pending") from None
            if e.status == 404:
                raise HTTPException(404, f"{where} has no approval {names.shown(approval)}") from None
            raise api_error(e, f"approval {approval} can't be decided") from None
        if cache is not None:
            cache.wrote_approval(out)
        audit.setdefault("session", (a.get("spec") or {}).get("session"))
        await d.audit(who.subject, "approval.decide", approval, decision=body.decision, **audit)
        return approval_view(out)
    raise HTTPException(409, f"approval {approval} kept changing; try again")
