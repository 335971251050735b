"""Status writes: a merge patch, plus the ``Ready`` condition and ``observedGeneration`` it implies.

Every controller writes status through :func:`patch_status`, so each kind's conditions follow from its
status in one place (:func:`readiness`) and ``lastTransitionTime`` moves only when ``Ready`` flips.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hangar.kube import Kube, Obj, merge_patch, status_of
from hangar.models.base import Condition
from hangar.models.conditions import ready_patch

_CAMEL = {"needs_input": "NeedsInput", "awaiting_approval": "AwaitingApproval"}


def merged(obj: Obj, patch: dict[str, Any]) -> Obj:
    """``obj`` with a JSON merge patch of its status applied (what the apiserver will hold): neither ``obj``
    nor ``patch`` is changed."""
    return {**obj, "status": merge_patch(status_of(obj), patch)}


def readiness(plural: str, obj: Obj) -> tuple[bool, str, str]:
    """Ready, and the reason and message: why the resource waits or failed, or what it is doing."""
    st = status_of(obj)
    if plural == "sessions":
        phase = st.get("phase") or "Pending"
        if phase in ("Idle", "Running"):
            if not (st.get("sandbox") or {}).get("pod"):  # released (idle, a lost or late sandbox)
                why = st.get("message") or "the sandbox was released"
                return False, "SandboxReleased", f"{why}; the next message starts a sandbox"
            return True, "SandboxConnected", st.get("message") or "the sandbox is connected"
        if phase == "Starting":
            return False, "SandboxStarting", st.get("message") or "starting a sandbox"
        if phase == "Pending":
            return False, st.get("reason") or "Pending", st.get("message") or "waiting to start a sandbox"
        if phase == "Stopped":
            return False, "Stopped", "the session was stopped (spec.stopped)"
        return False, st.get("reason") or phase, st.get("message") or phase.lower()
    if plural == "turns":
        phase = st.get("phase") or "Queued"
        return phase == "Completed", phase, st.get("reason") or st.get("summary", "")[:200] or phase.lower()
    if plural == "approvals":
        phase = st.get("phase") or "Pending"
        if phase == "Pending":
            return (
                False,
                "Pending",
                f"waiting for a decision until {st.get('deadline') or 'a person answers'}",
            )
        return True, phase, st.get("message") or st.get("reason") or phase.lower()
    if plural == "jobs":
        state = st.get("state") or "queued"
        reason = _CAMEL.get(state, state.capitalize())
        return state in ("done", "delivered"), st.get("reason") or reason, st.get("message") or state
    return True, "Valid", "sessions may use this environment"


def with_conditions(plural: str, obj: Obj, patch: dict[str, Any]) -> dict[str, Any]:
    """``patch`` plus the Ready condition and observedGeneration, where they change. Called on every status
    write, so it parses only the conditions (a Turn with 200 steers is not validated again here)."""
    after = merged(obj, patch)
    st = after["status"]
    conditions = [Condition.model_validate(c) for c in st.get("conditions") or []]
    out = dict(patch)
    ready, reason, message = readiness(plural, after)
    cond = ready_patch(conditions, ready, reason, message, datetime.now(UTC))
    if cond:
        out.update(cond)
    gen = (obj.get("metadata") or {}).get("generation")
    if isinstance(gen, int) and st.get("observedGeneration") != gen:
        out["observedGeneration"] = gen
    return out


async def patch_status(
    kube: Kube, plural: str, obj: Obj, patch: dict[str, Any], resource_version: str | None = None
) -> Obj:
    """Write ``patch`` (with conditions) to ``obj``'s status; returns ``obj`` as it now is. A patch that
    changes nothing is not sent (unless it is a compare-and-set, whose point is the check)."""
    full = with_conditions(plural, obj, patch)
    if resource_version is None and merged(obj, full)["status"] == status_of(obj):
        return obj
    name = obj["metadata"]["name"]
    out = await kube.patch_status(plural, name, full, resource_version=resource_version)
    return out if isinstance(out, dict) and out.get("metadata") else merged(obj, full)
