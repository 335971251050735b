"""The approvals of a job's attempts under ``/api/jobs/{job_id}/approvals``: list, read, decide. The same
functions as the session routes (``approvals.py``), over every attempt's sessions; an approval that is not
one of the job's is a 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from hangar.models import Job, Session

from . import approvals as ap
from . import schemas as S
from .deps import DbDep, KubeDep
from .job_attempts import JobsCaller, attempt_sessions, get_job, job_state
from .names import ApprovalId, JobId
from .routing import Route
from .views import job_view
from .watch_cache import CacheDep

router = APIRouter(prefix="/api/jobs", tags=["jobs"], route_class=Route)


@router.get("/{job_id}/approvals", response_model=S.JobApprovals)
async def list_approvals(
    job_id: JobId,
    who: JobsCaller,
    k: KubeDep,
    c: CacheDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    """The job's policy, the approvals its attempts wait on, and recent ones, across all attempts."""
    j = await get_job(k, who, job_id)
    sessions = await attempt_sessions(k, j)
    st = Job.model_validate(j).status
    attempts = []
    for s in sessions:
        sst = Session.model_validate(s).status
        attempts.append(
            {"session": s["metadata"]["name"], "policy": sst.policy, "tainted": sst.taint.tainted}
        )
    policy = st.policy or next((a["policy"] for a in attempts if a["policy"]), None)
    # The approvals from this replica's watch-fed cache when it can say (watch_cache.py), else listed.
    items = await ap.approvals_of(k, [s["metadata"]["name"] for s in sessions], c)
    pending, recent = ap.pending_and_recent(items, limit)
    return {
        "job": job_id,
        "policy": policy or j["spec"].get("approvals"),
        "tainted": job_view(j)["taint"]["tainted"],
        "state": job_state(j),
        "attempts": attempts,
        "pending": pending,
        "recent": recent,
    }


@router.get("/{job_id}/approvals/{approval}", response_model=S.ApprovalView)
async def read_approval(
    job_id: JobId, approval: ApprovalId, who: JobsCaller, k: KubeDep, c: CacheDep
) -> dict[str, Any]:
    j = await get_job(k, who, job_id)
    names = [s["metadata"]["name"] for s in await attempt_sessions(k, j)]
    return ap.approval_view(await ap.approval_in(k, names, approval, f"job {job_id!r}", c))


@router.post("/{job_id}/approvals/{approval}", response_model=S.ApprovalView)
async def decide_approval(
    job_id: JobId,
    approval: ApprovalId,
    body: ap.DecisionBody,
    who: JobsCaller,
    k: KubeDep,
    d: DbDep,
    c: CacheDep = None,
) -> dict[str, Any]:
    """Decide an approval one of the job's attempts waits on (404 if it is not the job's)."""
    # The first look is the cache's (the write is a compare-and-set: a stale look reads the apiserver), and
    # the cache is told of the decision, so this replica's next listing shows it.
    j = await get_job(k, who, job_id)
    names = [s["metadata"]["name"] for s in await attempt_sessions(k, j)]
    where = f"job {job_id!r}"
    first = await ap.approval_in(k, names, approval, where, c)
    return await ap.decide(k, d, who, names, approval, body, where, first=first, cache=c, job=job_id)
