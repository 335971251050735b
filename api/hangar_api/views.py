"""What the REST API answers: resources turned into the snake_case shapes clients read."""

from __future__ import annotations

from typing import Any

from hangar.kube import Obj
from hangar.models import Session, Turn


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
        "usage": st.usage.model_dump() if st else None,
        "cost_usd": st.cost_usd if st else None,
        "artifacts": [a.model_dump() for a in st.artifacts] if st else [],
        "taint": st.taint.tainted if st else False,
        "started_at": st.started_at.isoformat() if st and st.started_at else None,
        "finished_at": st.finished_at.isoformat() if st and st.finished_at else None,
        "steers": _steers(turn),
        "interrupts": [
            {"id": i.id, "message": i.message, "by": i.by, "class": i.klass} for i in turn.spec.interrupts
        ],
    }
    if turn.spec.from_steer:
        out["from_steer"] = turn.spec.from_steer
    return out


def _steers(turn: Turn) -> list[dict[str, Any]]:
    states = {s.id: s for s in (turn.status.steers if turn.status else [])}
    out = []
    for s in turn.spec.steers:
        st = states.get(s.id)
        out.append(
            {
                "id": s.id,
                "message": s.message,
                "by": s.by,
                "status": "cancelled"
                if s.withdrawn and (st is None or st.status == "sending")
                else (st.status if st else "sending"),
                "reason": st.reason if st else "",
                "class": st.klass if st and st.klass != "unclassified" else s.klass,
                "classified_by": st.classified_by if st else None,
                "classified_at": st.classified_at.isoformat() if st and st.classified_at else None,
                "next_turn": st.next_turn if st else None,
            }
        )
    return out


def session_view(s: Obj, turns: list[Obj] | None = None) -> dict[str, Any]:
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
        "sandbox": st.sandbox.model_dump(mode="json") if st else None,
        "conversation": st.conversation if st else None,
        "current_turn": st.current_turn if st else None,
        "taint": st.taint.model_dump(mode="json") if st else {"tainted": False},
        "counters": st.counters.model_dump() if st else {},
        "pending_approvals": [p.model_dump() for p in st.pending_approvals] if st else [],
        "checkpoints": [c.model_dump(mode="json") for c in st.checkpoints] if st else [],
    }
    if turns is not None:
        out["turns"] = [turn_view(t) for t in sorted(turns, key=lambda t: int(t["spec"].get("index", 0)))]
    return out
