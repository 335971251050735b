"""``hangar://inbox``: what needs the caller, as one JSON document, scoped to what its token may see.

- ``approval``: a tool call waiting for a person (answer with ``answer_approval`` or ``wait_for_turn``);
- ``question``: an agent that ended its turn on a question (a session's latest turn ``NeedsInput``, a job in
  ``needs_input``; answer with ``send_to_session`` / ``follow_up_job`` or ``wait_for_turn``);
- ``review``: a job that is done and delivered a pull request;
- ``failed_job``: a job that failed.

``admin`` and ``mcp`` tokens see every session and job; a ``jobs`` token only the jobs it submitted (and the
approvals of their attempts). Oldest first. Subscribing to it (``subscriptions.py``) is notified when any
session, turn, approval or job changes: read it again.
"""

from __future__ import annotations

from typing import Any

from hangar.kube import Obj
from hangar.models import Approval, Job, Turn
from hangar.models.approval import waiting

from .. import approvals as ap
from ..auth import Caller, owns
from ..views import stamp
from .auth import may_use_sessions
from .common import Hub

URI = "hangar://inbox"
JOB_LABEL = "hangar.dev/job"


def pull_request(delivery: Any) -> str | None:
    """The PR a job delivered, wherever its delivery record keeps the link."""
    if not isinstance(delivery, dict):
        return None
    for key in ("pr_url", "prUrl", "pull_request", "pr"):
        value = delivery.get(key)
        if isinstance(value, dict):
            value = value.get("url") or value.get("html_url")
        if isinstance(value, str) and value:
            return value
    url = delivery.get("url")
    return url if isinstance(url, str) and "/pull" in url else None


def _index(turn: Obj) -> int:
    return int((turn.get("spec") or {}).get("index", 0))


async def read(hub: Hub, who: Caller) -> dict[str, Any]:
    k = hub.kube
    jobs = [
        j
        for j in await k.list("jobs")
        if not j["metadata"].get("deletionTimestamp") and owns(who, str(j["spec"].get("submitter", "")))
    ]
    mine = {j["metadata"]["name"] for j in jobs}
    sessions = [s for s in await k.list("sessions") if not s["metadata"].get("deletionTimestamp")]
    job_of = {s["metadata"]["name"]: (s["metadata"].get("labels") or {}).get(JOB_LABEL) for s in sessions}
    items: list[dict[str, Any]] = []

    for a in await k.list("approvals"):
        approval = Approval.model_validate(a)
        # Only the ones the operator requested, still waiting for a decision: as REST lists them, from the
        # Approval's create (its status, Pending, follows one write later).
        if not waiting(approval) or approval.spec.decision:
            continue
        session = approval.spec.session or ""
        job = job_of.get(session)
        if job not in mine and not (job is None and may_use_sessions(who)):
            continue
        view = ap.approval_view(a)
        items.append(
            {"kind": "approval", "since": view["requested_at"], "ref": job or session, "approval": view}
        )

    if may_use_sessions(who):
        latest: dict[str, Obj] = {}
        for t in await k.list("turns"):
            name = str((t.get("spec") or {}).get("session") or "")
            if (
                name in job_of
                and job_of[name] is None
                and (name not in latest or _index(t) > _index(latest[name]))
            ):
                latest[name] = t
        for name, t in latest.items():
            tst = Turn.model_validate(t).status
            if tst.phase == "NeedsInput":
                question = tst.question or "(the agent asked without a question)"
                since = stamp(tst.finished_at) or t["metadata"].get("creationTimestamp")
                items.append(
                    {
                        "kind": "question",
                        "since": since,
                        "ref": name,
                        "turn": t["metadata"]["name"],
                        "question": question,
                    }
                )

    for j in jobs:
        jst, name = Job.model_validate(j).status, j["metadata"]["name"]
        since = stamp(jst.finished_at) or j["metadata"].get("creationTimestamp")
        state = jst.state
        if state == "needs_input" and jst.question:
            items.append({"kind": "question", "since": since, "ref": name, "question": jst.question})
        elif state == "failed":
            items.append(
                {
                    "kind": "failed_job",
                    "since": since,
                    "ref": name,
                    "reason": jst.reason,
                    "message": jst.message,
                }
            )
        elif state == "done" and (pr := pull_request(jst.delivery.dump() if jst.delivery else None)):
            items.append({"kind": "review", "since": since, "ref": name, "pull_request": pr})

    items.sort(key=lambda i: str(i.get("since") or ""))
    counts: dict[str, int] = {}
    for i in items:
        counts[i["kind"]] = counts.get(i["kind"], 0) + 1
    return {"items": items, "counts": counts}
