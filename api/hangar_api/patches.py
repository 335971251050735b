"""``GET /api/sessions/{ref}/patch`` and ``GET /api/jobs/{job_id}/patch``: the work as one patch against the
base branch, which ``git apply`` takes (``text/x-diff``; ``X-Hangar-Base`` / ``X-Hangar-Head`` name the
commits). A job's is its delivered attempt's (exactly what was pushed), else its best-ranked attempt's, else
its first attempt's that has one. Both read :func:`hangar.work.latest_patch`, as MCP's patch resource does.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import PlainTextResponse

from hangar.models import Job
from hangar.store import Database
from hangar.work import Patch, latest_patch

from .deps import Admin, DbDep, KubeDep, get_session
from .job_attempts import JobsCaller, attempt_sessions, get_job
from .names import JobId, SessionRef
from .routing import Route

router = APIRouter(tags=["patches"], route_class=Route)


class DiffResponse(PlainTextResponse):
    media_type = "text/x-diff"


# The patch is text, not JSON: declared so (a generated client reads it as a string).
PATCH_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {"description": "The work as one patch", "content": {"text/x-diff": {"schema": {"type": "string"}}}}
}


async def session_patch(db: Database, session: str) -> Patch | None:
    """The latest patch recorded for ``session`` (a session of the api's home namespace)."""
    return await latest_patch(db, f"session/{session}", session)


def answer(p: Patch) -> DiffResponse:
    headers = {"X-Hangar-Session": p.session, "X-Hangar-Source": p.source}
    if p.base:
        headers["X-Hangar-Base"] = p.base
    if p.head:
        headers["X-Hangar-Head"] = p.head
    if p.truncated:
        headers["X-Hangar-Truncated"] = "true"
    return DiffResponse(p.patch, headers=headers)


@router.get("/api/sessions/{ref}/patch", response_class=DiffResponse, responses=PATCH_ANSWER)
async def read_session_patch(ref: SessionRef, _: Admin, k: KubeDep, d: DbDep) -> DiffResponse:
    await get_session(k, ref)
    p = await session_patch(d, ref)
    if p is None:
        raise HTTPException(
            404,
            f"session {ref!r} has no patch yet: its work is taken when it is verified or delivered (a job's "
            "attempt in an Environment with a repository)",
        )
    return answer(p)


@router.get("/api/jobs/{job_id}/patch", response_class=DiffResponse, responses=PATCH_ANSWER)
async def read_job_patch(job_id: JobId, who: JobsCaller, k: KubeDep, d: DbDep) -> DiffResponse:
    j = await get_job(k, who, job_id)
    st = Job.model_validate(j).status
    order: list[int] = []
    if st.delivery is not None:
        order.append(st.delivery.attempt)
    order += [a.index for a in sorted(st.attempts, key=lambda a: (a.rank is None, a.rank or 0, a.index))]
    names = {
        int(s["metadata"]["labels"].get("hangar.dev/attempt", 0)): s["metadata"]["name"]
        for s in await attempt_sessions(k, j)
    }
    for index in dict.fromkeys(order):
        if index in names and (p := await session_patch(d, names[index])) is not None:
            return answer(p)
    raise HTTPException(
        404, f"job {job_id!r} has no patch yet: its work is taken when an attempt is verified"
    )
