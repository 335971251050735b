"""REST routes for jobs: submit, read, cancel, follow up, and the session routes' steering and approvals
under ``/api/jobs/{job_id}/…``.

A Job runs as one or more attempt Sessions ``<job>-a<i>`` (the operator's Job controller creates them and
keeps the Job's status current). These routes act on those sessions' resources with the same functions the
session routes use (``steering.py``, ``approvals.py``); they only resolve the job, check who may ask and pick
the attempts a request goes to. This module: submit, list, read, cancel, follow up, events; steering a job's
running turns is in ``job_steering.py``, its approvals in ``job_approvals.py``, finding a job and its
attempts in ``job_attempts.py``.

Who may call: an admin token, or a ``jobs`` token whose subject is the job's ``spec.submitter``. A jobs token
asking for someone else's job gets the same 404 as for a job that doesn't exist (it is not told the job is
there); any other role gets 403.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import Field

from hangar.bodies import stow
from hangar.forge import foreign_repository
from hangar.kube import ApiException, Kube, Obj
from hangar.models import LIVE_HARNESSES, Job, Session, Turn
from hangar.models.base import NAME_PATTERN, ApprovalPolicy, Harness
from hangar.models.environment import EnvironmentSpec
from hangar.models.job import (
    ATTEMPTS_MAX,
    BRANCH_PATTERN,
    JOB_FINAL,
    JOB_NAME_MAX,
    JobSpec,
    attempt_session,
)
from hangar.store import Database
from hangar.turns import create_turn

from . import schemas as S
from . import steering
from .approvals import waiting_on
from .auth import Caller, owns
from .deps import SEQ_MAX, DbDep, KubeDep, events_page
from .errors import api_error
from .fields import EnvironmentName, MessageText, ModelId, RequestBody, WholeNumber
from .job_attempts import (
    JobsCaller,
    attempt_sessions,
    get_job,
    job_state,
    job_turns,
    live_attempts,
    patch_job_guarded,
    refuse_final,
)
from .names import JobId
from .routing import Route
from .views import job_view
from .watch_cache import CacheDep

router = APIRouter(prefix="/api/jobs", tags=["jobs"], route_class=Route)

SteerClassGiven = Literal["correction", "redirect", "new_info"]


class NewJob(RequestBody):
    prompt: MessageText = Field(description="What the agent is to do")
    environment: EnvironmentName
    repository: str = Field(default="", max_length=2048)
    base_branch: str = Field(default="main", min_length=1, max_length=255)
    harness: Harness = "claude"
    model: ModelId | None = None
    approvals: ApprovalPolicy | None = Field(
        default=None, description="Overrides the environment's and the deployment's; every attempt keeps it"
    )
    attempts: WholeNumber = Field(default=1, ge=1, le=ATTEMPTS_MAX, description="best-of-N")
    deliver: Literal["branch", "pr", "none"] = "pr"
    branch: str | None = Field(
        default=None,
        max_length=200,
        pattern=BRANCH_PATTERN,
        description="The branch the work is delivered on; default hangar/<job>",
    )
    tainted: bool = Field(default=False, description="Start tainted (the agent will read untrusted input)")
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=JOB_NAME_MAX,
        pattern=NAME_PATTERN,
        description="The job's id; without one, job-<10 hex>",
    )


class FollowUp(RequestBody):
    message: MessageText
    klass: SteerClassGiven | None = Field(
        default=None,
        alias="class",
        description="correction, redirect or new_info; without one: new_info when it answers the agent's "
        "question, else unclassified",
    )


# --- routes ------------------------------------------------------------------------------------------------
@router.post("", status_code=201, response_model=S.JobView)
async def create_job(body: NewJob, who: JobsCaller, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """Submit a job. ``submitter`` is the caller; the operator starts ``attempts`` sessions ``<job>-a<i>``."""
    env_obj = await k.get("environments", body.environment)
    if env_obj is None:
        raise HTTPException(
            422, f"unknown environment {body.environment!r}: create it first (kind Environment)"
        )
    repo = EnvironmentSpec.model_validate(env_obj["spec"]).repository
    foreign = foreign_repository(body.repository, body.environment, repo.url if repo else None)
    if foreign is not None:
        raise HTTPException(422, foreign)
    name = body.name or f"job-{secrets.token_hex(5)}"
    if await k.get("jobs", name) is not None:
        raise HTTPException(409, f"job {name!r} already exists: pick another name")
    for i in range(1, body.attempts + 1):
        if await k.get("sessions", attempt_session(name, i)) is not None:
            raise HTTPException(
                409,
                f"a session named {attempt_session(name, i)!r} already exists, and job {name!r} would run its "
                f"attempt {i} under that name: pick another job name",
            )
    prompt = await stow(d, body.prompt)
    spec = JobSpec(
        submitter=who.subject,
        repository=body.repository,
        base_branch=body.base_branch,
        prompt=prompt.inline,
        prompt_ref=prompt.ref,
        environment=body.environment,
        harness=body.harness,
        model=body.model,
        approvals=body.approvals,
        attempts=body.attempts,
        deliver=body.deliver,
        tainted=body.tainted,
        branch=body.branch,
    )
    obj = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "hangar"},
            "annotations": {"hangar.dev/created-by": who.subject},
        },
        "spec": spec.dump(),
    }
    try:
        created = await k.create("jobs", obj)
    except ApiException as e:
        if e.status == 409:
            raise HTTPException(409, f"job {name!r} already exists: pick another name") from None
        raise api_error(e, f"job {name!r} can't be created") from None
    await d.audit(
        who.subject,
        "job.create",
        name,
        environment=body.environment,
        attempts=body.attempts,
        harness=body.harness,
    )
    return job_view(created, [])


@router.get("", response_model=S.JobList)
async def list_jobs(who: JobsCaller, k: KubeDep) -> dict[str, Any]:
    """Admins: every job; a jobs token: its own."""
    items = [j for j in await k.list("jobs") if owns(who, str((j.get("spec") or {}).get("submitter", "")))]
    items.sort(key=lambda j: (j["metadata"].get("creationTimestamp") or "", j["metadata"]["name"]))
    return {"jobs": [job_view(j) for j in items]}


@router.get("/{job_id}", response_model=S.JobView)
async def read_job(job_id: JobId, who: JobsCaller, k: KubeDep, c: CacheDep) -> dict[str, Any]:
    """The job: its submitter's, an admin's, or a policy approver's of its repository (to read only)."""
    j = await get_job(k, who, job_id, read=True)
    sessions = await attempt_sessions(k, j)
    # Both read from the attempts; side by side, one round trip when the approvals cache cannot answer.
    pending, turns = await asyncio.gather(
        waiting_on(k, [s["metadata"]["name"] for s in sessions], c, attempts=True), job_turns(k, j, sessions)
    )
    return job_view(j, turns, pending)


