"""A delivering job's work after the agent: verification in the attempt's sandbox, repair turns, and the
delivery of the best attempt (a pushed branch, then a pull request through the forge's API).

The driver runs the commands (``verify``, ``deliver``: hangar_driver/repo.py) and answers them with
``command_result`` events; the Job controller hands those to :meth:`JobWork.verified` and
:meth:`JobWork.pushed`. Every step is recorded on the Job's status before the next starts:

- verification: ``attempts[i].verifications`` gets ``{turn, command_id}`` when the command is sent, and its
  result when it comes (a result is applied once: by command id);
- delivery: ``status.delivery`` is ``pushing`` (the command id) → ``pushed`` (head commit) → ``done`` (the
  PR). After an operator restart, ``pushing`` sends the same command id again (the driver runs an id once
  and answers it again), ``pushed`` looks the PR up by its head branch before creating one: exactly one PR.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hangar.forge import ForgeError, GitHub, ensure_comment, ensure_pull, foreign_repository, repo_slug
from hangar.kube import Obj
from hangar.models import Session, Turn
from hangar.models.environment import EnvironmentSpec, Repository
from hangar.models.job import Attempt, Delivery, JobSpec, JobStatus, Verification, default_branch
from hangar.turns import create_turn

from .context import Context, resource
from .job_rules import OUTPUT_TAIL, REPAIRED_BY, pr_body, pr_title, repair_message, verification_step

log = logging.getLogger("hangar.operator.jobs")
RESEND_SECONDS = 30.0
FORGE_TRIES = 5  # a forge answering 5xx (or not at all) is tried again on the job's timer, then it fails


@dataclass(frozen=True)
class Failure:
    reason: str
    message: str


def delivers(spec: JobSpec, env: EnvironmentSpec | None) -> bool:
    return spec.deliver != "none" and env is not None and env.repository is not None


def job_branch(name: str, spec: JobSpec) -> str:
    return spec.branch or default_branch(name)


def base_branch(spec: JobSpec, repo: Repository) -> str:
    # JobSpec.base_branch defaults to "main": it counts only when the job named its repository too.
    return spec.base_branch if spec.repository else repo.base_branch


class JobWork:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.sent: dict[str, float] = {}  # command id → when this process last sent it

    # ------------------------------------------------------------ credentials and the forge

    async def token(self, ns: str, repo: Repository) -> str | None:
        if not repo.credentials_secret:
            return None
        secret = await self.ctx.kube_in(ns).get_core("secrets", repo.credentials_secret)
        data = (secret or {}).get("data") or {}
        raw = data.get("token") or data.get("password")
        return base64.b64decode(raw).decode().strip() if raw else None

    def forge(self, repo: Repository, token: str) -> GitHub:
        return GitHub(repo.api_url, token)

    async def preflight(
        self, ns: str, name: str, spec: JobSpec, env: EnvironmentSpec | None
    ) -> Failure | None:
        """Before any attempt runs: the repository is the Environment's, it has credentials, the forge knows
        it and the job's branch is not there yet. Refused here, nothing has run and nothing is half-done."""
        repo = env.repository if env is not None else None
        foreign = foreign_repository(spec.repository, spec.environment, repo.url if repo else None)
        if foreign is not None:
            return Failure("UnknownRepository", foreign)
        if repo is None or spec.deliver == "none":
            return None
        token = await self.token(ns, repo)
        if token is None:
            where = (
                f"Secret {repo.credentials_secret!r}" if repo.credentials_secret else "no credentialsSecret"
            )
            return Failure(
                "NoCredentials",
                f"the repository {repo.url} has no credentials to push with ({where} with a token): "
                "give the Environment's repository a credentialsSecret",
            )
        if repo.forge != "github":
            return None
        slug = repo.slug or repo_slug(repo.url)
        if slug is None:
            return Failure("UnknownRepository", f"can't tell owner/name from {repo.url}: set repository.slug")
        branch = job_branch(name, spec)
        async with self.forge(repo, token) as gh:
            try:
                await gh.repo(slug)
            except ForgeError as err:
                reason = "UnknownRepository" if err.status == 404 else "ForgeUnavailable"
                return Failure(reason, f"the forge doesn't give repository {slug}: {err}")
            try:
                exists = await gh.branch_exists(slug, branch)
            except ForgeError as err:
                return Failure("ForgeUnavailable", f"the forge could not say whether {branch} exists: {err}")
        if exists:
            return Failure(
                "BranchExists",
                f"branch {branch!r} already exists on {slug}: hangar doesn't deliver onto a branch it didn't "
                "make; name another with branch",
            )
        return None

    # ------------------------------------------------------------ verification

    async def advance(
        self,
        ns: str,
        name: str,
        attempts: list[Attempt],
        sessions: dict[str, Obj],
        turns_by_session: dict[str, list[Obj]],
        env: EnvironmentSpec,
    ) -> bool:
        """Each attempt whose agent finished: verify, repair or settle (its ``state`` is rewritten). True when
        a verification was sent (the status must record it)."""
        changed = False
        spec = env.verification
        for a in attempts:
            if a.state != "done" or a.session is None or a.last_turn is None:
                continue
            turns = turns_by_session.get(a.session, [])
            repairs = [t for t in turns if Turn.model_validate(t).spec.by == REPAIRED_BY]
            a.repairs = [t["metadata"]["name"] for t in repairs]
            step = verification_step(a, a.last_turn, spec, len(repairs))
            a.state = step.state
            if step.outcome:
                a.outcome = step.outcome
            a.verified = True if step.state == "verified" else (False if step.state == "failed" else None)
            if step.action == "verify" and spec is not None:
                cid = f"verify-{a.last_turn}"
                a.verifications.append(Verification(turn=a.last_turn, command_id=cid))
                changed = True
            if step.action == "repair" and spec is not None:
                failed = [v for v in a.verifications if v.turn == a.last_turn][-1]
                turn = await create_turn(
                    self.ctx.kube_in(ns), a.session, repair_message(spec.command, failed), by=REPAIRED_BY
                )
                a.repairs.append(turn)
                log.info("job %s: attempt %d failed verification: repair turn %s", name, a.index, turn)
            pending = [v for v in a.verifications if v.turn == a.last_turn and v.passed is None]
            if pending and spec is not None:
                await self._send(
                    ns,
                    sessions.get(a.session),
                    "verify",
                    {"command": spec.command, "timeout_seconds": spec.timeout_seconds},
                    pending[-1].command_id,
                )
        return changed

    @staticmethod
    def verified(attempts: list[Attempt], p: dict[str, Any]) -> Verification | None:
        """The driver's answer to ``verify``, applied to the attempt it belongs to (once)."""
        cid = str(p.get("command_id") or "")
        for a in attempts:
            for v in a.verifications:
                if v.command_id == cid and v.passed is None:
                    v.at = datetime.now(UTC)
                    if not p.get("ok"):
                        v.passed, v.error = False, f"the verification could not run: {p.get('error')}"
                    else:
                        v.passed = bool(p.get("passed"))
                        v.exit_code = p.get("exit_code") if isinstance(p.get("exit_code"), int) else None
                        v.timed_out = bool(p.get("timed_out"))
                        v.output_tail = str(p.get("output") or "")[-OUTPUT_TAIL:]
                        if isinstance(p.get("diff_lines"), int):
                            a.diff_lines = p["diff_lines"]
                    return v
        return None

    async def _send(self, ns: str, s_obj: Obj | None, op: str, body: dict[str, Any], cid: str) -> None:
        """Send ``op`` to the attempt's sandbox, again after RESEND_SECONDS (the driver runs an id once and
        answers a repeat with its first result), or not yet when its sandbox isn't connected."""
        if s_obj is None:
            return
        st = Session.model_validate(s_obj).status
        run = self.ctx.run_of(ns, st.sandbox.run)
        if run is None or not st.sandbox.connected:
            return
        now = time.monotonic()
        if now - self.sent.get(cid, -RESEND_SECONDS) < RESEND_SECONDS:
            return
        self.sent[cid] = now
        await self.ctx.gateway.send(run.id, op, body, command_id=cid)

    # ------------------------------------------------------------ delivery

    async def deliver(
        self,
        ns: str,
        name: str,
        spec: JobSpec,
        st: JobStatus,
        env: EnvironmentSpec,
        winner: Attempt,
        sessions: dict[str, Obj],
        summary: str,
        attempts: int,
    ) -> Delivery | Failure:
        """One step of delivering ``winner``: push (through its driver), then the pull request."""
        repo = env.repository
        assert repo is not None
        d = st.delivery.model_copy(deep=True) if st.delivery is not None else None
        if d is None or d.attempt != winner.index or d.turn != winner.last_turn:
            # The first delivery, or a follow-up's: the same branch and PR, moved on from the head delivered.
            d = Delivery(
                attempt=winner.index,
                turn=winner.last_turn,
                lease=d.head if d is not None else None,
                command_id=f"deliver-{winner.session}-{winner.last_turn}",
                branch=d.branch if d is not None else job_branch(name, spec),
                base_branch=d.base_branch if d is not None else base_branch(spec, repo),
                pr_number=d.pr_number if d is not None else None,
                pr_url=d.pr_url if d is not None else None,
            )
        if d.stage == "pushing":
            message = f"{pr_title(spec.prompt)}\n\nhangar job {name}, attempt {winner.index}"
            body: dict[str, Any] = {"push": True, "branch": d.branch, "message": message}
            if d.lease:
                body["lease"] = d.lease
            await self._send(ns, sessions.get(winner.session or ""), "deliver", body, d.command_id)
            return d
        if d.stage == "pushed":
            if spec.deliver != "pr" or repo.forge != "github":
                d.stage = "done"
                return d
            return await self._pull_request(ns, name, spec, st, env, repo, winner, d, summary, attempts)
        return d

    async def _pull_request(
        self,
        ns: str,
        name: str,
        spec: JobSpec,
        st: JobStatus,
        env: EnvironmentSpec,
        repo: Repository,
        winner: Attempt,
        d: Delivery,
        summary: str,
        attempts: int,
    ) -> Delivery | Failure:
        token = await self.token(ns, repo)
        slug = repo.slug or repo_slug(repo.url)
        if token is None or slug is None:
            return Failure("NoCredentials", f"no token to open the pull request on {repo.url} with")
        verification = next((v for v in reversed(winner.verifications) if v.passed), None)
        body = pr_body(
            job=name,
            prompt=spec.prompt,
            summary=summary,
            verification=verification,
            command=env.verification.command if env.verification else None,
            tainted=st.taint.tainted,
            taint_reasons=st.taint.reasons,
            cost_usd=st.cost_usd,
            attempt=winner.index,
            attempts=attempts,
        )
        try:
            async with self.forge(repo, token) as gh:
                pr, created = await ensure_pull(
                    gh, slug, d.branch, d.base_branch, pr_title(spec.prompt), body
                )
                if d.lease and not created:
                    # A follow-up's push: the PR shows the new head; its body and a comment say what changed.
                    await gh.update_pull(slug, pr.number, body=body)
                    # Once per pushed head: a restart after posting but before recording finds it.
                    await ensure_comment(
                        gh,
                        slug,
                        pr.number,
                        f"follow-up {name} {d.head or d.turn}",
                        f"hangar pushed {(d.head or '')[:12]} to `{d.branch}` after a follow-up "
                        f"(turn `{d.turn}`); verification passed.",
                    )
        except ForgeError as err:
            d.tries += 1
            d.last_error = str(err)
            if err.status in (0, 429) or err.status >= 500:
                if d.tries < FORGE_TRIES:
                    log.warning(
                        "job %s: the forge failed (%s); trying again", name, err, extra=resource(ns, name)
                    )
                    return d
            return Failure(
                "PullRequestFailed",
                f"branch {d.branch} is pushed at {(d.head or '')[:12]}, but the forge refused the pull request: "
                f"{err}",
            )
        log.info(
            "job %s: pull request #%d %s (%s)",
            name,
            pr.number,
            "opened" if created else "found",
            pr.url,
            extra=resource(ns, name),
        )
        d.pr_number, d.pr_url, d.stage, d.last_error = pr.number, pr.url, "done", None
        return d

    @staticmethod
    def pushed(d: Delivery, p: dict[str, Any]) -> Delivery | Failure:
        """The driver's answer to ``deliver``: the branch is on the remote at ``head``, or why not."""
        if not p.get("ok"):
            error = str(p.get("error") or "unknown error")
            reason = "BranchExists" if "already exists" in error else "PushFailed"
            return Failure(reason, f"delivering the work failed: {error}")
        d = d.model_copy(update={"stage": "pushed", "head": p.get("head"), "base": p.get("base")})
        return d
