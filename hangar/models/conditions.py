"""Kubernetes-style conditions: one ``Ready`` condition per resource, with the reason it waits or failed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .base import Condition, iso

READY = "Ready"


def set_condition(
    conditions: list[Condition], type_: str, ready: bool, reason: str, message: str, now: datetime
) -> list[Condition]:
    """``conditions`` with ``type_`` set; ``lastTransitionTime`` moves only when the status flips."""
    status = "True" if ready else "False"
    out = [c for c in conditions if c.type != type_]
    old = next((c for c in conditions if c.type == type_), None)
    since = old.last_transition_time if old is not None and old.status == status else now
    out.append(
        Condition(
            type=type_, status=status, reason=reason, message=message[:1000], last_transition_time=since
        )
    )
    return sorted(out, key=lambda c: c.type)


def ready_patch(
    conditions: list[Condition], ready: bool, reason: str, message: str, now: datetime
) -> dict[str, Any] | None:
    """The ``conditions`` status field to write, or None when ``Ready`` already says this."""
    old = next((c for c in conditions if c.type == READY), None)
    status = "True" if ready else "False"
    if old is not None and (old.status, old.reason, old.message) == (status, reason, message[:1000]):
        return None
    new = set_condition(conditions, READY, ready, reason, message, now)
    return {"conditions": [c.dump() for c in new]}


__all__ = ["READY", "iso", "ready_patch", "set_condition"]