@router.post("/{job_id}/cancel", status_code=202, response_model=S.JobView)
async def cancel_job(job_id: JobId, who: JobsCaller, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """Cancel: the operator stops the attempts and the job ends ``cancelled``."""

    async def change() -> tuple[Obj, Obj]:
        j = await get_job(k, who, job_id)
        state = job_state(j)
        if state in JOB_FINAL:
            raise HTTPException(409, f"job {job_id!r} is already {state}: nothing to cancel")
        if j["spec"].get("cancelled"):
            raise HTTPException(409, f"job {job_id!r} is already being cancelled")
        return j, {
            "metadata": {"annotations": {"hangar.dev/cancelled-by": who.subject}},
            "spec": {"cancelled": True},
        }

    j, updated = await patch_job_guarded(k, job_id, change, f"job {job_id!r} can't be cancelled")
    await d.audit(who.subject, "job.cancel", job_id, state=job_state(j))
    return job_view(updated)


@router.post("/{job_id}/follow_up", status_code=202, response_model=S.FollowUpAnswer)
async def follow_up(job_id: JobId, body: FollowUp, who: JobsCaller, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """A new turn on each attempt that has not failed, in the same conversation. On an attempt whose
    Claude Code or Codex turn is running it is a steer instead (as a message to a busy session is)."""
    j = await get_job(k, who, job_id)
    if job_state(j) == "delivered" and not j["spec"].get("cancelled"):
        return await _follow_up_delivered(k, d, who, j, body)
    refuse_final(j, "take a follow-up")
    sessions = await attempt_sessions(k, j)
    if not sessions:
        raise HTTPException(
            409, f"job {job_id!r} has no attempt running yet (it is {job_state(j)}): wait for it to start"
        )
    targets = live_attempts(j, sessions)
    if not targets:
        raise HTTPException(
            409, f"every attempt of job {job_id!r} failed or was stopped: there is nothing to follow up"
        )
    klass: str = body.klass or "unclassified"
    if body.klass is None:
        # An answer to the agent's own question (a turn that ended NeedsInput) is new information.
        for s in targets:
            last = Session.model_validate(s).status.last_turn
            t = await k.get("turns", last) if last else None
            if t is not None and Turn.model_validate(t).status.phase == "NeedsInput":
                klass = "new_info"
    by_person = who.subject if body.klass else None
    message = await stow(d, body.message)  # stored once, referenced by every attempt's turn
    results: list[dict[str, Any]] = []
    for s in targets:
        ref = s["metadata"]["name"]
        running = None
        if s["spec"].get("harness", "claude") in LIVE_HARNESSES:
            running = await steering.running_turn(k, s)
        if running is not None:
            out = await steering.steer_turn(k, running, message, who.subject, klass, by_person)
            results.append({"session": ref, "kind": "steer", "steer": out["steer"], "turn": out["turn"]})
            continue
        try:
            name = await create_turn(k, ref, message, by=who.subject, klass=klass, classified_by=by_person)
        except LookupError:
            continue  # the attempt's session went meanwhile (the job is being deleted)
        t = await k.get("turns", name)
        index = int((t or {}).get("spec", {}).get("index", 0)) or None
        results.append({"session": ref, "kind": "turn", "turn": {"name": name, "index": index}})
    if not results:
        raise HTTPException(409, f"job {job_id!r} has no attempt left to follow up")
    kinds = {r["kind"] for r in results}
    await d.audit(
        who.subject, "job.follow_up", job_id, klass=klass, to=[f"{r['session']}:{r['kind']}" for r in results]
    )
    return {
        "job": job_id,
        "kind": kinds.pop() if len(kinds) == 1 else "mixed",
        "class": klass,
        "sent_to": [r["session"] for r in results],
        "results": results,
    }


async def _follow_up_delivered(k: Kube, d: Database, who: Caller, j: Obj, body: FollowUp) -> dict[str, Any]:
    """A follow-up after delivery: a new turn of the delivered attempt (its session starts again), whose work
    is verified, pushed to the same branch and shown on the same pull request."""
    job = Job.model_validate(j)
    delivered = job.status.delivery
    if delivered is None:
        raise HTTPException(
            409, f"job {job.name!r} is delivered but records no delivery: it can't take a follow-up"
        )
    session = attempt_session(job.name, delivered.attempt)
    klass: str = body.klass or "unclassified"
    try:
        turn = await create_turn(
            k,
            session,
            await stow(d, body.message),
            by=who.subject,
            klass=klass,
            classified_by=who.subject if body.klass else None,
        )
    except LookupError:
        raise HTTPException(409, f"job {job.name!r}'s delivered attempt {session!r} is gone") from None
    # The turn exists first, so the operator finds it queued when the session starts again.
    await k.patch("sessions", session, {"spec": {"stopped": False, "stoppedBy": None, "stopReason": None}})
    await d.audit(
        who.subject, "job.follow_up", job.name, klass=klass, to=[f"{session}:turn"], after="delivered"
    )
    t = await k.get("turns", turn)
    index = int((t or {}).get("spec", {}).get("index", 0)) or None
    return {
        "job": job.name,
        "kind": "turn",
        "class": klass,
        "sent_to": [session],
        "results": [{"session": session, "kind": "turn", "turn": {"name": turn, "index": index}}],
        "detail": f"the delivered attempt goes on: its work is pushed to {delivered.branch} and the pull request "
        "updated once it is verified",
    }


@router.get("/{job_id}/events", response_model=S.EventPage)
async def read_events(
    job_id: JobId,
    who: JobsCaller,
    k: KubeDep,
    d: DbDep,
    response: Response,
    since: Annotated[int, Query(ge=0, le=SEQ_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    """The job's own events (state changes the operator recorded), numbered; read on with ``?since=``."""
    await get_job(k, who, job_id)
    return await events_page(d, f"job/{job_id}", since, limit, response)
