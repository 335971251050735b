"""REST routes for jobs: submit, read, cancel, follow up, and the session routes' steering and approvals
under ``/api/jobs/{job_id}/…``.

A Job runs as one or more attempt Sessions ``<job>-a<i>`` (the operator's Job controller creates them and
keeps the Job's status current). These routes act on those sessions' resources with the same functions the
session routes use (``steering.py``, ``approvals.py``); they only resolve the job, check who may ask and pick
the attempts a request goes to.

Who may call: an admin token, or a ``jobs`` token whose subject is the job's ``spec.submitter``. A jobs token
asking for someone else's job gets the same 404 as for a job that doesn't exist (it is not told the job is
there); any other role gets 403.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from hangar.kube import ApiException, Kube, Obj
from hangar.models import LIVE_HARNESSES
from hangar.models.base import NAME_PATTERN, ApprovalPolicy, Harness
from hangar.models.job import ATTEMPTS_MAX, JOB_FINAL, JOB_NAME_MAX, JobSpec, attempt_session
from hangar.models.turn import MESSAGE_MAX
from hangar.turns import create_turn

from . import approvals as ap
from . import steering
from .auth import Caller, jobs_caller, owns
from .sessions import DbDep, KubeDep, events_page, reason
from .views import job_view, turn_view

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

JobsCaller = Annotated[Caller, Depends(jobs_caller)]
SteerClassGiven = Literal["correction", "redirect", "new_info"]


class NewJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=MESSAGE_MAX, description="What the agent is to do")
    environment: str = Field(min_length=1, max_length=253)
    repository: str = Field(default="", max_length=2048)
    base_branch: str = Field(default="main", min_length=1, max_length=255)
    harness: Harness = "claude"
    model: str | None = Field(default=None, min_length=1, max_length=253)
    approvals: ApprovalPolicy | None = Field(
        default=None, description="Overrides the environment's and the deployment's; every attempt keeps it"
    )
    attempts: int = Field(default=1, ge=1, le=ATTEMPTS_MAX, description="best-of-N")
    deliver: Literal["branch", "pr", "none"] = "pr"
    tainted: bool = Field(default=False, description="Start tainted (the agent will read untrusted input)")
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=JOB_NAME_MAX,
        pattern=NAME_PATTERN,
        description="The job's id; without one, job-<10 hex>",
    )


class FollowUp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=MESSAGE_MAX)
    klass: SteerClassGiven | None = Field(
        default=None,
        alias="class",
        description="correction, redirect or new_info; without one: new_info when it answers the agent's "
        "question, else unclassified",
    )


# --- resolving a job and its attempts ----------------------------------------------------------------------
def _no_job(job_id: str) -> HTTPException:
    return HTTPException(404, f"no job {job_id!r}")


async def get_job(k: Kube, who: Caller, job_id: str) -> Obj:
    """The job, if ``who`` may see it. Someone else's job is a 404, like a missing one."""
    if len(job_id) > JOB_NAME_MAX or not re.fullmatch(NAME_PATTERN, job_id):
        raise _no_job(job_id)
    j = await k.get("jobs", job_id)
    if j is None or j["metadata"].get("deletionTimestamp"):
        raise _no_job(job_id)
    if not owns(who, str((j.get("spec") or {}).get("submitter", ""))):
        raise _no_job(job_id)
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
    recorded = [by_name[n] for n in ((job.get("status") or {}).get("turns") or []) if n in by_name]
    seen = {t["metadata"]["name"] for t in recorded}
    rest = sorted(
        (t for t in turns if t["metadata"]["name"] not in seen),
        key=lambda t: (_attempt_index(job, t["spec"]["session"]), int(t["spec"].get("index", 0))),
    )
    return recorded + rest


def _state(job: Obj) -> str:
    return str((job.get("status") or {}).get("state") or "queued")


def refuse_final(job: Obj, what: str) -> None:
    name, state = job["metadata"]["name"], _state(job)
    if state in JOB_FINAL:
        raise HTTPException(409, f"job {name!r} is {state}: it can't {what} any more")
    if job["spec"].get("cancelled"):
        raise HTTPException(409, f"job {name!r} is being cancelled: it can't {what} any more")


def _attempt_state(job: Obj, session: str) -> str | None:
    for a in (job.get("status") or {}).get("attempts") or []:
        if a.get("session") == session:
            return str(a.get("state") or "") or None
    return None


