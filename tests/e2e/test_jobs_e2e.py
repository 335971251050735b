"""Jobs end to end: a submitter's jobs token over REST → Job → the operator's Job controller → attempt
Sessions → the real Claude Code CLI against a ScriptedModel, and back through the job's routes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, wait, workspace

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]

# A tool that runs long enough to steer or interrupt it (Claude refuses a bare `sleep N` on its own).
SLOW = "python3 -c 'import time; time.sleep({s})'"
QUESTION = "Interrupted by alice. Follow up with what the agent should do instead, or cancel the job."


class As(Api):
    def __init__(self, stack: Stack, subject: str) -> None:
        super().__init__(stack)
        self.http.headers["Authorization"] = f"Bearer {stack.token_for(subject)}"

    def job(self, job: str) -> dict[str, Any]:
        r = self.get(f"/api/jobs/{job}")
        assert r.status_code == 200, r.text
        return dict(r.json())


JOBS: list[str] = []


@pytest.fixture(autouse=True)
def _delete_jobs(cluster: Cluster) -> Iterator[None]:
    """Each test's jobs (and so their attempt sessions and sandboxes) go when it ends."""
    yield
    while JOBS:
        cluster.kubectl("delete", "job.hangar.dev", JOBS.pop(), "--wait=false", check=False)


def submit(who: As, **body: Any) -> dict[str, Any]:
    r = who.post("/api/jobs", body)
    assert r.status_code == 201, r.text
    JOBS.append(r.json()["id"])
    return dict(r.json())


