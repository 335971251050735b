"""The Job controller: a job's attempts are Sessions; its status is a summary the operator keeps current.

A Job with ``attempts: N`` (best-of-N) gets Sessions ``<job>-a1`` … ``<job>-aN``, owned by the Job and
labelled ``hangar.dev/job``. Each is created with the job's prompt, its taint and its *effective* approvals
policy written into the session's own ``spec.approvals``: every attempt keeps its parent's policy even if
the Environment or the deployment default changes later, and a person reading an attempt sees why it asks.

Everything else is derived, idempotently, from the attempts and their turns on every change of an attempt
session and on a timer: the state, the question (a turn's ``ask``, or a person's interrupt without a
message), pending approvals (each with its attempt's session), taint (sticky: once the job is tainted it
stays so), turns and cost. Cancelling (``spec.cancelled``) stops the attempts; a job that ends (done,
failed, cancelled) stops them too, so its sandboxes go back to the pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from hangar.kube import ApiException, Kube, Obj, owner_ref
from hangar.models import API_VERSION, Job, Session, Turn
from hangar.models import labels as L
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec
from hangar.models.job import JOB_FINAL, Attempt, JobSpec, JobStatus, attempt_session
from hangar.models.session import PendingApproval, SessionStatus, Taint
from hangar.turns import turn_index

from . import metrics
from .approvals.policy import MAX_TAINT_REASONS
from .context import Context, resource
from .job_results import record_result, release_gate, timeline
from .job_rules import job_state, rank
from .job_work import Failure, JobWork, base_branch, delivers, job_branch
from .k8s_events import EventType
from .lifecycle import JOB, move
from .status import patch_status

log = logging.getLogger("hangar.operator.jobs")
QUESTION_INTERRUPTED = (
    "Interrupted by {by}. Follow up with what the agent should do instead, or cancel the job."
)


def attempt_state(session: Obj | None, last_turn: Obj | None) -> tuple[str, str | None]:
    """An attempt's state and, when it waits on a person, the question it asks."""
    if session is None:
        return "queued", None
    st = Session.model_validate(session).status
    if st.phase == "Failed":
        return "failed", None
    if st.pending_approvals:
        return "awaiting_approval", None
    if last_turn is None:
        return ("stopped" if st.phase == "Stopped" else "queued"), None
    turn = Turn.model_validate(last_turn)
    phase = turn.status.phase
    if phase == "NeedsInput":
        return "needs_input", turn.status.question or "The agent asked for input."
    if phase == "Interrupted":
        interrupts = [i for i in turn.spec.interrupts if not i.message]
        by = (interrupts[-1].by if interrupts else "") or "someone"
        return "needs_input", QUESTION_INTERRUPTED.format(by=by)
    if phase == "Completed":
        return "done", None
    if phase == "Failed":
        return "failed", None
    if st.phase == "Stopped":
        return "stopped", None
    return ("running" if phase == "Running" else "queued"), None


