"""A job's attempts as the job routes see them: the job (if the caller may see it), its attempt sessions
``<job>-a<i>`` and their turns, and which of them a request may go to.

Who may call: an admin token, or a ``jobs`` token whose subject is the job's ``spec.submitter``. A jobs token
asking for someone else's job gets the same 404 as for a job that doesn't exist (it is not told the job is
there); any other role gets 403 (:func:`hangar_api.auth.jobs_caller`). One widening, for reading only
(``get_job(..., read=True)``: ``GET /api/jobs/{id}`` and MCP's job reads): a policy approver of the job's
repository reads the jobs they may release, so they can see what they are asked to release.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException

from hangar.kube import ApiException, Kube, Obj
from hangar.models import Job, Session
from hangar.models.environment import EnvironmentSpec
from hangar.models.job import JOB_FINAL, attempt_session

from . import names
from .auth import Caller, jobs_caller, owns
from .errors import api_error

JobsCaller = Annotated[Caller, Depends(jobs_caller)]


# --- resolving a job and its attempts ----------------------------------------------------------------------
def no_job(job_id: str) -> HTTPException:
    return HTTPException(404, f"no job {names.shown(job_id)}")


async def patch_job_guarded(
    k: Kube, job_id: str, change: Callable[[], Awaitable[tuple[Obj, Obj]]], refused: str
) -> tuple[Obj, Obj]:
    """Write a caller's change to job ``job_id`` only onto the job it was checked against: ``change()`` reads
    the job, checks it (raising its refusal) and returns ``(job, patch)``; the patch is made at the job's
    ``resourceVersion``, so a write of the operator's in between (409) means looking again, up to five times.
    A job gone meanwhile is :func:`no_job`. Returns the job as read and as written."""
    for _ in range(5):
        j, patch = await change()
        patch.setdefault("metadata", {})["resourceVersion"] = j["metadata"]["resourceVersion"]
        try:
            return j, await k.patch("jobs", job_id, patch)
        except ApiException as e:
            if e.status == 409:
                continue  # the operator wrote its status meanwhile: look again
            if e.status == 404:
                raise no_job(job_id) from None
            raise api_error(e, refused) from None
    raise HTTPException(409, f"job {job_id!r} kept changing: try again")


async def approvers_of(k: Kube, job: Job) -> tuple[bool, list[str]]:
    """Does the job's repository ask for release, and who its approvers are."""
    env_obj = await k.get("environments", job.spec.environment)
    repo = EnvironmentSpec.model_validate(env_obj["spec"]).repository if env_obj else None
    if repo is None:
        return False, []
    return repo.policy.require_approval, list(repo.policy.approvers)


async def releases(k: Kube, who: Caller, j: Obj) -> bool:
    """Is ``who`` (a login token) a policy approver of ``j``'s repository, one who may release it?"""
    if who.role != "jobs":
        return False
    required, approvers = await approvers_of(k, Job.model_validate(j))
    return required and who.subject in approvers


async def get_job(k: Kube, who: Caller, job_id: str, *, read: bool = False) -> Obj:
    """The job, if ``who`` may see it (``read``: to read it only, which its policy approvers may too).
    Someone else's job is a 404, like a missing one."""
    if not names.valid("job", job_id):
        raise no_job(job_id)
    j = await k.get("jobs", job_id)
    if j is None or j["metadata"].get("deletionTimestamp"):
        raise no_job(job_id)
    if not owns(who, str((j.get("spec") or {}).get("submitter", ""))):
        if not (read and await releases(k, who, j)):
            raise no_job(job_id)
    return j


def _attempt_index(job: Obj, session: str) -> int:
    prefix = f"{job['metadata']['name']}-a"
    tail = session[len(prefix) :] if session.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else 0


async def attempt_sessions(k: Kube, job: Obj) -> list[Obj]:
    """The job's attempt sessions that exist, in attempt order: ``<job>-a<i>``, labelled with the job and
    owned by it (a session that merely carries the label or the name is not one: its approvals and turns are
    not the submitter's to answer)."""
    name, uid = job["metadata"]["name"], job["metadata"].get("uid")
    wanted = {attempt_session(name, i) for i in range(1, int(job["spec"].get("attempts", 1)) + 1)}
    out = []
    for s in await k.list("sessions", label_selector=f"hangar.dev/job={name}"):
        meta = s["metadata"]
        if meta["name"] not in wanted or meta.get("deletionTimestamp"):
            continue
        if not any(o.get("kind") == "Job" and o.get("uid") == uid for o in meta.get("ownerReferences") or []):
            continue
        out.append(s)
    return sorted(out, key=lambda s: _attempt_index(job, s["metadata"]["name"]))


async def job_turns(k: Kube, job: Obj, sessions: list[Obj]) -> list[Obj]:
    """The job's turns: in the order of ``status.turns`` (what the operator recorded), then any it has not
    recorded yet, by attempt and index."""
    names = [s["metadata"]["name"] for s in sessions]
    if not names:
        return []
    selector = (
        f"hangar.dev/session={names[0]}" if len(names) == 1 else f"hangar.dev/session in ({','.join(names)})"
    )
    turns = [t for t in await k.list("turns", label_selector=selector) if t["spec"].get("session") in names]
    by_name = {t["metadata"]["name"]: t for t in turns}
    recorded = [by_name[n] for n in Job.model_validate(job).status.turns if n in by_name]
    seen = {t["metadata"]["name"] for t in recorded}
    rest = sorted(
        (t for t in turns if t["metadata"]["name"] not in seen),
        key=lambda t: (_attempt_index(job, t["spec"]["session"]), int(t["spec"].get("index", 0))),
    )
    return recorded + rest


def job_state(job: Obj) -> str:
    return Job.model_validate(job).status.state


def refuse_final(job: Obj, what: str) -> None:
    name, state = job["metadata"]["name"], job_state(job)
    if state in JOB_FINAL:
        raise HTTPException(409, f"job {name!r} is {state}: it can't {what} any more")
    if job["spec"].get("cancelled"):
        raise HTTPException(409, f"job {name!r} is being cancelled: it can't {what} any more")


def live_attempts(job: Obj, sessions: list[Obj]) -> list[Obj]:
    """The attempts a follow-up goes to: every attempt that has not failed (by the job's record of it or
    its session's phase) and was not stopped."""
    recorded: dict[str | None, str] = {}
    for a in Job.model_validate(job).status.attempts:
        recorded.setdefault(a.session, a.state)  # the first record of a session counts
    out = []
    for s in sessions:
        sess = Session.model_validate(s)
        if (
            recorded.get(sess.name) not in ("failed", "stopped")
            and sess.status.phase not in ("Failed", "Stopped")
            and not sess.spec.stopped
        ):
            out.append(s)
    return out