def live_attempts(job: Obj, sessions: list[Obj]) -> list[Obj]:
    """The attempts a follow-up goes to: every attempt that has not failed (by the job's record of it or
    its session's phase) and was not stopped."""
    return [
        s
        for s in sessions
        if _attempt_state(job, s["metadata"]["name"]) not in ("failed", "stopped")
        and (s.get("status") or {}).get("phase") not in ("Failed", "Stopped")
        and not s["spec"].get("stopped")
    ]


async def _running(k: Kube, sessions: list[Obj]) -> list[tuple[Obj, Obj]]:
    out = []
    for s in sessions:
        turn = await steering.running_turn(k, s)
        if turn is not None:
            out.append((s, turn))
    return out


def _nothing_running(job: Obj, what: str) -> HTTPException:
    name = job["metadata"]["name"]
    return HTTPException(
        409,
        f"job {name!r} has no running turn to {what} (it is {_state(job)}): "
        "follow up to start one, or cancel the job",
    )


def _fanned(kind: str, results: list[dict[str, Any]], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer to a request sent to every attempt with a running turn."""
    sent_to = [r["session"] for r in results]
    detail = (
        f"sent to the one attempt with a running turn: {sent_to[0]}"
        if len(sent_to) == 1
        else f"sent to the {len(sent_to)} attempts with a running turn: {', '.join(sent_to)}"
    )
    if errors:
        detail += "; not sent to " + "; ".join(f"{e['session']} ({e['error']})" for e in errors)
    first = results[0]
    return {
        "kind": kind,
        "sent_to": sent_to,
        "detail": detail,
        kind: first[kind],
        "turn": first["turn"],
        "accepted_at": first["accepted_at"],
        f"{kind}s": results,
        "errors": errors,
    }


# --- routes ------------------------------------------------------------------------------------------------
@router.post("", status_code=201)
async def create_job(body: NewJob, who: JobsCaller, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """Submit a job. ``submitter`` is the caller; the operator starts ``attempts`` sessions ``<job>-a<i>``."""
    if await k.get("environments", body.environment) is None:
        raise HTTPException(
            422, f"unknown environment {body.environment!r}: create it first (kind Environment)"
        )
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
    spec = JobSpec(
        submitter=who.subject,
        repository=body.repository,
        base_branch=body.base_branch,
        prompt=body.prompt,
        environment=body.environment,
        harness=body.harness,
        model=body.model,
        approvals=body.approvals,
        attempts=body.attempts,
        deliver=body.deliver,
        tainted=body.tainted,
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
        if e.status == 422:
            raise HTTPException(422, reason(e)) from None
        raise
    await d.audit(
        who.subject,
        "job.create",
        name,
        environment=body.environment,
        attempts=body.attempts,
        harness=body.harness,
    )
    return job_view(created, [])


@router.get("")
async def list_jobs(who: JobsCaller, k: KubeDep) -> dict[str, Any]:
    """Admins: every job; a jobs token: its own."""
    items = [j for j in await k.list("jobs") if owns(who, str((j.get("spec") or {}).get("submitter", "")))]
    items.sort(key=lambda j: (j["metadata"].get("creationTimestamp") or "", j["metadata"]["name"]))
    return {"jobs": [job_view(j) for j in items]}


@router.get("/{job_id}")
async def read_job(job_id: str, who: JobsCaller, k: KubeDep) -> dict[str, Any]:
    j = await get_job(k, who, job_id)
    return job_view(j, await job_turns(k, j, await attempt_sessions(k, j)))


@router.post("/{job_id}/cancel", status_code=202)
async def cancel_job(job_id: str, who: JobsCaller, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """Cancel: the operator stops the attempts and the job ends ``cancelled``."""
    for _ in range(5):
        j = await get_job(k, who, job_id)
        state = _state(j)
        if state in JOB_FINAL:
            raise HTTPException(409, f"job {job_id!r} is already {state}: nothing to cancel")
        if j["spec"].get("cancelled"):
            raise HTTPException(409, f"job {job_id!r} is already being cancelled")
        patch = {
            "metadata": {
                "resourceVersion": j["metadata"]["resourceVersion"],
                "annotations": {"hangar.dev/cancelled-by": who.subject},
            },
            "spec": {"cancelled": True},
        }
        try:
            updated = await k.patch("jobs", job_id, patch)
        except ApiException as e:
            if e.status == 409:
                continue  # the operator wrote its status meanwhile: look again
            if e.status == 404:
                raise _no_job(job_id) from None
            raise
        await d.audit(who.subject, "job.cancel", job_id, state=state)
        return job_view(updated)
    raise HTTPException(409, f"job {job_id!r} kept changing: try again")


@router.post("/{job_id}/follow_up", status_code=202)
async def follow_up(job_id: str, body: FollowUp, who: JobsCaller, k: KubeDep, d: DbDep) -> dict[str, Any]:
    """A new turn on each attempt that has not failed, in the same conversation. On an attempt whose
    Claude Code or Codex turn is running it is a steer instead (as a message to a busy session is)."""
    j = await get_job(k, who, job_id)
    refuse_final(j, "take a follow-up")
    sessions = await attempt_sessions(k, j)
    if not sessions:
        raise HTTPException(
            409, f"job {job_id!r} has no attempt running yet (it is {_state(j)}): wait for it to start"
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
            last = (s.get("status") or {}).get("lastTurn")
            t = await k.get("turns", last) if last else None
            if t is not None and (t.get("status") or {}).get("phase") == "NeedsInput":
                klass = "new_info"
    by_person = who.subject if body.klass else None
    results: list[dict[str, Any]] = []
    for s in targets:
        ref = s["metadata"]["name"]
        running = None
        if s["spec"].get("harness", "claude") in LIVE_HARNESSES:
            running = await steering.running_turn(k, s)
        if running is not None:
            out = await steering.steer_turn(k, running, body.message, who.subject, klass, by_person)
            results.append({"session": ref, "kind": "steer", "steer": out["steer"], "turn": out["turn"]})
            continue
        try:
            name = await create_turn(
                k, ref, body.message, by=who.subject, klass=klass, classified_by=by_person
            )
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


@router.post("/{job_id}/steer", status_code=202)
async def steer(
    job_id: str, body: steering.SteerBody, who: JobsCaller, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Add a message to the running turn of every attempt that has one."""
    j = await get_job(k, who, job_id)
    refuse_final(j, "be steered")
    steering.check_steerable(j["spec"].get("harness", "claude"))
    running = await _running(k, await attempt_sessions(k, j))
    if not running:
        raise _nothing_running(j, "steer")
    results, errors = [], []
    for s, turn in running:
        ref = s["metadata"]["name"]
        try:
            out = await steering.steer_turn(k, turn, body.message, who.subject)
        except HTTPException as e:
            errors.append({"session": ref, "status": e.status_code, "error": e.detail})
            continue
        results.append({"session": ref, **out})
        await d.audit(
            who.subject, "job.steer", job_id, session=ref, turn=out["turn"]["name"], steer=out["steer"]["id"]
        )
    if not results:
        raise HTTPException(errors[0]["status"], errors[0]["error"])
    return {"job": job_id, **_fanned("steer", results, errors)}


@router.post("/{job_id}/steers/{steer_id}/withdraw")
async def withdraw(
    job_id: str, steer_id: str, who: JobsCaller, k: KubeDep, d: DbDep, request: Request
) -> JSONResponse:
    """Take back a steer still sending (200); once the agent has it, 409; the sandbox silent, 202."""
    j = await get_job(k, who, job_id)
    sessions = await attempt_sessions(k, j)
    resp, ref = await steering.withdraw_in(
        k, steering.turn_watch(request), sessions, steer_id, f"job {job_id!r}"
    )
    await d.audit(who.subject, "job.withdraw", job_id, session=ref, steer=steer_id, answer=resp.status_code)
    return resp


@router.post("/{job_id}/interrupt", status_code=202)
async def interrupt(
    job_id: str,
    who: JobsCaller,
    k: KubeDep,
    d: DbDep,
    body: Annotated[steering.InterruptBody | None, Body()] = None,
) -> dict[str, Any]:
    """Stop the running turn of every attempt that has one. Without a message the job then waits in
    ``needs_input`` for a follow-up; with one, it goes on with it."""
    j = await get_job(k, who, job_id)
    refuse_final(j, "be interrupted")
    running = await _running(k, await attempt_sessions(k, j))
    if not running:
        raise _nothing_running(j, "interrupt")
    message = body.message if body else None
    results, errors = [], []
    for s, turn in running:
        ref = s["metadata"]["name"]
        try:
            out = await steering.interrupt_turn(k, turn, message, who.subject)
        except HTTPException as e:
            errors.append({"session": ref, "status": e.status_code, "error": e.detail})
            continue
        results.append({"session": ref, **out})
        await d.audit(
            who.subject,
            "job.interrupt",
            job_id,
            session=ref,
            turn=out["turn"]["name"],
            interrupt=out["interrupt"]["id"],
        )
    if not results:
        raise HTTPException(errors[0]["status"], errors[0]["error"])
    return {"job": job_id, **_fanned("interrupt", results, errors)}


@router.post("/{job_id}/steers/{steer_id}/class")
async def classify_steer(
    job_id: str, steer_id: str, body: steering.ClassBody, who: JobsCaller, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Say what a steer (or an interrupt) of one of the job's attempts was."""
    j = await get_job(k, who, job_id)
    sessions = await attempt_sessions(k, j)
    out, ref = await steering.classify_in(k, sessions, steer_id, body.klass, who.subject, f"job {job_id!r}")
    await d.audit(who.subject, "job.classify", job_id, session=ref, steer=steer_id, klass=body.klass)
    return out


@router.post("/{job_id}/turns/{n}/class")
async def classify_turn(
    job_id: str, n: int, body: steering.ClassBody, who: JobsCaller, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Say what a follow-up was (``n``: the 1-based index in the job's ``turns``)."""
    j = await get_job(k, who, job_id)
    turns = await job_turns(k, j, await attempt_sessions(k, j))
    if n < 1 or n > len(turns):
        raise HTTPException(404, f"job {job_id!r} has no turn {n} (it has {len(turns)})")
    turn = turns[n - 1]
    name, session = turn["metadata"]["name"], turn["spec"]["session"]
    if int(turn["spec"].get("index", 0)) == 1:
        raise HTTPException(
            409,
            f"turn {n} of job {job_id!r} ({name}) is the job's prompt, not a follow-up: there is nothing to "
            "classify",
        )
    at = steering.now_iso()
    try:
        updated = await k.patch(
            "turns",
            name,
            {
                "metadata": {"resourceVersion": turn["metadata"]["resourceVersion"]},
                "spec": {"class": body.klass, "classifiedBy": who.subject, "classifiedAt": at},
            },
        )
    except ApiException as e:
        if e.status == 409:
            raise HTTPException(409, f"turn {name} changed meanwhile: try again") from None
        raise
    await d.append_event(
        f"session/{session}",
        "progress",
        {
            "message": f"steer.classified: turn {name} is {body.klass} (by {who.subject})",
            "event": "steer.classified",
            "follow_up": name,
            "class": body.klass,
            "by": who.subject,
        },
        name,
    )
    await d.audit(who.subject, "job.classify", job_id, turn=name, klass=body.klass)
    return {"turn": {"n": n, **turn_view(updated)}}


@router.get("/{job_id}/approvals")
async def list_approvals(
    job_id: str, who: JobsCaller, k: KubeDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> dict[str, Any]:
    """The job's policy, the approvals its attempts wait on, and recent ones, across all attempts."""
    j = await get_job(k, who, job_id)
    sessions = await attempt_sessions(k, j)
    st: dict[str, Any] = j.get("status") or {}
    attempts = []
    for s in sessions:
        sst: dict[str, Any] = s.get("status") or {}
        attempts.append(
            {
                "session": s["metadata"]["name"],
                "policy": sst.get("policy"),
                "tainted": bool((sst.get("taint") or {}).get("tainted")),
            }
        )
    policy = st.get("policy") or next((a["policy"] for a in attempts if a["policy"]), None)
    items = await ap.approvals_of(k, [s["metadata"]["name"] for s in sessions])
    pending, recent = ap.pending_and_recent(items, limit)
    return {
        "job": job_id,
        "policy": policy or j["spec"].get("approvals"),
        "tainted": job_view(j)["taint"]["tainted"],
        "state": _state(j),
        "attempts": attempts,
        "pending": pending,
        "recent": recent,
    }


@router.get("/{job_id}/approvals/{approval}")
async def read_approval(job_id: str, approval: str, who: JobsCaller, k: KubeDep) -> dict[str, Any]:
    j = await get_job(k, who, job_id)
    names = [s["metadata"]["name"] for s in await attempt_sessions(k, j)]
    return ap.approval_view(await ap.approval_in(k, names, approval, f"job {job_id!r}"))


@router.post("/{job_id}/approvals/{approval}")
async def decide_approval(
    job_id: str, approval: str, body: ap.DecisionBody, who: JobsCaller, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Decide an approval one of the job's attempts waits on (404 if it is not the job's)."""
    j = await get_job(k, who, job_id)
    names = [s["metadata"]["name"] for s in await attempt_sessions(k, j)]
    return await ap.decide(k, d, who, names, approval, body, f"job {job_id!r}", job=job_id)


@router.get("/{job_id}/events")
async def read_events(
    job_id: str,
    who: JobsCaller,
    k: KubeDep,
    d: DbDep,
    response: Response,
    since: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    """The job's own events (state changes the operator recorded), numbered; read on with ``?since=``."""
    await get_job(k, who, job_id)
    return await events_page(d, f"job/{job_id}", since, limit, response)
