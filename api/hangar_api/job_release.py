"""``POST /api/jobs/{job_id}/approve`` and ``/reject``: release a job that waits for it (its repository's
policy says jobs need release) or reject it. The rule and the refusal texts are ``release_rules.py``'s; the
decision is written once to ``spec.release`` (a CEL rule keeps it from changing), and the operator starts the
attempts (approved) or cancels the job (rejected).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import Field

from hangar.kube import Kube, Obj
from hangar.models import Job
from hangar.store import Database

from . import release_rules as R
from . import schemas as S
from .auth import Caller, caller
from .deps import DbDep, KubeDep
from .fields import RequestBody
from .job_attempts import approvers_of, no_job, patch_job_guarded
from .names import JobId
from .routing import Route
from .views import job_view

router = APIRouter(prefix="/api/jobs", tags=["jobs"], route_class=Route)


class ReleaseBody(RequestBody):
    reason: str = Field(default="", max_length=2000)


async def decide(
    k: Kube, d: Database, who: Caller, job_id: str, decision: R.Decision, reason: str
) -> dict[str, Any]:
    """Release or reject ``job_id`` as ``who`` (the caller as its token says: never widened). Raises
    HTTPException with the shared refusal texts; returns the job."""

    async def change() -> tuple[Obj, Obj]:
        obj = await k.get("jobs", job_id)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            raise no_job(job_id)
        job = Job.model_validate(obj)
        required, approvers = await approvers_of(k, job)
        if not R.may_see(who, job.spec.submitter, approvers):
            raise no_job(job_id)
        refused = R.refusal(who, job_id, job.spec.submitter, approvers)
        if refused is not None:
            raise HTTPException(403, refused)
        if job.spec.release is not None:
            done = job.spec.release
            raise HTTPException(409, R.ALREADY.format(job=job_id, decision=done.decision, by=done.by))
        if not required:
            raise HTTPException(409, R.NO_POLICY.format(job=job_id))
        if job.status.state != "awaiting_approval" or job.status.attempts:
            raise HTTPException(
                409, R.NOT_AWAITING.format(job=job_id, state=job.status.state, verb=R.VERBS[decision])
            )
        release = {
            "decision": R.DECIDED[decision],
            "by": who.subject,
            "at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            **({"reason": reason} if reason else {}),
        }
        return obj, {"spec": {"release": release}}

    obj, updated = await patch_job_guarded(
        k, job_id, change, f"job {job_id!r} can't be {R.DECIDED[decision]}"
    )
    submitter = Job.model_validate(obj).spec.submitter
    await d.audit(who.subject, f"job.{decision}", job_id, reason=reason or None, submitter=submitter)
    return job_view(updated)


@router.post("/{job_id}/approve", response_model=S.JobView)
async def approve_job(
    job_id: JobId, k: KubeDep, d: DbDep, body: ReleaseBody | None = None, who: Caller = Depends(caller)
) -> dict[str, Any]:
    """Release a job that waits in ``awaiting_approval`` for its repository's policy: its attempts start."""
    return await decide(k, d, who, job_id, "approve", body.reason if body else "")


@router.post("/{job_id}/reject", response_model=S.JobView)
async def reject_job(
    job_id: JobId, k: KubeDep, d: DbDep, body: ReleaseBody | None = None, who: Caller = Depends(caller)
) -> dict[str, Any]:
    """Reject it: the job is cancelled without running."""
    return await decide(k, d, who, job_id, "reject", body.reason if body else "")
