"""What the REST API answers: resources turned into the snake_case shapes clients read (the resources
themselves are camelCase, like every Kubernetes API)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hangar.kube import Obj
from hangar.models import Job, Session, Turn
from hangar.models.base import iso


def stamp(when: datetime | None) -> str | None:
    """A time stamp read from a typed status, in the form hangar writes it (``iso``: UTC, milliseconds, Z),
    so a view shows and sorts it as it is stored."""
    return iso(when) if when is not None else None


def turn_view(t: Obj) -> dict[str, Any]:
    turn = Turn.model_validate(t)
    st = turn.status
    out: dict[str, Any] = {
        "name": turn.name,
        "index": turn.spec.index,
        "message": turn.spec.message,
        "by": turn.spec.by,
        "phase": st.phase if st else "Queued",
        "outcome": st.outcome if st else None,
        "exit_status": st.exit_status if st else None,
        "summary": st.summary if st else "",
        "reason": st.reason if st else "",
        "result": st.result if st else None,
        "question": st.question if st else None,
        "policy": st.policy if st else None,
        "usage": st.usage.model_dump(mode="json", by_alias=False) if st else None,
        "cost_usd": st.cost_usd if st else None,
        "artifacts": [a.model_dump(mode="json", by_alias=False) for a in st.artifacts] if st else [],
        "taint": st.taint.tainted if st else False,
        "started_at": st.started_at.isoformat() if st and st.started_at else None,
        "finished_at": st.finished_at.isoformat() if st and st.finished_at else None,
        "steers": [steer_view(t, req) for req in t["spec"].get("steers") or []],
        "interrupts": [interrupt_view(t, req) for req in t["spec"].get("interrupts") or []],
        "class": turn.spec.klass,
        "classified_by": turn.spec.classified_by,
        "classified_at": turn.spec.classified_at.isoformat() if turn.spec.classified_at else None,
        "session": turn.spec.session,
    }
    if turn.spec.from_steer:
        out["from_steer"] = turn.spec.from_steer
    return out


def item_state(turn: Obj, kind: str, item_id: str) -> dict[str, Any]:
    states = (turn.get("status") or {}).get(kind) or []
    return dict(next((x for x in states if x.get("id") == item_id), {}))


def steer_view(turn: Obj, req: dict[str, Any]) -> dict[str, Any]:
    """A steer: what was asked (spec) with what became of it (status). The class is the person's word, so
    it is read from spec; the operator mirrors it into status when it records the classification."""
    st = item_state(turn, "steers", req["id"])
    return {
        "id": req["id"],
        "turn": turn["metadata"]["name"],
        "message": req["message"],
        "by": req.get("by", ""),
        "status": st.get("status", "sending"),
        "reason": st.get("reason", ""),
        "withdraw": st.get("withdraw") or ("requested" if req.get("withdrawn") else None),
        "class": req.get("class", "unclassified"),
        "classified_by": req.get("classifiedBy"),
        "classified_at": req.get("classifiedAt"),
        "next_turn": st.get("nextTurn"),
        "written_at": st.get("writtenAt"),
        "at": st.get("at"),
    }


def interrupt_view(turn: Obj, req: dict[str, Any]) -> dict[str, Any]:
    st = item_state(turn, "interrupts", req["id"])
    return {
        "id": req["id"],
        "turn": turn["metadata"]["name"],
        "message": req.get("message"),
        "by": req.get("by", ""),
        "status": st.get("status", "requested"),
        "reason": st.get("reason", ""),
        "message_status": st.get("messageStatus"),
        "next_turn": st.get("nextTurn"),
        "class": req.get("class", "unclassified"),
        "classified_by": req.get("classifiedBy"),
        "classified_at": req.get("classifiedAt"),
        "at": st.get("at"),
    }


def session_view(
    s: Obj, turns: list[Obj] | None = None, pending: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    sess = Session.model_validate(s)
    st = sess.status
    out: dict[str, Any] = {
        "name": sess.name,
        "harness": sess.spec.harness,
        "environment": sess.spec.environment,
        "model": sess.spec.model,
        "approvals": sess.spec.approvals,
        "created_at": s["metadata"].get("creationTimestamp"),
        "phase": st.phase if st else "Pending",
        "reason": st.reason if st else "",
        "message": st.message if st else "",
        "policy": st.policy if st else None,
        "sandbox": st.sandbox.model_dump(mode="json", by_alias=False) if st else None,
        "conversation": st.conversation if st else None,
        "fork_of": sess.spec.fork_of,
        "forked_from": st.forked_from.model_dump(mode="json", by_alias=False)
        if st and st.forked_from
        else None,
        "current_turn": st.current_turn if st else None,
        "taint": st.taint.model_dump(mode="json", by_alias=False) if st else {"tainted": False},
        "counters": st.counters.model_dump(mode="json", by_alias=False) if st else {},
        "pending_approvals": pending
        if pending is not None
        else [p.model_dump(mode="json", by_alias=False) for p in st.pending_approvals]
        if st
        else [],
        "checkpoints": [c.model_dump(mode="json", by_alias=False) for c in st.checkpoints] if st else [],
        # Governance (spec 002): the approval a suspended session waits on, and a resume on its way.
        "suspended": st.suspended.model_dump(mode="json", by_alias=False) if st and st.suspended else None,
        "resuming": st.resuming.model_dump(mode="json", by_alias=False) if st and st.resuming else None,
    }
    if turns is not None:
        out["turns"] = [turn_view(t) for t in sorted(turns, key=lambda t: int(t["spec"].get("index", 0)))]
    return out


def job_view(
    j: Obj, turns: list[Obj] | None = None, pending: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Job: what was asked (spec) and the operator's summary of its attempts (status). ``turns`` are the
    job's turns in the job's order (``n`` is the 1-based index the class route takes)."""
    job = Job.model_validate(j)
    spec, st = job.spec, job.status
    out: dict[str, Any] = {
        "id": job.name,
        "name": job.name,
        "submitter": spec.submitter,
        "prompt": spec.prompt,
        "environment": spec.environment,
        "repository": spec.repository,
        "base_branch": spec.base_branch,
        "harness": spec.harness,
        "model": spec.model,
        "approvals": spec.approvals,
        "attempts_requested": spec.attempts,
        "deliver": spec.deliver,
        "cancelled": spec.cancelled,
        "created_at": j["metadata"].get("creationTimestamp"),
        "state": st.state if st else "queued",
        "reason": st.reason if st else "",
        "message": st.message if st else "",
        "policy": st.policy if st else None,
        "question": st.question if st else None,
        "awaiting_approval": st.awaiting_approval if st else False,
        "pending_approvals": pending
        if pending is not None
        else [p.model_dump(mode="json", by_alias=False) for p in st.pending_approvals]
        if st
        else [],
        "attempts": [a.model_dump(mode="json", by_alias=False) for a in st.attempts] if st else [],
        "taint": _job_taint(job),
        "cost_usd": st.cost_usd if st else 0.0,
        "branch": (st.branch if st else None) or spec.branch,
        "pr_url": st.pr_url if st else None,
        "head_commit": st.head_commit if st else None,
        "verification": st.verification.model_dump(mode="json", by_alias=False)
        if st and st.verification
        else None,
        "delivery": st.delivery.model_dump(mode="json", by_alias=False) if st and st.delivery else None,
        "release": spec.release.model_dump(mode="json", by_alias=False) if spec.release else None,
        "timeline": [e.dump() for e in st.timeline] if st else [],
        "started_at": st.started_at.isoformat() if st and st.started_at else None,
        "finished_at": st.finished_at.isoformat() if st and st.finished_at else None,
    }
    if turns is not None:
        out["turns"] = [{"n": n, **turn_view(t)} for n, t in enumerate(turns, 1)]
    else:
        out["turn_count"] = len(st.turns) if st else 0
    return out


def job_pr(j: Obj) -> dict[str, Any] | None:
    """A delivered job's pull request (or pushed branch): its URL, number, branch and head commit."""
    st = Job.model_validate(j).status
    if not (st.pr_url or st.head_commit):
        return None
    number = st.delivery.pr_number if st.delivery else None
    return {"url": st.pr_url, "number": number, "branch": st.branch, "head_commit": st.head_commit}


def _job_taint(job: Job) -> dict[str, Any]:
    """The job's taint as the operator records it; a job created tainted is tainted from the start."""
    taint = job.status.taint.model_dump(mode="json", by_alias=False) if job.status else {}
    taint.setdefault("reasons", [])
    taint.setdefault("since", None)
    taint["tainted"] = bool(taint.get("tainted")) or job.spec.tainted
    if job.spec.tainted and not taint["reasons"]:
        taint["reasons"] = ["created tainted"]
    return taint
