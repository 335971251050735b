"""What a Job's status records besides its attempts' summary: the driver's answers to ``verify`` and
``deliver`` (applied once, by command id), the patches they carry, the release gate, and the timeline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hangar.kube import Obj
from hangar.models import Job
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec
from hangar.models.job import JobSpec, JobStatus, TimelineEntry

from . import metrics
from .context import Context
from .job_work import Failure, JobWork
from .lifecycle import JOB, move
from .status import patch_status
from .work_patches import keep_patch

TIMELINE_MAX = 100


def timeline(st: JobStatus, state: str, why: str, who: str = "hangar") -> list[dict[str, Any]]:
    """The job's timeline with the move to ``state`` appended (the last TIMELINE_MAX moves are kept)."""
    entry = TimelineEntry.model_validate(
        {"state": state, "from": st.state, "at": datetime.now(UTC), "by": who, "why": why[:1000]}
    )
    kept = [e.dump() for e in st.timeline][-(TIMELINE_MAX - 1) :]
    return [*kept, entry.dump()]


async def record_result(ctx: Context, ns: str, session: str, job: Obj, p: dict[str, Any]) -> Failure | bool:
    """The driver's answer to ``verify`` or ``deliver`` on the Job's status: True when it was applied, False
    for one not (or no longer) awaited (a repeat), a Failure when the push failed."""
    kube = ctx.kube_in(ns)
    name = job["metadata"]["name"]
    st = Job.model_validate(job).status
    scope = ctx.scope("job", ns, name)
    if p.get("op") == "verify":
        attempts = [a.model_copy(deep=True) for a in st.attempts]
        v = JobWork.verified(attempts, p)
        if v is None:
            return False
        await ctx.db.append_event(
            scope,
            "verification",
            {
                "session": session,
                "turn": v.turn,
                "passed": v.passed,
                "exit_code": v.exit_code,
                "timed_out": v.timed_out,
                "error": v.error,
                "command": p.get("command"),
                "output": p.get("output"),
                "diff_lines": p.get("diff_lines"),
            },
        )
        if isinstance(p.get("patch"), str):
            await keep_patch(ctx, ns, session, v.turn, p, "verification")
        await patch_status(kube, "jobs", job, {"attempts": [a.dump() for a in attempts]})
        return True
    d = st.delivery
    if p.get("op") != "deliver" or d is None or d.stage != "pushing" or d.command_id != p.get("command_id"):
        return False
    out = JobWork.pushed(d, p)
    if isinstance(out, Failure):
        return out
    await ctx.db.append_event(
        scope,
        "work",
        {
            "session": session,
            "attempt": d.attempt,
            "head": out.head,
            "base": out.base,
            "branch": out.branch,
            "files_changed": p.get("files_changed"),
            "diff_lines": p.get("diff_lines"),
        },
    )
    if isinstance(p.get("patch"), str):
        await keep_patch(ctx, ns, session, None, p, "delivery")
    await patch_status(
        kube, "jobs", job, {"delivery": out.dump(), "headCommit": out.head, "branch": out.branch}
    )
    return True


async def release_gate(
    ctx: Context, ns: str, job: Obj, spec: JobSpec, st: JobStatus, env: EnvironmentSpec | None, policy: str
) -> bool:
    """A repository whose policy requires release holds its jobs in ``awaiting_approval`` until an approver
    releases them (``spec.release``); a rejection cancels the job. True while the job is held."""
    repo = env.repository if env is not None else None
    if repo is None or not repo.policy.require_approval:
        return False
    release = spec.release
    if release is not None and release.decision == "approved":
        return False
    kube = ctx.kube_in(ns)
    if release is not None:  # rejected
        why = f"rejected by {release.by}" + (f": {release.reason}" if release.reason else "")
        patch = {
            "state": move(JOB, st.state, "cancelled"),
            "reason": "Rejected",
            "message": why,
            "policy": policy,
            "finishedAt": iso(),
            "timeline": timeline(st, "cancelled", why, who=release.by),
        }
        await ctx.db.append_event(
            ctx.scope("job", ns, job["metadata"]["name"]),
            "job_state",
            {"state": "cancelled", "from": st.state, "message": why},
        )
        await patch_status(kube, "jobs", job, patch)
        metrics.JOBS.labels(state="cancelled").inc()
        await ctx.events.emit(kube, job, "Warning", "JobRejected", why)
        return True
    if st.state != "awaiting_approval":
        why = "waiting for release: the repository's policy needs an approver or an admin to approve it"
        await ctx.db.append_event(
            ctx.scope("job", ns, job["metadata"]["name"]),
            "job_state",
            {"state": "awaiting_approval", "from": st.state, "message": why},
        )
        await patch_status(
            kube,
            "jobs",
            job,
            {
                "state": move(JOB, st.state, "awaiting_approval"),
                "reason": "AwaitingRelease",
                "message": why,
                "policy": policy,
                "timeline": timeline(st, "awaiting_approval", why),
            },
        )
    return True
