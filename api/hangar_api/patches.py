"""``GET /api/sessions/{ref}/patch`` and ``GET /api/jobs/{job_id}/patch``: the work as one patch against the
base branch, which ``git apply`` takes (``text/x-diff``; ``X-Hangar-Base`` / ``X-Hangar-Head`` name the
commits). A job's is its delivered attempt's (exactly what was pushed), else its best-ranked attempt's, else
its first attempt's that has one. A plain session's is its work as its last finished turn left it (its
driver takes it after every turn, committed or not). Both read :func:`hangar.work.latest_patch`.

MCP's ``hangar://sessions/<name>/patch`` calls :func:`session_work_patch` (the same answer and refusals as
the REST route, as an HTTPException to turn into the tool's error).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import PlainTextResponse

from hangar.kube import Kube
from hangar.models import Job
from hangar.models.environment import EnvironmentSpec
from hangar.store import Database
from hangar.work import Patch, latest_patch

from .deps import Admin, DbDep, KubeDep, get_session
from .errors import Problem
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
SESSION_PATCH_ANSWER: dict[int | str, dict[str, Any]] = {
    **PATCH_ANSWER,
    409: {  # a refusal is JSON, though the route's answer is a patch (routing.Route does this for the rest)
        "description": "The session's Environment names no repository: there is no base to diff its work against",
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{Problem.__name__}"}}},
    },
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


async def session_work_patch(k: Kube, db: Database, name: str) -> Patch:
    """Session ``name``'s work as one patch against its base: for a session whose Environment names a
    repository, against the base branch's commit its checkout started from, as its last finished turn left
    the workspace (a job's attempt: as last verified or delivered). Raises HTTPException: 404 for no such
    session, or no patch taken yet (no turn has ended); 409 for a session whose Environment names no
    repository (its workspace is not a checkout: there is no base to diff against)."""
    s = await get_session(k, name)
    if not (s.get("metadata", {}).get("labels") or {}).get("hangar.dev/job"):
        env_name = str((s.get("spec") or {}).get("environment") or "")
        env_obj = await k.get("environments", env_name) if env_name else None
        if env_obj is None or EnvironmentSpec.model_validate(env_obj.get("spec") or {}).repository is None:
            raise HTTPException(
                409,
                f"session {name!r} has no base to diff its work against: its Environment {env_name!r} names "
                "no repository, so its workspace is not a checkout (give the Environment a repository)",
            )
    p = await session_patch(db, name)
    if p is None:
        raise HTTPException(
            404,
            f"session {name!r} has no patch yet: its work is taken when a turn ends (a job's attempt: when it "
            "is verified or delivered)",
        )
    return p


@router.get("/api/sessions/{ref}/patch", response_class=DiffResponse, responses=SESSION_PATCH_ANSWER)
async def read_session_patch(ref: SessionRef, _: Admin, k: KubeDep, d: DbDep) -> DiffResponse:
    """The session's work as one patch against its base branch (``git apply`` takes it)."""
    return answer(await session_work_patch(k, d, ref))


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