def claude_env(cluster: Cluster, name: str, model: ScriptedModel) -> None:
    """No approvals policy here: a job's own policy is what its attempts run under."""
    environment(
        cluster, name, {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"}
    )


def wait_state(who: As, job: str, state: str, timeout: float = 120) -> dict[str, Any]:
    admin = Api(who.stack)

    def debug() -> str:
        j = who.job(job)
        return str(
            {"job": j, **{a["session"]: admin.debug(a["session"]) for a in j["attempts"] if a["session"]}}
        )[-8000:]

    found: dict[str, Any] = wait(
        lambda: (j := who.job(job))["state"] == state and j, timeout, f"job {job} {state}", debug
    )
    return found


def tool_running(api: Api, session: str) -> bool:
    """The attempt's agent is running a tool (False while the operator has not created the session)."""
    r = api.get(f"/api/sessions/{session}/events", params={"limit": 1000})
    return r.status_code == 200 and any(e["kind"] == "tool_use" for e in r.json()["events"])


def test_best_of_n_ask_approvals_are_answered_by_the_submitter(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > allowed.txt"),
        Step(text="Writing.", command="echo hi > allowed.txt"),
        Step(when="tool_result", text="FINAL: written."),
        Step(when="tool_result", text="FINAL: written."),
    )
    claude_env(cluster, "jobs-ask-env", model)
    alice, bob, admin = As(stack, "alice"), As(stack, "bob"), Api(stack)
    j = submit(
        alice, name="jobs-bon", prompt="write it", environment="jobs-ask-env", attempts=2, approvals="ask"
    )
    assert j["submitter"] == "alice" and j["attempts_requested"] == 2
    attempts = ["jobs-bon-a1", "jobs-bon-a2"]
    # Both attempts wait on an approval; the job shows both, each with its attempt's session.
    j = wait(
        lambda: (
            (x := alice.job("jobs-bon"))["state"] == "awaiting_approval"
            and len(x["pending_approvals"]) == 2
            and x
        ),
        120,
        "both attempts awaiting approval",
        lambda: str(alice.job("jobs-bon")),
    )
    assert j["awaiting_approval"] is True and j["policy"] == "ask"
    assert sorted(p["session"] for p in j["pending_approvals"]) == attempts
    for name in attempts:
        s = admin.session(name)
        assert s["approvals"] == "ask" and s["policy"] == "ask", "best-of-N keeps the parent's policy"
    listing = alice.get("/api/jobs/jobs-bon/approvals").json()
    assert listing["policy"] == "ask" and len(listing["pending"]) == 2
    assert sorted(a["policy"] for a in listing["attempts"]) == ["ask", "ask"]
    pending = listing["pending"]
    assert all("echo hi > allowed.txt" in a["command"] and a["phase"] == "Pending" for a in pending)
    # Bob (another submitter) can't see or answer them; the MCP role can't use the route.
    for a in pending:
        r = bob.post(f"/api/jobs/jobs-bon/approvals/{a['id']}", {"decision": "allow"})
        assert r.status_code == 404 and r.json()["detail"] == "no job 'jobs-bon'"
        r = As(stack, "mcp-client").post(f"/api/jobs/jobs-bon/approvals/{a['id']}", {"decision": "allow"})
        assert r.status_code == 403
    # An approval that isn't this job's: 404, even one of a session with a similar name.
    r = alice.post("/api/jobs/jobs-bon/approvals/ap-000000000000", {"decision": "allow"})
    assert r.status_code == 404 and r.json()["detail"] == "job 'jobs-bon' has no approval 'ap-000000000000'"
    assert len(alice.get("/api/jobs/jobs-bon/approvals").json()["pending"]) == 2, "nothing changed"
    assert not any((workspace(stack, n) / "allowed.txt").exists() for n in attempts), "nothing ran yet"
    for a in pending:
        r = alice.post(f"/api/jobs/jobs-bon/approvals/{a['id']}", {"decision": "allow"})
        assert r.status_code == 200, r.text
        assert r.json()["decision"] == "allow" and r.json()["by"] == "alice"
        r = alice.post(f"/api/jobs/jobs-bon/approvals/{a['id']}", {"decision": "deny"})
        assert r.status_code == 409 and "already decided: allow by alice" in r.json()["detail"]
    j = wait_state(alice, "jobs-bon", "done")
    assert j["pending_approvals"] == [] and j["awaiting_approval"] is False and j["finished_at"]
    for name in attempts:
        assert (workspace(stack, name) / "allowed.txt").read_text().strip() == "hi", name
    assert sorted(t["session"] for t in j["turns"]) == attempts
    assert all(t["phase"] == "Completed" and "written" in t["summary"] for t in j["turns"])
    assert [t["n"] for t in j["turns"]] == [1, 2]
    recent = alice.get("/api/jobs/jobs-bon/approvals").json()["recent"]
    assert sorted(a["id"] for a in recent) == sorted(a["id"] for a in pending)
    assert all(a["phase"] == "Allowed" and a["resolved_by"] == "person" for a in recent)
    # A final job takes no follow-up; its prompt turns are not follow-ups to classify.
    r = alice.post("/api/jobs/jobs-bon/follow_up", {"message": "and again"})
    assert (
        r.status_code == 409
        and r.json()["detail"] == "job 'jobs-bon' is done: it can't take a follow-up any more"
    )
    r = alice.post("/api/jobs/jobs-bon/turns/1/class", {"class": "redirect"})
    assert r.status_code == 409 and "is the job's prompt, not a follow-up" in r.json()["detail"]
    events = alice.get("/api/jobs/jobs-bon/events").json()["events"]
    assert [e["state"] for e in events if e["kind"] == "job_state"][-1] == "done"
    assert bob.get("/api/jobs/jobs-bon/events").status_code == 404


def test_a_steer_goes_to_every_attempt_with_a_running_turn(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Slow.", command=SLOW.format(s=8)),
        Step(text="Slow.", command=SLOW.format(s=8)),
        Step(when="KEEP-IT-SMALL", text="FINAL: kept it small."),
        Step(when="KEEP-IT-SMALL", text="FINAL: kept it small."),
    )
    claude_env(cluster, "jobs-steer-env", model)
    alice, admin = As(stack, "alice"), Api(stack)
    submit(alice, name="jobs-steer", prompt="do the slow thing", environment="jobs-steer-env", attempts=2)
    attempts = ["jobs-steer-a1", "jobs-steer-a2"]
    wait(
        lambda: all(tool_running(admin, n) for n in attempts),
        120,
        "the tool running in both attempts",
        lambda: admin.debug(attempts[0]) + admin.debug(attempts[1]),
    )
    time.sleep(0.5)
    r = alice.post("/api/jobs/jobs-steer/steer", {"message": "KEEP-IT-SMALL"})
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["kind"] == "steer" and sorted(out["sent_to"]) == attempts and out["errors"] == []
    assert out["detail"].startswith("sent to the 2 attempts with a running turn")
    assert sorted(x["turn"]["name"] for x in out["steers"]) == ["jobs-steer-a1-1", "jobs-steer-a2-1"]
    j = wait_state(alice, "jobs-steer", "done")
    for t in j["turns"]:
        assert t["phase"] == "Completed" and "kept it small" in t["summary"], t
        [st] = t["steers"]
        assert st["message"] == "KEEP-IT-SMALL" and st["by"] == "alice" and st["status"] == "delivered"
    # Classify one of the steers through the job (the submitter may; the session route is admin only).
    sid = out["steers"][0]["steer"]["id"]
    r = alice.post(f"/api/jobs/jobs-steer/steers/{sid}/class", {"class": "redirect"})
    assert r.status_code == 200 and r.json()["steer"]["class"] == "redirect", r.text
    assert r.json()["steer"]["classified_by"] == "alice"
    r = alice.post(f"/api/sessions/{attempts[0]}/steers/{sid}/class", {"class": "redirect"})
    assert r.status_code == 403


def test_a_tainted_job_interrupted_without_a_message_waits_and_a_follow_up_continues(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Slow.", command=SLOW.format(s=30) + " && echo late > late.txt"),
        Step(when="still with me", text="FINAL: yes, continuing."),
    )
    claude_env(cluster, "jobs-int-env", model)
    alice, bob, admin = As(stack, "alice"), As(stack, "bob"), Api(stack)
    j = submit(
        alice, name="jobs-int", prompt="first message of jobs-int", environment="jobs-int-env", tainted=True
    )
    assert j["taint"]["tainted"] is True
    wait(lambda: tool_running(admin, "jobs-int-a1"), 120, "the tool", lambda: admin.debug("jobs-int-a1"))
    time.sleep(0.5)
    assert bob.post("/api/jobs/jobs-int/interrupt").status_code == 404
    r = alice.post("/api/jobs/jobs-int/interrupt")
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["sent_to"] == ["jobs-int-a1"] and out["interrupt"]["message"] is None
    assert out["detail"] == "sent to the one attempt with a running turn: jobs-int-a1"
    j = wait_state(alice, "jobs-int", "needs_input", 60)
    assert j["question"] == QUESTION
    [t1] = j["turns"]
    assert t1["phase"] == "Interrupted" and t1["exit_status"] == 130
    assert j["taint"]["tainted"] is True and admin.session("jobs-int-a1")["taint"]["tainted"] is True
    # Nothing runs, so there is nothing to steer or interrupt; bob can't follow up.
    r = alice.post("/api/jobs/jobs-int/steer", {"message": "hello?"})
    assert r.status_code == 409 and "no running turn to steer (it is needs_input)" in r.json()["detail"]
    assert bob.post("/api/jobs/jobs-int/follow_up", {"message": "are you still with me?"}).status_code == 404
    r = alice.post("/api/jobs/jobs-int/follow_up", {"message": "are you still with me?"})
    assert r.status_code == 202, r.text
    fu = r.json()
    assert fu["kind"] == "turn" and fu["sent_to"] == ["jobs-int-a1"] and fu["class"] == "unclassified"
    assert fu["results"][0]["turn"]["name"] == "jobs-int-a1-2"
    j = wait_state(alice, "jobs-int", "done")
    assert j["question"] is None
    t1, t2 = j["turns"]
    assert t2["name"] == "jobs-int-a1-2" and t2["phase"] == "Completed" and "continuing" in t2["summary"]
    assert t2["by"] == "alice"
    assert model.requests[-1].contains("first message of jobs-int"), "the same conversation"
    assert not (workspace(stack, "jobs-int-a1") / "late.txt").exists()
    assert j["taint"]["tainted"] is True, "taint is sticky"
    # The follow-up is classified by its job turn number.
    r = alice.post("/api/jobs/jobs-int/turns/2/class", {"class": "redirect"})
    assert r.status_code == 200, r.text
    t = r.json()["turn"]
    assert t["n"] == 2 and t["class"] == "redirect" and t["classified_by"] == "alice" and t["classified_at"]
    assert alice.job("jobs-int")["turns"][1]["class"] == "redirect"
    ev = admin.wait_event("jobs-int-a1", lambda e: e.get("event") == "steer.classified", 10)
    assert ev["class"] == "redirect" and ev["by"] == "alice" and ev["turn"] == "jobs-int-a1-2"
    states = [
        e["state"]
        for e in alice.get("/api/jobs/jobs-int/events").json()["events"]
        if e["kind"] == "job_state"
    ]
    assert "needs_input" in states and states[-1] == "done"


def hangar(stack: Stack, *args: str, subject: str = "alice") -> subprocess.CompletedProcess[str]:
    """The `hangar` CLI as the submitter types it, with their jobs token."""
    env = {**os.environ, "HANGAR_URL": stack.api_url, "HANGAR_TOKEN": stack.token_for(subject)}
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_cli_job_new_approvals_interrupt_follow_up_cancel(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(text="Writing.", command="echo hi > cli.txt"),
        Step(when="tool_result", text="Now the slow part.", command=SLOW.format(s=30)),
        Step(when="still with me", text="FINAL: yes, continuing."),
        # The job cancelled while it starts runs long: the cancel lands on it however slow the machine.
        Step(when="never mind", text="Thinking it over.", command=SLOW.format(s=60)),
    )
    claude_env(cluster, "jobs-cli-env", model)
    alice = As(stack, "alice")
    r = hangar(
        stack,
        "job",
        "new",
        "first message of jobs-cli",
        "-e",
        "jobs-cli-env",
        "--approvals",
        "ask",
        "--name",
        "jobs-cli",
    )
    JOBS.append("jobs-cli")
    assert r.returncode == 0 and "job jobs-cli submitted (1 attempt)" in r.stdout, r.stdout + r.stderr
    r = hangar(stack, "job", "new", "x", "-e", "jobs-cli-env", "--attempts", "9")
    assert r.returncode == 1 and "error 422: attempts:" in r.stderr, r.stderr
    first = wait(lambda: alice.get("/api/jobs/jobs-cli/approvals").json()["pending"], 120, "an approval")[0]
    r = hangar(stack, "job", "approvals", "jobs-cli")
    assert r.returncode == 0, r.stderr
    assert "job jobs-cli  awaiting_approval  approvals=ask" in r.stdout and "pending (1):" in r.stdout, (
        r.stdout
    )
    assert first["id"] in r.stdout and "echo hi > cli.txt" in r.stdout
    r = hangar(stack, "job", "approvals", "jobs-cli", "--allow", first["id"], subject="bob")
    assert r.returncode == 1 and "error 404: no job 'jobs-cli'" in r.stderr
    r = hangar(stack, "job", "approvals", "jobs-cli", "--allow", first["id"])
    assert r.returncode == 0 and f"{first['id']}: allow sent for Bash" in r.stdout, r.stdout + r.stderr
    # The slow command asks next; interrupt while it waits: the job needs input.
    wait(
        lambda: [
            a for a in alice.get("/api/jobs/jobs-cli/approvals").json()["pending"] if a["id"] != first["id"]
        ],
        120,
        "the second approval",
    )
    r = hangar(stack, "job", "interrupt", "jobs-cli")
    assert r.returncode == 0 and "(jobs-cli-a1, turn jobs-cli-a1-1)" in r.stdout, r.stdout + r.stderr
    assert "will wait for a follow-up" in r.stdout
    wait_state(alice, "jobs-cli", "needs_input", 60)
    r = hangar(stack, "job", "get", "jobs-cli")
    assert r.returncode == 0 and "job jobs-cli  needs_input" in r.stdout and f"? {QUESTION}" in r.stdout, (
        r.stdout
    )
    r = hangar(stack, "job", "steer", "jobs-cli", "hello?")
    assert r.returncode == 1 and "error 409: job 'jobs-cli' has no running turn to steer" in r.stderr
    r = hangar(stack, "job", "follow-up", "jobs-cli", "are you still with me?")
    assert r.returncode == 0 and "jobs-cli-a1: turn jobs-cli-a1-2" in r.stdout, r.stdout + r.stderr
    wait_state(alice, "jobs-cli", "done")
    assert (workspace(stack, "jobs-cli-a1") / "cli.txt").exists()
    r = hangar(stack, "job", "get", "jobs-cli")
    assert "turn 2 jobs-cli-a1-2: Completed (exit 0)" in r.stdout and "FINAL: yes, continuing." in r.stdout, (
        r.stdout
    )
    r = hangar(stack, "job", "classify", "jobs-cli", "2", "fix")
    assert r.returncode == 0 and "turn 2 (jobs-cli-a1-2) classified correction" in r.stdout, (
        r.stdout + r.stderr
    )
    r = hangar(stack, "job", "list")
    assert "jobs-cli" in r.stdout and "done" in r.stdout
    assert "jobs-cli" not in hangar(stack, "job", "list", subject="bob").stdout
    r = hangar(stack, "job", "events", "jobs-cli")
    assert r.returncode == 0 and "job_state" in r.stdout
    r = hangar(stack, "job", "cancel", "jobs-cli")
    assert r.returncode == 1 and "error 409: job 'jobs-cli' is already done: nothing to cancel" in r.stderr
    # Cancel a job that is just starting.
    r = hangar(stack, "job", "new", "never mind", "-e", "jobs-cli-env", "--name", "jobs-cli-cancel")
    JOBS.append("jobs-cli-cancel")
    assert r.returncode == 0, r.stderr
    r = hangar(stack, "job", "cancel", "jobs-cli-cancel")
    assert r.returncode == 0 and "job jobs-cli-cancel cancelling" in r.stdout, r.stdout + r.stderr
    wait_state(alice, "jobs-cli-cancel", "cancelled", 60)
