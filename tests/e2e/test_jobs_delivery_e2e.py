"""Jobs that deliver, end to end: a job submitted over REST runs Claude Code in a sandbox whose workspace is a
checkout of a repository on a real git server (smart HTTP, credentials checked); the Environment's
verification command runs after the agent, a failure gets a repair turn, and the verified branch is pushed
and its pull request opened on the GitHub simulator, through the same client hangar uses for github.com."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextResourceContents

from hangar.devcluster.stack import Stack
from hangar.testing.git_server import GitServer
from hangar.testing.github import GitHubSimulator
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, model_env, new_session, wait
from .test_jobs_e2e import JOBS, QUESTION, SLOW, As, _delete_jobs, submit, tool_running, wait_state
from .test_mcp_e2e import MODERN, connect, data, read_json, refused

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]
__all__ = ["_delete_jobs"]  # its autouse fixture deletes this module's jobs too

TOKEN = "forge-and-git-token"
SLUG = "acme/app"
CHECK = "grep -q ok fixed.txt"


@pytest.fixture(scope="module")
def forge(cluster: Cluster) -> Iterator[tuple[GitServer, GitHubSimulator]]:
    root = Path(tempfile.mkdtemp(prefix="hangar-git-", dir="/tmp"))
    git = GitServer(root, {"hangar-bot": TOKEN}).start()
    sim = GitHubSimulator(token=TOKEN, git=git).start()
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "acme-repo"},
        "stringData": {"username": "hangar-bot", "token": TOKEN},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    try:
        yield git, sim
    finally:
        sim.stop()
        git.stop()
        shutil.rmtree(root, ignore_errors=True)


def repo_env(
    cluster: Cluster, name: str, model: ScriptedModel, git: GitServer, sim: GitHubSimulator, **over: Any
) -> None:
    repository = {
        "url": git.url(SLUG),
        "baseBranch": "main",
        "credentialsSecret": "acme-repo",
        "apiUrl": sim.url,
        **over.pop("repository", {}),
    }
    environment(
        cluster,
        name,
        {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        repository=repository,
        verification={"command": CHECK, "repairTurns": 1, "timeoutSeconds": 60},
        **over,
    )


def fresh_repo(git: GitServer, sim: GitHubSimulator) -> None:
    git.remove(SLUG)
    git.create(SLUG, {"README.md": "# app\n", "fixed.txt": "not yet\n"})
    sim.add_repo(SLUG)
    sim.pulls[SLUG] = []
    sim.requests.clear()
    git.requests.clear()


def test_a_job_goes_from_prompt_to_an_open_pull_request(
    cluster: Cluster, stack: Stack, model: ScriptedModel, forge: tuple[GitServer, GitHubSimulator]
) -> None:
    git, sim = forge
    fresh_repo(git, sim)
    model.add(
        # The first try commits something that fails the check; the repair turn (with the failure) fixes it.
        Step(
            when="Make the check pass",
            text="Trying.",
            command="echo nearly > fixed.txt && git commit -qam 'agent: first try'",
        ),
        Step(when="tool_result", text="FINAL: tried."),
        Step(
            when="verification command",
            text="Fixing.",
            command="echo ok > fixed.txt && git commit -qam 'agent: fix'",
        ),
        Step(when="tool_result", text="FINAL: fixed fixed.txt so the check passes."),
    )
    repo_env(cluster, "deliver-env", model, git, sim)
    alice = As(stack, "alice")
    submit(
        alice,
        name="deliver-1",
        prompt="Make the check pass\n\nfixed.txt must say ok.",
        environment="deliver-env",
    )
    j = wait_state(alice, "deliver-1", "delivered", timeout=240)
    # The branch on the git server holds the agent's commits and passes the verification command.
    head = git.branch_head(SLUG, "hangar/deliver-1")
    assert head and j["head_commit"] == head
    assert git.log(SLUG, "hangar/deliver-1")[:2] == ["agent: fix", "agent: first try"]
    assert git.show(SLUG, "hangar/deliver-1", "fixed.txt") == "ok\n"
    assert git.branch_head(SLUG, "main") != head, "the base branch is untouched"
    # One pull request, opened with the job's title and body, head at that commit.
    pulls = sim.open_pulls(SLUG)
    assert len(pulls) == 1, pulls
    pr = pulls[0]
    assert (
        pr["title"] == "Make the check pass"
        and pr["head"]["ref"] == "hangar/deliver-1"
        and pr["base"]["ref"] == "main"
    )
    assert pr["head"]["sha"] == head and j["pr_url"] == pr["html_url"]
    assert (
        "Make the check pass" in pr["body"]
        and f"`{CHECK}` passed" in pr["body"]
        and "Taint: none." in pr["body"]
    )
    # The attempt failed verification once, got one repair turn, then passed.
    a = j["attempts"][0]
    assert [v["passed"] for v in a["verifications"]] == [False, True], a
    assert len(a["repairs"]) == 1 and a["state"] == "verified" and a["rank"] == 1
    assert j["verification"]["passed"] is True
    states = [e["state"] for e in j["timeline"]]
    assert states[-3:] == ["verifying", "delivering", "delivered"] and "running" in states, states
    assert all(e["at"] and e["by"] for e in j["timeline"])
    # The verification output is kept as the job's event; the work is a patch `git apply` takes.
    events = alice.get("/api/jobs/deliver-1/events").json()["events"]
    ver = [e for e in events if e["kind"] == "verification"]
    assert [e["passed"] for e in ver] == [False, True] and "exit 1" not in ver[1]["output"]
    r = alice.get("/api/jobs/deliver-1/patch")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/x-diff"), r.text
    assert r.headers["x-hangar-head"] == head and r.headers["x-hangar-source"] == "delivery"
    work = Path(tempfile.mkdtemp(prefix="hangar-apply-"))
    try:
        subprocess.run(["git", "clone", "-q", "-b", "main", str(git.path(SLUG)), str(work)], check=True)
        subprocess.run(["git", "-C", str(work), "apply"], input=r.text, text=True, check=True)
        assert (work / "fixed.txt").read_text() == "ok\n"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    admin = Api(stack)
    s = admin.get("/api/sessions/deliver-1-a1/patch")
    assert s.status_code == 200 and s.text == r.text, "the session's patch is the job's"
    # Over MCP, in both eras: the same patch as a text/x-diff resource, and the pull request on the job.
    for text, meta, pr_seen in asyncio.run(read_the_work(stack, "deliver-1")):
        assert text == r.text and meta["base"] and meta["head"] == head and meta["source"] == "delivery"
        assert pr_seen == {
            "url": pr["html_url"],
            "number": 1,
            "branch": "hangar/deliver-1",
            "head_commit": head,
        }
    assert As(stack, "bob").get("/api/jobs/deliver-1/patch").status_code == 404
    # A follow-up after delivery: the same conversation goes on, its work is verified and pushed to the same
    # branch, and the same pull request shows it (its body updated, a comment says what was pushed).
    model.add(
        Step(
            when="also add a note",
            text="Noting.",
            command="echo note > NOTE.md && git add NOTE.md && git commit -qm 'agent: note'",
        ),
        Step(when="tool_result", text="FINAL: added NOTE.md."),
    )
    r = alice.post("/api/jobs/deliver-1/follow_up", {"message": "also add a note in NOTE.md"})
    assert r.status_code == 202 and r.json()["sent_to"] == ["deliver-1-a1"], r.text
    wait(lambda: alice.job("deliver-1")["state"] != "delivered", 60, "the job to go on")
    j = wait_state(alice, "deliver-1", "delivered", timeout=180)
    new_head = git.branch_head(SLUG, "hangar/deliver-1")
    assert new_head != head and j["head_commit"] == new_head
    assert git.log(SLUG, "hangar/deliver-1")[:3] == ["agent: note", "agent: fix", "agent: first try"]
    [pr] = sim.open_pulls(SLUG)
    assert pr["number"] == 1 and pr["head"]["sha"] == new_head and len(sim.sent("POST", "/pulls")) == 1
    assert "added NOTE.md" in pr["body"]
    [comment] = sim.comments[(SLUG, 1)]
    assert new_head[:12] in comment["body"] and "deliver-1-a1-3" in comment["body"]
    moves = [(e["from"], e["state"], e["by"]) for e in j["timeline"]]
    assert ("delivered", "queued", "alice") in moves or ("delivered", "running", "alice") in moves, moves
    assert model.requests[-1].contains("Make the check pass"), "the same conversation"
    # The git server saw every request authenticated: the token works for both git and the API.
    assert all(user == "hangar-bot" for (_m, _p, user) in git.requests if user)
    assert all(r.method in ("GET", "POST", "PATCH") for r in sim.requests)


def test_bad_input_fails_the_job_before_anything_runs(
    cluster: Cluster, stack: Stack, model: ScriptedModel, forge: tuple[GitServer, GitHubSimulator]
) -> None:
    git, sim = forge
    fresh_repo(git, sim)
    repo_env(cluster, "deliver-bad-env", model, git, sim)
    repo_env(cluster, "deliver-nocreds-env", model, git, sim, repository={"credentialsSecret": None})
    repo_env(cluster, "deliver-unknown-env", model, git, sim, repository={"url": git.url("acme/nope")})
    alice = As(stack, "alice")
    cases = [
        ({"environment": "deliver-nocreds-env"}, "NoCredentials", "has no credentials to push with"),
        ({"environment": "deliver-unknown-env"}, "UnknownRepository", "doesn't give repository acme/nope"),
        (
            {"environment": "deliver-bad-env", "branch": "main"},
            "BranchExists",
            "branch 'main' already exists",
        ),
    ]
    for i, (body, _reason, _text) in enumerate(cases):
        submit(alice, name=f"deliver-bad-{i}", prompt="anything", **body)
    # A repository that isn't the Environment's: refused at submission over REST, failed by the operator when
    # the Job is applied with kubectl.
    foreign = {"prompt": "anything", "environment": "deliver-bad-env", "repository": "https://github.com/o/r"}
    r = alice.post("/api/jobs", foreign)
    assert r.status_code == 422 and "is not environment 'deliver-bad-env''s" in r.json()["detail"]
    manifest = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "deliver-bad-k"},
        "spec": {
            "submitter": "alice",
            "prompt": "anything",
            "environment": "deliver-bad-env",
            "repository": "https://github.com/o/r",
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    JOBS.append("deliver-bad-k")
    cases.append(({}, "UnknownRepository", "hangar has no credentials for it"))
    names = [f"deliver-bad-{i}" for i in range(len(cases) - 1)] + ["deliver-bad-k"]
    for name, (_body, reason, text) in zip(names, cases, strict=True):
        j = wait_state(alice, name, "failed", timeout=60)
        assert j["reason"] == reason and text in j["message"], j
        assert j["attempts"] == [] or all(a["session"] is None for a in j["attempts"]), "nothing ran"
    assert sim.open_pulls(SLUG) == [] and git.branches(SLUG) == ["main"], "nothing half-delivered"
    # A forge that answers 500 when asked for the repository: ForgeUnavailable, before anything runs. (After
    # the others: the simulator's failure goes to the next request for the repository, whichever job asks.)
    sim.fail("GET", f"/repos/{SLUG}", 500)
    submit(alice, name="deliver-bad-5xx", prompt="anything", environment="deliver-bad-env")
    j = wait_state(alice, "deliver-bad-5xx", "failed", timeout=60)
    assert j["reason"] == "ForgeUnavailable" and "answered 500" in j["message"], j
    assert j["attempts"] == [] or all(a["session"] is None for a in j["attempts"]), "nothing ran"
    assert sim.open_pulls(SLUG) == [] and git.branches(SLUG) == ["main"], "nothing half-delivered"


BEST_OF_3 = (
    'case "$PWD" in '
    "*-a1-workspace*) echo bad > fixed.txt ;; "
    "*-a2-workspace*) printf 'ok\\nand more\\nlines\\n' > fixed.txt ;; "
    "*) echo ok > fixed.txt ;; "
    "esac && git commit -qam 'agent: best of three'"
)


def test_best_of_three_delivers_the_best_once_across_operator_restarts(
    cluster: Cluster, stack: Stack, model: ScriptedModel, forge: tuple[GitServer, GitHubSimulator]
) -> None:
    git, sim = forge
    fresh_repo(git, sim)
    for _ in range(3):
        model.add(Step(when="Best of three", text="Working.", command=BEST_OF_3))
    for _ in range(3):
        model.add(Step(when="tool_result", text="FINAL: done."))
    repo_env(cluster, "deliver-bo3-env", model, git, sim)
    environment(  # no repair turn here: a failing verification fails its attempt at once
        cluster,
        "deliver-bo3-env",
        {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"},
        repository={"url": git.url(SLUG), "credentialsSecret": "acme-repo", "apiUrl": sim.url},
        verification={"command": CHECK, "repairTurns": 0},
    )
    git.hold_pushes, sim.hold_creates = threading.Event(), threading.Event()
    alice = As(stack, "alice")
    try:
        submit(
            alice,
            name="deliver-bo3",
            prompt="Best of three: fixed.txt must say ok",
            environment="deliver-bo3-env",
            attempts=3,
        )
        # The operator is stopped while the winner's push is on its way, and again while GitHub makes the PR.
        wait(
            lambda: any(p.endswith("git-receive-pack") and m == "POST" for (m, p, _u) in git.requests),
            240,
            "a push",
        )
        stack.stop("operator")
        git.hold_pushes.set()
        stack.start_operator()
        wait(lambda: sim.sent("POST", "/pulls"), 120, "the pull request's creation")
        stack.stop("operator")
        sim.hold_creates.set()
        stack.start_operator()
        j = wait_state(alice, "deliver-bo3", "delivered", timeout=120)
    finally:
        git.hold_pushes.set()
        sim.hold_creates.set()
        git.hold_pushes = sim.hold_creates = None
    assert len(sim.open_pulls(SLUG)) == 1 and len(sim.sent("POST", "/pulls")) == 1, "exactly one PR"
    a1, a2, a3 = j["attempts"]
    assert j["delivery"]["attempt"] == 3 and a3["rank"] == 1 and a3["lost"] is None
    assert a1["state"] == "failed" and a1["lost"].startswith("not delivered: verification failed (exit 1)")
    assert a2["rank"] == 2 and a2["state"] == "verified", a2
    assert (
        a2["lost"]
        == "attempt 3 was delivered: it passed verification with a smaller diff (2 lines against 4)"
    )
    head = git.branch_head(SLUG, "hangar/deliver-bo3")
    assert head == j["head_commit"] == sim.open_pulls(SLUG)[0]["head"]["sha"]
    assert git.show(SLUG, "hangar/deliver-bo3", "fixed.txt") == "ok\n"
    assert "attempt 3 of 3 (best-of-3)" in sim.open_pulls(SLUG)[0]["body"]


def test_a_job_that_needs_release_waits_for_an_approver(
    cluster: Cluster, stack: Stack, model: ScriptedModel, forge: tuple[GitServer, GitHubSimulator]
) -> None:
    git, sim = forge
    fresh_repo(git, sim)
    repo_env(
        cluster,
        "deliver-gated-env",
        model,
        git,
        sim,
        repository={"policy": {"requireApproval": True, "approvers": ["bob"]}},
    )
    alice, bob, mcp, admin = As(stack, "alice"), As(stack, "bob"), As(stack, "mcp-client"), Api(stack)
    submit(alice, name="deliver-gated", prompt="gated work", environment="deliver-gated-env")
    submit(alice, name="deliver-gated-2", prompt="more gated work", environment="deliver-gated-env")
    j = wait_state(alice, "deliver-gated", "awaiting_approval", timeout=60)
    assert (
        j["reason"] == "AwaitingRelease"
        and j["attempts"] == []
        and j["timeline"][-1]["state"] == "awaiting_approval"
    )
    r = alice.post("/api/jobs/deliver-gated/approve")
    assert r.status_code == 403 and r.json()["detail"] == (
        "alice submitted job 'deliver-gated': a job can't be released or rejected by its own submitter"
    )
    r = mcp.post("/api/jobs/deliver-gated/approve")
    assert r.status_code == 403 and r.json()["detail"] == (
        "mcp-client has an mcp-only token (hangar connect): releasing or rejecting a job needs a person's login token"
    )
    r = As(stack, "alice").post("/api/jobs/deliver-gated-2/reject", {"reason": "mine"})
    assert r.status_code == 403
    # bob, a policy approver, reads the job he is asked to release (REST and MCP) but may not act on it.
    assert bob.job("deliver-gated")["state"] == "awaiting_approval"
    assert bob.post("/api/jobs/deliver-gated/cancel").status_code == 404
    seen = asyncio.run(read_over_mcp(stack, stack.token_for("bob"), "hangar://jobs/deliver-gated"))
    assert seen["id"] == "deliver-gated" and seen["state"] == "awaiting_approval", seen
    connect_an_mcp_client(stack, "deliver-gated")
    assert wait_state(alice, "deliver-gated", "awaiting_approval")["attempts"] == [], "nothing ran"
    # Over MCP the same rule and texts: the mcp-only token is refused; bob's login token releases the job.
    r = asyncio.run(over_mcp(stack, "mcp-client", "approve_job", {"job_id": "deliver-gated"}))
    refused(r, "forbidden: mcp-client has an mcp-only token (hangar connect)")
    r = asyncio.run(over_mcp(stack, "alice", "reject_job", {"job_id": "deliver-gated"}))
    refused(r, "forbidden: alice submitted job 'deliver-gated'")
    r = asyncio.run(
        over_mcp(stack, "bob", "approve_job", {"job_id": "deliver-gated", "reason": "looks fine"})
    )
    assert data(r)["release"]["decision"] == "approved" and data(r)["release"]["by"] == "bob"
    r = bob.post("/api/jobs/deliver-gated/reject")
    assert r.status_code == 409 and r.json()["detail"] == "job 'deliver-gated' was already approved by bob"
    j = wait(lambda: (x := alice.job("deliver-gated"))["attempts"] and x, 60, "the attempts to start")
    assert j["attempts"][0]["session"] == "deliver-gated-a1"
    assert alice.post("/api/jobs/deliver-gated/cancel").status_code == 202
    # An admin may reject (or release) someone else's job; the job is cancelled without running.
    r = admin.post("/api/jobs/deliver-gated-2/reject", {"reason": "not now"})
    assert r.status_code == 200, r.text
    j = wait_state(alice, "deliver-gated-2", "cancelled", timeout=60)
    assert j["reason"] == "Rejected" and j["attempts"] == []
    last = j["timeline"][-1]
    assert last["state"] == "cancelled" and last["by"] == stack_admin(admin) and "not now" in last["why"]
    # A jobs token that is neither the submitter nor an approver isn't told the job exists.
    assert As(stack, "alice").post("/api/jobs/deliver-gated-2/approve").status_code in (403, 409)


async def read_the_work(stack: Stack, job: str) -> list[tuple[str, dict[str, Any], Any]]:
    """Each era's read of the first attempt's patch resource (text, its metadata) and the job's ``pr``."""
    seen = []
    for mode in (MODERN, "legacy"):
        async with connect(stack, mode=mode) as client:
            [c] = (await client.read_resource(f"hangar://sessions/{job}-a1/patch")).contents
            assert isinstance(c, TextResourceContents) and c.mime_type == "text/x-diff", c
            meta = (c.meta or {})["hangar.dev/patch"]
            seen.append((c.text, meta, (await read_json(client, f"hangar://jobs/{job}"))["pr"]))
    return seen


