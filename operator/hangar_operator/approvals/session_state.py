"""What an Approval's session and metadata say about it: held for Tower, its sandbox gone, who decided it."""

from __future__ import annotations

from hangar.kube import Obj
from hangar.models import Approval, Session
from hangar.models import labels as L


def held_by(s_obj: Obj | None, name: str) -> bool:
    """Is this session suspended on approval ``name``, its call waiting for Tower (see ``Approvals.held``)?"""
    if s_obj is None:
        return False
    sus = Session.model_validate(s_obj).status.suspended
    return sus is not None and sus.approval == name and sus.decision is None


def gone_reason(s_obj: Obj | None, ap: Approval) -> str | None:
    """Why a pending approval can no longer be answered (its sandbox is gone), or None."""
    if s_obj is None:
        return "the session is gone"
    st = Session.model_validate(s_obj).status
    if st.suspended is not None and st.suspended.approval == ap.name and st.suspended.decision is None:
        return None  # the session gave its sandbox back while Tower decides: the call still waits
    if st.sandbox.run != ap.labels.get(L.RUN):
        return "the sandbox that asked is gone"
    return None  # a turn that ended withdrew its approvals when its turn_ended was applied


def field_manager(obj: Obj) -> str | None:
    """Who set spec.decision when the writer didn't say (kubectl patch): the field manager."""
    for entry in obj["metadata"].get("managedFields") or []:
        fields = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:decision" in fields and entry.get("manager"):
            return f"{entry['manager']} (field manager)"
    return None