class Jobs:
    """The Job controller. Its lifecycle (``lifecycle.JOB``) is derived: every reconcile recomputes the
    state from the attempts (and, for a job that delivers, their verification and the delivery), and a
    final state (done, delivered, failed, cancelled) is never left."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.work = JobWork(ctx)
        self.checked: set[str] = set()  # job uids whose preflight passed in this process

    async def reconcile(self, ns: str, name: str) -> None:
        lock = self.locks.setdefault((ns, name), asyncio.Lock())
        async with lock:
            await self._reconcile(ns, name)

    async def command_result(self, ns: str, session: str, p: dict[str, Any]) -> None:
        """The driver's answer to a job's ``verify`` or ``deliver``: recorded on the Job (once), then the job
        moves on."""
        s_obj = await self.ctx.kube_in(ns).get("sessions", session)
        name = ((s_obj or {}).get("metadata", {}).get("labels") or {}).get(L.JOB)
        if not name:
            return
        lock = self.locks.setdefault((ns, name), asyncio.Lock())
        async with lock:
            job = await self.ctx.kube_in(ns).get("jobs", name)
            if job is None:
                return
            out = await record_result(self.ctx, ns, session, job, p)
            if isinstance(out, Failure):
                await self._fail(ns, job, Job.model_validate(job).status, out.reason, out.message)
            elif out:
                await self._reconcile(ns, name)

    async def _reconcile(self, ns: str, name: str) -> None:
        kube = self.ctx.kube_in(ns)
        job = await kube.get("jobs", name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            self.locks.pop((ns, name), None)
            return
        typed = Job.model_validate(job)
        spec, st, uid = typed.spec, typed.status, typed.uid
        # Only sessions this Job owns are its attempts: anyone may put the label on a session of their own.
        sessions = {
            s["metadata"]["name"]: s
            for s in await kube.list("sessions", label_selector=f"{L.JOB}={name}")
            if owned_by(s, uid)
        }
        if st.state in JOB_FINAL and not await self._followed_up(kube, name, st):
            await self._stop_attempts(kube, sessions.values())  # idempotent: a final job holds no sandbox
            return
        env_obj = await kube.get("environments", spec.environment)
        env = EnvironmentSpec.model_validate(env_obj["spec"]) if env_obj is not None else None
        policy = st.policy
        if policy is None:
            if env is None:
                msg = f"environment {spec.environment!r} does not exist"
                if st.message != msg and not spec.cancelled:
                    await patch_status(
                        kube,
                        "jobs",
                        job,
                        {"state": "queued", "reason": "EnvironmentNotFound", "message": msg},
                    )
                    await self.ctx.events.emit(kube, job, "Warning", "EnvironmentNotFound", msg)
                    return
            else:
                policy = spec.approvals or env.approvals or self.ctx.settings.approvals or "auto"
        # An attempt whose session someone deleted is lost, not re-run: running the prompt again would repeat
        # its work (and its side effects) behind the person's back.
        started = {a.index for a in st.attempts if a.session}
        if policy is not None and not spec.cancelled and not started and not sessions:
            if uid not in self.checked:
                failure = await self.work.preflight(ns, name, spec, env)
                if failure is not None:
                    await self._fail(ns, job, st, failure.reason, failure.message)
                    return
                self.checked.add(uid or "")
            held = await release_gate(self.ctx, ns, job, spec, st, env, policy)
            if held:
                return
        if policy is not None and not spec.cancelled:
            for i in range(1, spec.attempts + 1):
                sname = attempt_session(name, i)
                if sname not in sessions and i not in started:
                    created = await self._create_attempt(ns, job, spec, i, policy, env)
                    if created is None:
                        await self._fail(
                            ns,
                            job,
                            st,
                            "AttemptNameTaken",
                            f"a session named {sname!r} already "
                            f"exists and is not this job's: attempt {i} can't run under that name",
                        )
                        return
                    sessions[sname] = created
        names = sorted(sessions, key=lambda n: int(n.rsplit("-a", 1)[1]) if "-a" in n else 0)
        turns_by_session: dict[str, list[Obj]] = {n: [] for n in names}
        if names:
            selector = f"{L.SESSION} in ({','.join(names)})"
            for t in await kube.list("turns", label_selector=selector):
                turns_by_session.setdefault(Turn.model_validate(t).spec.session or "", []).append(t)
        known = {a.index: a for a in st.attempts}
        # Once an attempt is being delivered it is the job's: the others keep what was recorded of them.
        chosen = st.delivery.attempt if st.delivery is not None else None
        attempts: list[Attempt] = []
        pending: list[PendingApproval] = []
        turns: list[str] = []
        questions: list[str] = []
        taint = st.taint.model_copy(deep=True)
        cost = 0.0
        costs: dict[int, float] = {}
        last_turns: dict[int, Obj] = {}
        for i in range(1, spec.attempts + 1):
            sname = attempt_session(name, i)
            s = sessions.get(sname)
            ts = sorted(turns_by_session.get(sname, []), key=turn_index)
            last = ts[-1] if ts else None
            if last is not None:
                last_turns[i] = last
            state, question = attempt_state(s, last)
            lost = s is None and i in started
            if lost:
                state, question = "failed", None
            if (
                chosen == i
                and state == "stopped"
                and last is not None
                and not Turn.model_validate(last).status.ended
            ):
                state = "queued"  # a follow-up after delivery: its session starts again for the new turn
            sst = Session.model_validate(s).status if s is not None else SessionStatus()
            before = known.get(i)
            attempts.append(
                Attempt(
                    index=i,
                    session=sname if s is not None or lost else None,
                    state=state,
                    phase=sst.phase if s is not None else None,
                    last_turn=last["metadata"]["name"] if last else None,
                    outcome="session deleted"
                    if lost
                    else (Turn.model_validate(last).status.outcome if last else None),
                    # What only the job knows about its attempt is carried from one summary to the next.
                    verifications=before.verifications if before else [],
                    diff_lines=before.diff_lines if before else None,
                    rank=before.rank if before else None,
                    lost=before.lost if before else None,
                )
                if chosen is None or chosen == i or before is None
                else before
            )
            pending += [p.model_copy(update={"session": sname}) for p in sst.pending_approvals]
            turns += [t["metadata"]["name"] for t in ts]
            if question:
                questions.append(question)
            cost += sst.counters.cost_usd
            costs[i] = sst.counters.cost_usd
            if sst.taint.tainted:
                merge_taint(taint, sst.taint)
        if spec.tainted and not taint.tainted:
            merge_taint(taint, Taint(tainted=True, reasons=["the job was created tainted"]))
        delivering = delivers(spec, env) and not spec.cancelled
        if delivering:
            assert env is not None
            await self.work.advance(ns, name, attempts, sessions, turns_by_session, env)
        state = job_state([a.state for a in attempts], spec.cancelled)
        if policy is None and state == "queued":
            return  # still waiting for its environment
        patch: dict[str, Any] = {
            "state": state,
            "policy": policy,
            "question": questions[0] if state == "needs_input" and questions else None,
            "awaitingApproval": bool(pending),
            "pendingApprovals": [p.dump() for p in pending],
            "turns": turns,
            "taint": taint.dump(),
            "costUsd": round(cost, 6),
        }
        if state == "verified":
            if delivering:
                assert env is not None
                winner = (
                    next(a for a in attempts if a.index == chosen) if chosen else rank(attempts, costs)[0]
                )
                last = last_turns.get(winner.index)
                summary = Turn.model_validate(last).status.summary or "" if last is not None else ""
                step = await self.work.deliver(
                    ns,
                    name,
                    spec,
                    st.model_copy(update={"taint": taint, "cost_usd": cost}),
                    env,
                    winner,
                    sessions,
                    summary,
                    spec.attempts,
                )
                if isinstance(step, Failure):
                    await self._fail(ns, job, st, step.reason, step.message, attempts)
                    return
                state = "delivered" if step.stage == "done" else "delivering"
                patch.update(
                    state=state,
                    delivery=step.dump(),
                    branch=step.branch,
                    headCommit=step.head,
                    prUrl=step.pr_url,
                    verification=next((v.dump() for v in reversed(winner.verifications) if v.passed), None),
                )
            else:
                state = patch["state"] = "done"
        patch["attempts"] = [a.dump() for a in attempts]
        if state != st.state:
            patch["reason"] = ""
            patch["message"] = self._message(state, attempts, patch)
            who = self._who(state, spec, st, last_turns.get(chosen or 0))
            patch["timeline"] = timeline(st, state, patch["message"], who=who)
        if st.started_at is None and state not in ("queued", "cancelled", "awaiting_approval"):
            patch["startedAt"] = iso()
        if state in JOB_FINAL:
            patch["finishedAt"] = iso()
        if state != st.state:
            move(
                JOB, st.state, state
            )  # a move the lifecycle does not have fails here, before anything is written
        # The activity events go first: a crash before the status patch repeats them, never loses them.
        await self._record(ns, name, st, state, patch, taint, pending)
        current = st.dump()
        if any(current.get(k) != v for k, v in patch.items()) or st.observed_generation != typed.generation:
            job = await patch_status(kube, "jobs", job, patch)
        if state != st.state:
            log.info("job %s: %s -> %s", name, st.state, state, extra=resource(ns, name))
            if state in JOB_FINAL:
                metrics.JOBS.labels(state=state).inc()
                kind: EventType = "Normal" if state in ("done", "delivered") else "Warning"
                await self.ctx.events.emit(
                    kube,
                    job,
                    kind,
                    f"Job{state.capitalize()}",
                    f"the job is {state}: {patch.get('message', '')}",
                )
                await self._stop_attempts(kube, sessions.values())

    @staticmethod
    def _who(state: str, spec: JobSpec, st: JobStatus, chosen_last: Obj | None) -> str:
        if st.state == "delivered" and chosen_last is not None:
            return Turn.model_validate(chosen_last).spec.by or "hangar"  # whoever followed up
        if state == "running" and spec.release is not None:
            return spec.release.by
        return "hangar"

    async def _followed_up(self, kube: Kube, name: str, st: JobStatus) -> bool:
        """A delivered job whose delivered attempt has a turn after the one delivered: a follow-up, so the
        job goes on (its work is verified and pushed to the same branch, and the PR updated)."""
        d = st.delivery
        if st.state != "delivered" or d is None or d.turn is None:
            return False
        session = attempt_session(name, d.attempt)
        ts = await kube.list("turns", label_selector=f"{L.SESSION}={session}")
        return bool(ts) and max(ts, key=turn_index)["metadata"]["name"] != d.turn

    async def _record(
        self,
        ns: str,
        name: str,
        st: JobStatus,
        state: str,
        patch: dict[str, Any],
        taint: Taint,
        pending: list[PendingApproval],
    ) -> None:
        scope = self.ctx.scope("job", ns, name)
        if state != st.state:
            payload = {
                "state": state,
                "from": st.state,
                "question": patch["question"],
                "message": patch.get("message"),
            }
            await self.ctx.db.append_event(scope, "job_state", payload)
        if taint.tainted and not st.taint.tainted:
            await self.ctx.db.append_event(scope, "tainted", {"reasons": taint.reasons})
        known = {p.id for p in st.pending_approvals}
        for p in pending:
            if p.id not in known:  # a job's watchers see what it waits on without following each attempt
                await self.ctx.db.append_event(
                    scope,
                    "approval_request",
                    {"approval": p.id, "session": p.session, "tool": p.tool, "command": p.command},
                    p.turn,
                )

    @staticmethod
    def _message(state: str, attempts: list[Attempt], patch: dict[str, Any]) -> str:
        if state == "delivered":
            d = patch.get("delivery") or {}
            where = d.get("prUrl") or f"branch {d.get('branch')}"
            return f"attempt {d.get('attempt')} delivered at {str(d.get('head') or '')[:12]}: {where}"
        if state == "delivering":
            d = patch.get("delivery") or {}
            return f"delivering attempt {d.get('attempt')} on {d.get('branch')} ({d.get('stage')})"
        counts: dict[str, int] = {}
        for a in attempts:
            counts[a.state] = counts.get(a.state, 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    async def _create_attempt(
        self, ns: str, job: Obj, spec: JobSpec, index: int, policy: str, env: EnvironmentSpec | None
    ) -> Obj | None:
        name = job["metadata"]["name"]
        sname = attempt_session(name, index)
        kube = self.ctx.kube_in(ns)
        checkout: dict[str, str] = {}
        if env is not None and env.repository is not None:
            # Every attempt works on the job's branch in its own checkout; the one delivered is pushed as it.
            checkout = {L.BRANCH: job_branch(name, spec), L.BASE_BRANCH: base_branch(spec, env.repository)}
        body: Obj = {
            "apiVersion": API_VERSION,
            "kind": "Session",
            "metadata": {
                "name": sname,
                "labels": {L.JOB: name, L.ATTEMPT: str(index), **L.part_of()},
                "annotations": {L.CREATED_BY: f"job/{name}", L.SUBMITTER: spec.submitter, **checkout},
                "ownerReferences": [owner_ref(job)],
            },
            "spec": {
                "harness": spec.harness,
                "environment": spec.environment,
                "approvals": policy,
                "prompt": spec.prompt,
                **({"promptRef": spec.prompt_ref.dump()} if spec.prompt_ref else {}),
                "tainted": spec.tainted,
                **({"model": spec.model} if spec.model else {}),
            },
        }
        try:
            created = await kube.create("sessions", body)
        except ApiException as e:
            if e.status == 409:
                existing = await kube.get("sessions", sname)
                return (
                    existing
                    if existing is not None and owned_by(existing, job["metadata"].get("uid"))
                    else None
                )
            raise
        await self.ctx.db.append_event(
            self.ctx.scope("job", ns, name),
            "attempt_started",
            {"attempt": index, "session": sname, "policy": policy},
        )
        return created

    async def _fail(
        self,
        ns: str,
        job: Obj,
        st: JobStatus,
        reason: str,
        message: str,
        attempts: list[Attempt] | None = None,
    ) -> None:
        name = job["metadata"]["name"]
        kube = self.ctx.kube_in(ns)
        await self.ctx.db.append_event(
            self.ctx.scope("job", ns, name),
            "job_state",
            {"state": "failed", "from": st.state, "message": message},
        )
        job = await patch_status(
            kube,
            "jobs",
            job,
            {
                "state": move(JOB, st.state, "failed"),
                "reason": reason,
                "message": message,
                "finishedAt": iso(),
                "timeline": timeline(st, "failed", message),
                **({"attempts": [a.dump() for a in attempts]} if attempts is not None else {}),
            },
        )
        metrics.JOBS.labels(state="failed").inc()
        await self.ctx.events.emit(kube, job, "Warning", reason, message)
        log.warning("job %s failed: %s", name, message, extra=resource(ns, name))

    async def _stop_attempts(self, kube: Kube, sessions: Iterable[Obj]) -> None:
        for obj in sessions:
            s = Session.model_validate(obj)
            if s.spec.stopped or s.status.phase in ("Stopped", "Failed"):
                continue
            try:
                await kube.patch("sessions", s.name, {"spec": {"stopped": True}})
            except ApiException as e:
                if e.status != 404:
                    raise


def merge_taint(into: Taint, other: Taint) -> None:
    into.tainted = True
    for r in other.reasons:
        if r not in into.reasons and len(into.reasons) < MAX_TAINT_REASONS:
            into.reasons.append(r)
    if into.since is None or (other.since is not None and other.since < into.since):
        into.since = other.since or datetime.now(UTC)


def owned_by(obj: Obj, uid: str | None) -> bool:
    return uid is not None and any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])