def cli(stack: Stack, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HANGAR_URL": stack.api_url, "HANGAR_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


@asynccontextmanager
async def mcp_client(stack: Stack, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with http, Client(streamable_http_client(f"{stack.api_url}/mcp", http_client=http)) as client:
        yield client


async def read_over_mcp(stack: Stack, token: str, uri: str) -> Any:
    async with mcp_client(stack, token) as client:
        return await read_json(client, uri)


async def call_with(stack: Stack, token: str, tool: str, args: dict[str, Any]) -> CallToolResult:
    async with mcp_client(stack, token) as client:
        return await client.call_tool(tool, args)


def connect_an_mcp_client(stack: Stack, job: str) -> None:
    """`hangar connect` through the real CLI: an admin mints an mcp-only token and gets a client config; the
    token works on /mcp, REST refuses it, approve_job refuses it with the shared text, and once revoked /mcp
    refuses it too. A jobs token may not mint one."""
    r = cli(stack, stack.token_for("alice"), "connect")
    assert r.returncode == 1 and r.stderr.strip() == (
        "error 403: alice has a jobs token: only an admin's login token may mint an mcp-only token "
        "(hangar connect), since it reaches every session and job over MCP"
    ), r.stdout + r.stderr
    r = cli(stack, stack.token, "connect", "--name", "e2e ide", "--days", "2")
    assert r.returncode == 0 and "mcp-only token tok-" in r.stdout and '"mcpServers"' in r.stdout, r.stderr
    r = cli(stack, stack.token, "connect", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    token, server = out["token"], out["mcpServers"]["hangar"]
    assert server == {
        "type": "http",
        "url": f"{stack.api_url}/mcp",
        "headers": {"Authorization": f"Bearer {token}"},
    }
    who = out["subject"]  # the admin who minted it
    # REST refuses it, naming why; the release routes with the release rule's text.
    r = httpx.get(f"{stack.api_url}/api/jobs/{job}", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and r.json()["detail"] == (
        f"{who} has an mcp-only token (hangar connect): it works on /mcp only; the REST routes take a "
        "person's login token (admin or jobs)"
    )
    r = httpx.post(f"{stack.api_url}/api/jobs/{job}/approve", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and r.json()["detail"] == (
        f"{who} has an mcp-only token (hangar connect): releasing or rejecting a job needs a person's login "
        "token"
    )
    # /mcp takes it: the job reads, and approve_job and reject_job refuse it with the same text.
    assert (
        data(asyncio.run(call_with(stack, token, "get_job", {"job_id": job})))["state"] == "awaiting_approval"
    )
    for tool in ("approve_job", "reject_job"):
        r_ = asyncio.run(call_with(stack, token, tool, {"job_id": job}))
        refused(r_, f"forbidden: {who} has an mcp-only token (hangar connect): releasing or rejecting a job")
    r = cli(stack, stack.token, "connect", "--revoke", out["id"])
    assert r.returncode == 0 and f"{out['id']} revoked at" in r.stdout, r.stderr
    r = cli(stack, stack.token, "connect", "--list")
    assert f"{out['id']}  mcp  {who}  revoked " in r.stdout, r.stdout
    probe = httpx.post(
        f"{stack.api_url}/mcp",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert probe.status_code == 401, probe.text


async def over_mcp(stack: Stack, subject: str, tool: str, args: dict[str, Any]) -> CallToolResult:
    async with connect(stack, subject) as client:
        return await client.call_tool(tool, args)


def stack_admin(api: Api) -> str:
    return str(api.get("/api/jobs/deliver-gated-2").json()["release"]["by"])


def test_an_interrupted_job_waits_unverified_and_a_follow_up_delivers(
    cluster: Cluster, stack: Stack, model: ScriptedModel, forge: tuple[GitServer, GitHubSimulator]
) -> None:
    git, sim = forge
    fresh_repo(git, sim)
    model.add(
        Step(when="Interrupt me", text="Slow.", command=SLOW.format(s=60) + " && echo ok > fixed.txt"),
        Step(
            when="write ok",
            text="Writing.",
            command="echo ok > fixed.txt && git commit -qam 'agent: as told'",
        ),
        Step(when="tool_result", text="FINAL: wrote ok."),
    )
    repo_env(cluster, "deliver-int-env", model, git, sim)
    alice, admin = As(stack, "alice"), Api(stack)
    submit(
        alice, name="deliver-int", prompt="Interrupt me: fixed.txt must say ok", environment="deliver-int-env"
    )
    wait(
        lambda: tool_running(admin, "deliver-int-a1"), 120, "the tool", lambda: admin.debug("deliver-int-a1")
    )
    assert alice.post("/api/jobs/deliver-int/interrupt").status_code == 202
    j = wait_state(alice, "deliver-int", "needs_input", 60)
    assert j["question"] == QUESTION
    assert j["attempts"][0]["verifications"] == [] and j["delivery"] is None, "nothing verified or delivered"
    assert git.branches(SLUG) == ["main"] and sim.open_pulls(SLUG) == []
    r = alice.post("/api/jobs/deliver-int/follow_up", {"message": "write ok into fixed.txt and commit"})
    assert r.status_code == 202 and r.json()["results"][0]["turn"]["name"] == "deliver-int-a1-2", r.text
    j = wait_state(alice, "deliver-int", "delivered", timeout=180)
    assert model.requests[-1].contains("Interrupt me"), "the same conversation"
    assert git.log(SLUG, "hangar/deliver-int")[0] == "agent: as told"
    assert [v["passed"] for v in j["attempts"][0]["verifications"]] == [True]
    states = [e["state"] for e in j["timeline"]]
    assert "needs_input" in states and states[-1] == "delivered"
    assert len(sim.open_pulls(SLUG)) == 1


def test_a_codex_job_delivers_too(
    cluster: Cluster, stack: Stack, model: ScriptedModel, forge: tuple[GitServer, GitHubSimulator]
) -> None:
    git, sim = forge
    fresh_repo(git, sim)
    model.add(
        Step(text="Fixing.", command="echo ok > fixed.txt && git commit -qam 'agent: codex fix'"),
        Step(when="tool_result", text="FINAL: fixed.txt says ok."),
    )
    environment(
        cluster,
        "deliver-codex-env",
        model_env("codex", model),
        repository={"url": git.url(SLUG), "credentialsSecret": "acme-repo", "apiUrl": sim.url},
        verification={"command": CHECK},
    )
    alice = As(stack, "alice")
    submit(
        alice,
        name="deliver-codex",
        prompt="Codex: fixed.txt must say ok",
        environment="deliver-codex-env",
        harness="codex",
        model="fake-model",
    )
    j = wait_state(alice, "deliver-codex", "delivered", timeout=240)
    head = git.branch_head(SLUG, "hangar/deliver-codex")
    assert head == j["head_commit"] and git.log(SLUG, head)[0] == "agent: codex fix"
    assert git.show(SLUG, head, "fixed.txt") == "ok\n"
    [pr] = sim.open_pulls(SLUG)
    assert pr["head"]["sha"] == head and j["pr_url"] == pr["html_url"]
    # A plain session in the same Environment works in a checkout too: what its turn left (uncommitted here)
    # is one patch against the base branch that `git apply` takes.
    model.add(
        Step(when="Plain session", text="Writing.", command="echo hi > plain.txt && echo more >> README.md"),
        Step(when="tool_result", text="FINAL: wrote plain.txt."),
    )
    admin = Api(stack)
    new_session(admin, "deliver-plain", "deliver-codex-env", "codex", "Plain session: write plain.txt")
    try:
        admin.wait_turn("deliver-plain", 1)
        r = wait(
            lambda: (x := admin.get("/api/sessions/deliver-plain/patch")).status_code == 200 and x,
            60,
            "the session's patch",
        )
        assert r.headers["x-hangar-source"] == "turn", r.headers
        assert r.headers["x-hangar-base"] == git.branch_head(SLUG, "main")
        work = Path(tempfile.mkdtemp(prefix="hangar-apply-"))
        try:
            subprocess.run(["git", "clone", "-q", "-b", "main", str(git.path(SLUG)), str(work)], check=True)
            subprocess.run(["git", "-C", str(work), "apply"], input=r.text, text=True, check=True)
            assert (work / "plain.txt").read_text() == "hi\n"
            assert (work / "README.md").read_text() == "# app\nmore\n"
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        admin.delete("/api/sessions/deliver-plain")
