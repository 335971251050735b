"""The driver's repository work against a real git server (smart HTTP, credentials checked): the checkout it
gives the agent, the verification it runs as the agent, and the push it makes without the agent's config."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.testing.git_server import GitServer
from hangar_driver.commands import CommandError
from hangar_driver.repo import Repo, deliver, verify, work_patch

AGENT = 1001
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the uid split needs root")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory the agent's uid can reach (pytest's own are root-only)."""
    d = Path(tempfile.mkdtemp(prefix="hangar-repo-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def git(tmp_path: Path) -> Iterator[GitServer]:
    with GitServer(tmp_path / "git", {"hangar": "s3cret"}) as server:
        server.create("acme/app", {"README.md": "hello\n", "check.sh": "test -f fixed.txt\n"})
        yield server


def creds(tmp_path: Path, token: str = "s3cret") -> Path:
    d = tmp_path / "creds"
    d.mkdir(exist_ok=True)
    (d / "username").write_text("hangar")
    (d / "token").write_text(token)
    for f in d.iterdir():
        os.chmod(f, 0o400)
    return d


def repo(tmp_path: Path, git: GitServer, **over: str) -> Repo:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    env = {
        "HANGAR_REPO_URL": git.url("acme/app"),
        "HANGAR_REPO_BASE": "main",
        "HANGAR_REPO_BRANCH": "hangar/job-1",
        "HANGAR_REPO_CREDENTIALS_DIR": str(creds(tmp_path)),
        "PATH": os.environ["PATH"],
        **over,
    }
    return Repo(env, str(ws), str(tmp_path / "state"), "job-1-a1-r1")


def as_agent(ws: str, *argv: str) -> str:
    def drop() -> None:
        os.setgroups([])
        os.setgid(AGENT)
        os.setuid(AGENT)

    env = {"PATH": os.environ["PATH"], "HOME": ws}
    return subprocess.run(
        argv, cwd=ws, env=env, preexec_fn=drop, capture_output=True, text=True, check=True
    ).stdout


AGENT_ENV = {"PATH": os.environ["PATH"], "HOME": "/tmp"}


@root_only
def test_checkout_verify_and_push(tmp_path: Path, git: GitServer) -> None:
    r = repo(tmp_path, git)
    base = r.checkout(AGENT, AGENT)
    assert base == git.branch_head("acme/app", "main")
    ws = Path(r.workspace)
    assert (ws / "README.md").read_text() == "hello\n" and (ws / "README.md").stat().st_uid == AGENT
    assert as_agent(r.workspace, "git", "branch", "--show-current").strip() == "hangar/job-1"
    # The clone's remote holds no credential, and the agent can't read the credentials.
    assert "s3cret" not in (ws / ".git" / "config").read_text()
    with pytest.raises(subprocess.CalledProcessError):
        as_agent(r.workspace, "cat", str(tmp_path / "creds" / "token"))
    assert r.checkout(AGENT, AGENT) is None, "a workspace that is a checkout is left as it is"

    failing = verify(r, {"command": "sh check.sh"}, AGENT_ENV, AGENT, AGENT)
    assert failing["passed"] is False and failing["exit_code"] == 1
    # The agent commits its work; a hook it planted must not run when hangar pushes.
    as_agent(r.workspace, "sh", "-c", "echo ok > fixed.txt && git add fixed.txt && git commit -qm 'fix it'")
    hook = ws / ".git" / "hooks" / "pre-push"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path}/hook-ran\n")
    os.chmod(hook, 0o755)
    (ws / "extra.txt").write_text("left uncommitted\n")
    passing = verify(r, {"command": "sh check.sh"}, AGENT_ENV, AGENT, AGENT)
    assert passing["passed"] is True and passing["diff_lines"] == 2
    assert passing["base"] == base and "+ok" in passing["patch"] and "+left uncommitted" in passing["patch"]

    out = deliver(r, {"push": True, "branch": "hangar/job-1", "message": "the work"}, AGENT_ENV, AGENT, AGENT)
    assert out["pushed"] and not out["already"]
    assert git.branch_head("acme/app", "hangar/job-1") == out["head"]
    assert git.log("acme/app", "hangar/job-1")[:2] == ["the work", "fix it"]
    assert git.show("acme/app", "hangar/job-1", "extra.txt") == "left uncommitted\n"
    assert not (tmp_path / "hook-ran").exists()
    assert "+ok" in out["patch"] and out["base"] == base
    # The patch applies to the base branch.
    clone = tmp_path / "check"
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "fetch", "-q", str(git.path("acme/app")), "main"], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "FETCH_HEAD"], check=True)
    subprocess.run(["git", "-C", str(clone), "apply"], input=out["patch"], text=True, check=True)
    assert (clone / "fixed.txt").read_text() == "ok\n"

    again = deliver(r, {"push": True, "branch": "hangar/job-1"}, AGENT_ENV, AGENT, AGENT)
    assert again["already"] and again["head"] == out["head"], "a repeated push changes nothing"


