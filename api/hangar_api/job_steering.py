"""Steering the running turns of a job's attempts under ``/api/jobs/{job_id}/…``: steer, withdraw,
interrupt, and classify a steer or a follow-up. They reuse the session routes' turn-level functions
(``steering.py``); a request goes to every attempt with a running turn, and the answer says which."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import JSONResponse

from hangar.bodies import stow
from hangar.kube import ApiException, Kube, Obj

from . import schemas as S
from . import steering
from .deps import DbDep, KubeDep
from .errors import api_error
from .job_attempts import JobsCaller, attempt_sessions, get_job, job_state, job_turns, refuse_final
from .names import JobId, SteerId
from .routing import Route
from .turn_watch import turn_watch
from .views import turn_view

router = APIRouter(prefix="/api/jobs", tags=["jobs"], route_class=Route)


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
        f"job {name!r} has no running turn to {what} (it is {job_state(job)}): "
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


@router.post("/{job_id}/steer", status_code=202, response_model=S.JobSteerAnswer)
async def steer(
    job_id: JobId, body: steering.SteerBody, who: JobsCaller, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Add a message to the running turn of every attempt that has one."""
    j = await get_job(k, who, job_id)
    refuse_final(j, "be steered")
    steering.check_steerable(j["spec"].get("harness", "claude"))
    running = await _running(k, await attempt_sessions(k, j))
    if not running:
        raise _nothing_running(j, "steer")
    message = await stow(d, body.message)  # stored once, referenced by every attempt's turn
    results, errors = [], []
    for s, turn in running:
        ref = s["metadata"]["name"]
        try:
            out = await steering.steer_turn(k, turn, message, who.subject)
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


@router.post("/{job_id}/steers/{steer_id}/withdraw", responses=S.WITHDRAW_ANSWERS)
async def withdraw(
    job_id: JobId, steer_id: SteerId, who: JobsCaller, k: KubeDep, d: DbDep, request: Request
) -> JSONResponse:
    """Take back a steer still sending (200); once the agent has it, 409; the sandbox silent, 202."""
    j = await get_job(k, who, job_id)
    sessions = await attempt_sessions(k, j)
    resp, ref = await steering.withdraw_in(k, turn_watch(request), sessions, steer_id, f"job {job_id!r}")
    await d.audit(who.subject, "job.withdraw", job_id, session=ref, steer=steer_id, answer=resp.status_code)
    return resp


@router.post("/{job_id}/interrupt", status_code=202, response_model=S.JobInterruptAnswer)
async def interrupt(
    job_id: JobId,
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
    message = await stow(d, body.message) if body and body.message else None
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


@router.post("/{job_id}/steers/{steer_id}/class", response_model=S.ClassAnswer)
async def classify_steer(
    job_id: JobId, steer_id: SteerId, body: steering.ClassBody, who: JobsCaller, k: KubeDep, d: DbDep
) -> dict[str, Any]:
    """Say what a steer (or an interrupt) of one of the job's attempts was."""
    j = await get_job(k, who, job_id)
    sessions = await attempt_sessions(k, j)
    out, ref = await steering.classify_in(k, sessions, steer_id, body.klass, who.subject, f"job {job_id!r}")
    await d.audit(who.subject, "job.classify", job_id, session=ref, steer=steer_id, klass=body.klass)
    return out


@router.post("/{job_id}/turns/{n}/class", response_model=S.JobTurnClassAnswer)
async def classify_turn(
    job_id: JobId,
    n: int,
    body: steering.ClassBody,
    who: JobsCaller,
    k: KubeDep,
    d: DbDep,
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
        raise api_error(e, f"turn {name} can't be classified") from None
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
