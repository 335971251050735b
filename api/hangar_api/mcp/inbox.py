"""``hangar://inbox``: what needs the caller, as one JSON document, scoped to what its token may see.

- ``approval``: a tool call waiting for a person (answer with ``answer_approval`` or ``wait_for_turn``);
- ``question``: an agent that ended its turn on a question (a session's latest turn ``NeedsInput``, a job in
  ``needs_input``; answer with ``send_to_session`` / ``follow_up_job`` or ``wait_for_turn``);
- ``review``: a job that is done and delivered a pull request;
- ``failed_job``: a job that failed.

``admin`` and ``mcp`` tokens see every session and job; a ``jobs`` token only the jobs it submitted (and the
approvals of their attempts). Oldest first. Subscribing to it (``subscriptions.py``) is notified when any
session, turn, approval or job changes: read it again.

Read from this replica's watch-fed caches (``watch_cache.py``) where they can answer, each resource listed
from the apiserver where its cache can't (not listed yet, its watch broken): a subscriber reads the inbox
again on every change, and four listings of every session, turn, approval and job per read grew with the
installation. Either way the objects are projected alike (``inbox_looks.py``, ``session_look``,
``approval_kept``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hangar.kube import Kube, Obj
from hangar.models import Approval
from hangar.models.approval import waiting

from .. import approvals as ap
from ..auth import Caller, owns
from ..inbox_looks import TurnLook, job_look, turn_look
from ..watch_cache import ApiCache, api_cache_of, approval_kept, session_look
from .auth import acting, may_use_sessions
from .common import Hub

URI = "hangar://inbox"
T = TypeVar("T")


async def _all(k: Kube, cache: ApiCache, plural: str, project: Callable[[Obj], T]) -> dict[str, T]:
    """Every ``plural`` by name as ``project`` sees it: from the cache when it can say, else listed."""
    held = cache.all_of(plural)
    if held is not None:
        return held
    return {str(o["metadata"]["name"]): project(o) for o in await k.list(plural)}


def _order(item: dict[str, Any]) -> tuple[str, ...]:
    """Oldest first; at the same time by what it is about, so a cache's order and a listing's agree."""
    ids = item.get("approval", {}).get("id") or item.get("turn") or ""
    since = str(item.get("since") or "")
    if len(since) == 20 and since.endswith("Z"):  # a creationTimestamp (…:SSZ) beside hangar's …:SS.000Z
        since = since[:-1] + ".000Z"
    return (since, item["ref"], item["kind"], str(ids))


async def read(hub: Hub, who: Caller) -> dict[str, Any]:
    k, cache = hub.kube, api_cache_of(hub.state)
    cache.want("jobs")
    all_jobs = await _all(k, cache, "jobs", job_look)
    # An mcp token reaches every job through the tools (``acting``): the inbox shows it every job too.
    jobs = [j for j in all_jobs.values() if not j.deleted and owns(acting(who), j.submitter)]
    mine = {j.name for j in jobs}
    sessions = await _all(k, cache, "sessions", session_look)
    job_of = {name: s.job for name, s in sessions.items() if not s.deleted}
    items: list[dict[str, Any]] = []

    approvals = await _all(k, cache, "approvals", approval_kept)
    for a in approvals.values():
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
        latest: dict[str, TurnLook] = {}
        turns = await _all(k, cache, "turns", turn_look)
        for t in turns.values():
            name = t.session
            if (
                name in job_of
                and job_of[name] is None
                and (name not in latest or t.index > latest[name].index)
            ):
                latest[name] = t
        for name, t in latest.items():
            if t.needs_input:
                question = t.question or "(the agent asked without a question)"
                items.append(
                    {"kind": "question", "since": t.since, "ref": name, "turn": t.name, "question": question}
                )

    for j in jobs:
        if j.state == "needs_input" and j.question:
            items.append({"kind": "question", "since": j.since, "ref": j.name, "question": j.question})
        elif j.state == "failed":
            items.append(
                {
                    "kind": "failed_job",
                    "since": j.since,
                    "ref": j.name,
                    "reason": j.reason,
                    "message": j.message,
                }
            )
        elif j.state == "done" and j.pull_request:
            items.append({"kind": "review", "since": j.since, "ref": j.name, "pull_request": j.pull_request})

    items.sort(key=_order)
    counts: dict[str, int] = {}
    for i in items:
        counts[i["kind"]] = counts.get(i["kind"], 0) + 1
    return {"items": items, "counts": counts}
