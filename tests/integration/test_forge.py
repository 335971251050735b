"""hangar's forge client against the GitHub simulator (a real HTTP server on 127.0.0.1, with the git server
holding the branches): the pull request is found by its head branch before one is made, so a delivery
repeated after the operator died mid-request opens exactly one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.forge import ForgeError, GitHub, comment_marker, ensure_comment, ensure_pull, repo_slug
from hangar.testing.git_server import GitServer
from hangar.testing.github import GitHubSimulator


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[GitHubSimulator]:
    with GitServer(tmp_path / "git") as git:
        git.create("acme/app")
        bare = git.path("acme/app")
        import subprocess

        subprocess.run(["git", "-C", str(bare), "branch", "hangar/j1", "main"], check=True)
        s = GitHubSimulator(token="gh-token", git=git).start()
        s.add_repo("acme/app")
        yield s
        if s.hold_creates is not None:
            s.hold_creates.set()
        s.stop()


def test_repo_slug() -> None:
    assert repo_slug("https://github.com/acme/app.git") == "acme/app"
    assert repo_slug("http://127.0.0.1:9/acme/app") == "acme/app"
    assert repo_slug("https://github.com/acme") is None


def test_a_pull_request_is_made_once_even_when_its_answer_is_lost(sim: GitHubSimulator) -> None:
    async def go() -> None:
        sim.hold_creates = threading.Event()
        async with GitHub(sim.url, "gh-token") as gh:
            # The operator dies while GitHub is creating the PR: the request is cut off before its answer.
            task = asyncio.create_task(ensure_pull(gh, "acme/app", "hangar/j1", "main", "Fix it", "body"))
            while not sim.sent("POST", "/pulls"):
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        sim.hold_creates.set()
        sim.hold_creates = None
        # The next operator delivers again: it finds the PR instead of opening a second.
        async with GitHub(sim.url, "gh-token") as gh:
            pr, created = await ensure_pull(gh, "acme/app", "hangar/j1", "main", "Fix it", "body")
        assert not created and pr.number == 1 and pr.url.endswith("/acme/app/pull/1")
        assert len(sim.open_pulls("acme/app")) == 1 and len(sim.sent("POST", "/pulls")) == 1
        assert pr.head_sha == sim.git.branch_head("acme/app", "hangar/j1") if sim.git else False

    asyncio.run(go())


def test_the_forge_answers_are_errors_with_their_status(sim: GitHubSimulator) -> None:
    async def go() -> None:
        async with GitHub(sim.url, "wrong") as gh:
            with pytest.raises(ForgeError) as bad:
                await gh.repo("acme/app")
            assert bad.value.status == 401 and "Bad credentials" in str(bad.value)
        async with GitHub(sim.url, "gh-token") as gh:
            with pytest.raises(ForgeError) as unknown:
                await gh.repo("acme/nope")
            assert unknown.value.status == 404
            sim.fail("POST", "/pulls", 500)
            with pytest.raises(ForgeError) as down:
                await ensure_pull(gh, "acme/app", "hangar/j1", "main", "t", "b")
            assert down.value.status == 500
            with pytest.raises(ForgeError) as refused:
                await ensure_pull(gh, "acme/app", "no-such-branch", "main", "t", "b")
            assert refused.value.status == 422
            assert sim.open_pulls("acme/app") == [], "nothing was opened"
            assert await gh.branch_exists("acme/app", "hangar/j1")
            assert not await gh.branch_exists("acme/app", "hangar/j2")
            pr, created = await ensure_pull(gh, "acme/app", "hangar/j1", "main", "t", "b")
            assert created
            updated = await gh.update_pull("acme/app", pr.number, body="new body")
            assert updated.body == "new body"
            await gh.comment("acme/app", pr.number, "pushed again")
        assert sim.comments[("acme/app", pr.number)][0]["body"] == "pushed again"
        assert all(r.path.startswith("/repos/") for r in sim.requests)

    asyncio.run(go())


def test_a_follow_up_comment_is_posted_once_even_when_its_answer_is_lost(sim: GitHubSimulator) -> None:
    """The operator posts a follow-up's comment and dies before recording it (the answer never reaches it);
    the next operator replays the step and finds the comment by its marker, behind more than a page of
    others, instead of posting it again."""
    key, text = "follow-up j1 0123456789abcdef", "hangar pushed 0123456789ab to `hangar/j1` after a follow-up"

    async def go() -> None:
        async with GitHub(sim.url, "gh-token") as gh:
            pr, _ = await ensure_pull(gh, "acme/app", "hangar/j1", "main", "Fix it", "body")
            for i in range(150):  # people's comments first: the marker is found past the first page of 100
                await gh.comment("acme/app", pr.number, f"comment {i}")
            assert await ensure_comment(gh, "acme/app", pr.number, "follow-up j1 earlier", "an earlier one")
            sim.hold_comments = threading.Event()
            task = asyncio.create_task(ensure_comment(gh, "acme/app", pr.number, key, text))
            while len(sim.sent("POST", "/comments")) < 152:
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        sim.hold_comments.set()
        sim.hold_comments = None
        async with GitHub(sim.url, "gh-token") as gh:
            posted = await ensure_comment(gh, "acme/app", pr.number, key, text)
            again = await ensure_comment(gh, "acme/app", pr.number, key, text)
            other = await ensure_comment(gh, "acme/app", pr.number, "follow-up j1 fedcba", "the next head")
        assert (posted, again, other) == (False, False, True)
        bodies = [c["body"] for c in sim.comments[("acme/app", pr.number)]]
        ours = [b for b in bodies if comment_marker(key) in b]
        assert ours == [f"{text}\n\n{comment_marker(key)}"], "exactly one comment for the follow-up"
        assert len(bodies) == 153
        pages = [r for r in sim.sent("GET", "/comments")]
        assert len(pages) >= 4, "the listing was read page by page"

    asyncio.run(go())