@root_only
def test_an_existing_branch_is_not_overwritten(tmp_path: Path, git: GitServer) -> None:
    r = repo(tmp_path, git)
    r.checkout(AGENT, AGENT)
    as_agent(r.workspace, "sh", "-c", "echo x > a.txt && git add a.txt && git commit -qm a")
    before = git.branch_head("acme/app", "main")
    with pytest.raises(CommandError, match="branch main already exists on the remote"):
        deliver(r, {"push": True, "branch": "main"}, AGENT_ENV, AGENT, AGENT)
    assert git.branch_head("acme/app", "main") == before


@root_only
def test_bad_credentials_and_an_unknown_repository_fail_the_checkout(tmp_path: Path, git: GitServer) -> None:
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "token").write_text("wrong")
    bad = repo(tmp_path, git)
    (tmp_path / "creds" / "token").chmod(0o600)
    (tmp_path / "creds" / "token").write_text("wrong")
    with pytest.raises(CommandError, match=r"checkout of .* failed"):
        bad.checkout(AGENT, AGENT)
    unknown = repo(tmp_path, git, HANGAR_REPO_URL=git.url("acme/nope"))
    (tmp_path / "creds" / "token").write_text("s3cret")
    with pytest.raises(CommandError, match=r"checkout of .*acme/nope\.git"):
        unknown.checkout(AGENT, AGENT)
    assert not os.listdir(unknown.workspace), "nothing half-cloned is left"


def apply_to_main(tmp_path: Path, git: GitServer, patch: str) -> Path:
    clone = tmp_path / "applied"
    subprocess.run(
        ["git", "clone", "-q", "--branch", "main", str(git.path("acme/app")), str(clone)], check=True
    )
    subprocess.run(["git", "-C", str(clone), "apply"], input=patch, text=True, check=True)
    return clone


@root_only
def test_a_sessions_work_as_a_patch_leaves_its_index_and_commits_alone(
    tmp_path: Path, git: GitServer
) -> None:
    r = repo(tmp_path, git)
    base = r.checkout(AGENT, AGENT)
    ws = Path(r.workspace)
    # Committed, staged, untracked, deleted and ignored work, all at once.
    as_agent(
        r.workspace,
        "sh",
        "-c",
        "echo more >> README.md && git commit -qam 'readme' && echo s > staged.txt && git add staged.txt "
        "&& echo n > new.txt && rm check.sh && echo build > .gitignore && mkdir build && echo x > build/out",
    )
    before = [as_agent(r.workspace, "git", *a) for a in (["status", "--porcelain"], ["rev-parse", "HEAD"])]
    staged = as_agent(r.workspace, "git", "diff", "--cached", "--name-only")
    p = work_patch(r, AGENT_ENV, AGENT, AGENT)
    assert p is not None
    after = [as_agent(r.workspace, "git", *a) for a in (["status", "--porcelain"], ["rev-parse", "HEAD"])]
    assert after == before and as_agent(r.workspace, "git", "diff", "--cached", "--name-only") == staged
    assert not [f for f in os.listdir(ws / ".git") if f.startswith("hangar-patch")], "its index is removed"
    assert p["base"] == base and p["head"] == before[1].strip() and not p["patch_truncated"]
    assert p["files_changed"] == 5, p  # README.md, staged.txt, new.txt, check.sh, .gitignore
    clone = apply_to_main(tmp_path, git, p["patch"])
    assert (clone / "README.md").read_text() == "hello\nmore\n"
    assert (clone / "staged.txt").read_text() == "s\n" and (clone / "new.txt").read_text() == "n\n"
    assert not (clone / "check.sh").exists() and not (clone / "build").exists(), "ignored files stay out"
    # A workspace that is not a checkout has no base: no patch.
    plain = Repo({"PATH": os.environ["PATH"]}, str(tmp_path / "plain"), str(tmp_path / "state2"))
    (tmp_path / "plain").mkdir()
    assert work_patch(plain, AGENT_ENV, AGENT, AGENT) is None
