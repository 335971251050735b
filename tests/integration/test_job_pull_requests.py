"""The operator's pull-request step of a delivery (``JobWork._pull_request``) against the GitHub simulator (a
real HTTP server, with the git server holding the branch) on the operator rig: a follow-up's comment is posted
once even when the step is replayed after a restart (posted, not yet recorded), and a forge that refuses the
pull request (422) or keeps failing (5xx) fails the job with a clear reason and opens nothing."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hangar.forge import comment_marker
from hangar.models.environment import EnvironmentSpec
from hangar.models.job import Attempt, Delivery, JobSpec, JobStatus
from hangar.testing.git_server import GitServer
from hangar.testing.github import GitHubSimulator
from hangar_operator.job_work import FORGE_TRIES, Failure, JobWork
from tests.unit.operator_rig import Rig, make_rig

SLUG, TOKEN = "acme/app", "gh-token"


@dataclass
class Forge:
    rig: Rig
    git: GitServer
    sim: GitHubSimulator
    env: EnvironmentSpec

    async def step(self, d: Delivery) -> Delivery | Failure:
        """The pull-request step as the Job controller takes it for a delivery at stage ``pushed``."""
        repo = self.env.repository
        assert repo is not None
        spec = JobSpec.model_validate(
            {"submitter": "alice", "prompt": "Fix it\n\nplease", "environment": "e"}
        )
        winner = Attempt(index=1, session="j1-a1", last_turn=d.turn)
        work = JobWork(self.rig.ctx)
        return await work._pull_request(
            "default", "j1", spec, JobStatus(), self.env, repo, winner, d, "fixed it", 1
        )


@pytest.fixture
async def forge(tmp_path: Path) -> AsyncIterator[Forge]:
    rig = await make_rig(tmp_path, approvals=None)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "acme-repo"},
        "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
    }
    assert await rig.kube.create_core("secrets", secret)
    with GitServer(tmp_path / "git") as git:
        git.create(SLUG)
        subprocess.run(["git", "-C", str(git.path(SLUG)), "branch", "hangar/j1", "main"], check=True)
        sim = GitHubSimulator(token=TOKEN, git=git).start()
        sim.add_repo(SLUG)
        repository = {"url": git.url(SLUG), "credentialsSecret": "acme-repo", "apiUrl": sim.url}
        env = EnvironmentSpec.model_validate({"image": "i", "repository": repository})
        try:
            yield Forge(rig, git, sim, env)
        finally:
            sim.stop()  # the rig is closed after the test (tests/conftest.py)


def pushed(head: str, **over: object) -> Delivery:
    base = {"attempt": 1, "stage": "pushed", "turn": "j1-a1-1", "branch": "hangar/j1", "base_branch": "main"}
    return Delivery.model_validate({**base, "head": head, **over})


async def test_a_follow_ups_comment_is_posted_once_when_the_step_is_replayed(forge: Forge) -> None:
    head = forge.git.branch_head(SLUG, "hangar/j1")
    assert head
    first = await forge.step(pushed(head))
    assert isinstance(first, Delivery) and first.stage == "done" and first.pr_number == 1
    assert forge.sim.comments.get((SLUG, 1), []) == [], "a first delivery makes no comment"
    # A follow-up's push moved the branch on from the head delivered before (its lease).
    follow = pushed("f" * 40, turn="j1-a1-3", lease=head, pr_number=1, pr_url=first.pr_url)
    done = await forge.step(follow)
    assert isinstance(done, Delivery) and done.stage == "done"
    # The operator died after posting, before recording `done`: the next one replays the same step.
    again = await forge.step(follow)
    assert isinstance(again, Delivery) and again.stage == "done" and again.pr_number == 1
    [comment] = forge.sim.comments[(SLUG, 1)]
    assert comment["body"].startswith("hangar pushed ffffffffffff to `hangar/j1` after a follow-up")
    assert comment_marker(f"follow-up j1 {'f' * 40}") in comment["body"]
    assert len(forge.sim.sent("POST", "/comments")) == 1 and len(forge.sim.sent("POST", "/pulls")) == 1
    # A later follow-up is a new head: its own comment.
    later = await forge.step(pushed("e" * 40, turn="j1-a1-5", lease="f" * 40, pr_number=1))
    assert isinstance(later, Delivery) and len(forge.sim.comments[(SLUG, 1)]) == 2


async def test_a_forge_that_refuses_or_keeps_failing_fails_the_job_and_opens_nothing(forge: Forge) -> None:
    head = forge.git.branch_head(SLUG, "hangar/j1")
    assert head
    forge.sim.fail("POST", "/pulls", 422)
    refused = await forge.step(pushed(head))
    assert isinstance(refused, Failure) and refused.reason == "PullRequestFailed", refused
    assert "the forge refused the pull request" in refused.message and "answered 422" in refused.message
    # A 5xx is tried again on the job's timer, FORGE_TRIES times in all, then the job fails.
    d = pushed(head)
    for i in range(FORGE_TRIES):
        forge.sim.fail("POST", "/pulls", 500)
        out = await forge.step(d)
        if i < FORGE_TRIES - 1:
            assert isinstance(out, Delivery) and out.stage == "pushed" and out.tries == i + 1, out
            assert out.last_error and "answered 500" in out.last_error
            d = out
        else:
            assert isinstance(out, Failure) and out.reason == "PullRequestFailed", out
    assert forge.sim.open_pulls(SLUG) == [], "no pull request was opened"
