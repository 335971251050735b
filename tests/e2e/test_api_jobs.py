"""The jobs REST API: who may call what, and bad input refused with a clear 4xx that changes nothing.

These jobs are made not to run (an Environment that doesn't exist, written with kubectl, which the API
itself refuses): the operator keeps them queued, so the routes are tried against a job that stays as it is.
Jobs that run are in test_jobs_e2e.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from hangar.devcluster.stack import Stack
from hangar.models.job import JOB_NAME_MAX

from .conftest import Cluster
from .helpers import Api, environment, wait

pytestmark = pytest.mark.e2e


class As(Api):
    """The REST client with another caller's token."""

    def __init__(self, stack: Stack, subject: str) -> None:
        super().__init__(stack)
        self.http.headers["Authorization"] = f"Bearer {stack.token_for(subject)}"


def names(cluster: Cluster, kind: str) -> list[str]:
    return sorted(cluster.kubectl("get", kind, "-o", "name").stdout.split())


def job_obj(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "job.hangar.dev", name, "-o", "json").stdout))


def queued_job(cluster: Cluster, name: str, submitter: str, attempts: int = 1) -> None:
    """A Job that stays queued: its Environment doesn't exist (kubectl can write that; the API can't)."""
    body = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "submitter": submitter,
            "prompt": "never runs",
            "environment": "no-such-env",
            "attempts": attempts,
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def detail(r: httpx.Response) -> Any:
    return r.json()["detail"]


def test_who_may_call_the_job_routes(cluster: Cluster, stack: Stack) -> None:
    r = httpx.get(f"{stack.api_url}/api/jobs")
    assert r.status_code == 401 and detail(r) == "missing bearer token"
    mcp = As(stack, "mcp-client")
    for method, path in (("GET", "/api/jobs"), ("POST", "/api/jobs"), ("GET", "/api/jobs/anything")):
        r = mcp.http.request(method, path, json={})
        assert r.status_code == 403, (path, r.text)
        assert detail(r) == (
            "mcp-client has an mcp-only token (hangar connect): it works on /mcp only; the REST routes take "
            "a person's login token (admin or jobs)"
        )
    # A jobs token can't use the session routes, which are admin only.
    alice = As(stack, "alice")
    for method, path, body in (
        ("GET", "/api/sessions", None),
        ("POST", "/api/sessions", {"name": "x", "environment": "api-env"}),
        ("GET", "/api/sessions/x", None),
        ("POST", "/api/sessions/x/messages", {"message": "hi"}),
        ("POST", "/api/sessions/x/steer", {"message": "hi"}),
        ("POST", "/api/sessions/x/interrupt", None),
        ("GET", "/api/sessions/x/approvals", None),
        ("POST", "/api/sessions/x/approvals/ap-000000000000", {"decision": "allow"}),
    ):
        r = alice.http.request(method, path, json=body)
        assert r.status_code == 403, (path, r.text)
        assert detail(r) == "alice is not an admin: the session routes are admin only"


# No model behind it: an agent that starts here fails at once (nothing listens on port 9).
NO_MODEL = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "sk-ant-test"}


def test_bad_job_input_is_refused_and_nothing_is_created(cluster: Cluster, stack: Stack) -> None:
    environment(cluster, "api-jobs-env", NO_MODEL)
    alice = As(stack, "alice")
    before = names(cluster, "hjob")
    base = {"prompt": "do it", "environment": "api-jobs-env"}
    r = alice.post("/api/jobs", {**base, "environment": "missing-env"})
    assert r.status_code == 422 and "unknown environment 'missing-env'" in detail(r), r.text
    bad_names = ("Bad_Name", "-x", "x-", "a" * (JOB_NAME_MAX + 1), "", "a.b")
    for bad in bad_names:
        r = alice.post("/api/jobs", {**base, "name": bad})
        assert r.status_code == 422, bad
        assert detail(r).startswith("name: "), (bad, r.text)
    for field, value in (
        ("attempts", 0),
        ("attempts", 9),
        ("harness", "emacs"),
        ("approvals", "yolo"),
        ("deliver", "email"),
        ("prompt", ""),
        ("tainted", "very"),
        ("submitter", "bob"),  # the submitter is the caller, never the body
    ):
        r = alice.post("/api/jobs", {**base, field: value})
        assert r.status_code == 422, (field, r.text)
        assert detail(r).startswith(f"{field}: "), (field, r.text)
    r = alice.post("/api/jobs", {"environment": "api-jobs-env"})
    assert r.status_code == 422 and detail(r).startswith("prompt: "), r.text
    r = alice.http.post("/api/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    # A name whose attempt session is taken by an existing session: refused before the job exists.
    admin = Api(stack)
    assert (
        admin.post("/api/sessions", {"name": "api-taken-a2", "environment": "api-jobs-env"}).status_code
        == 201
    )
    try:
        r = alice.post("/api/jobs", {**base, "name": "api-taken", "attempts": 2})
        assert r.status_code == 409, r.text
        assert detail(r).startswith("a session named 'api-taken-a2' already exists"), r.text
    finally:
        admin.delete("/api/sessions/api-taken-a2")
    assert names(cluster, "hjob") == before
    # A taken job name: 409, and the job is unchanged.
    queued_job(cluster, "api-dup-job", "bob")
    r = alice.post("/api/jobs", {**base, "name": "api-dup-job"})
    assert r.status_code == 409 and detail(r) == "job 'api-dup-job' already exists: pick another name"
    dup = job_obj(cluster, "api-dup-job")
    assert dup["spec"]["submitter"] == "bob" and dup["spec"]["prompt"] == "never runs"
    cluster.kubectl("delete", "job.hangar.dev", "api-dup-job", "--wait=false")


def test_a_submitter_sees_and_acts_on_only_their_own_jobs(cluster: Cluster, stack: Stack) -> None:
    alice, bob, admin = As(stack, "alice"), As(stack, "bob"), Api(stack)
    queued_job(cluster, "api-alices", "alice", attempts=2)
    queued_job(cluster, "api-bobs", "bob")
    try:
        r = alice.get("/api/jobs/api-alices")
        assert r.status_code == 200, r.text
        j = r.json()
        assert j["id"] == "api-alices" and j["submitter"] == "alice" and j["attempts_requested"] == 2
        assert j["turns"] == [] and j["pending_approvals"] == [] and j["awaiting_approval"] is False
        assert j["state"] == "queued" and j["taint"]["tainted"] is False
        assert admin.get("/api/jobs/api-alices").status_code == 200
        assert [x["id"] for x in alice.get("/api/jobs").json()["jobs"]] == ["api-alices"]
        assert [x["id"] for x in bob.get("/api/jobs").json()["jobs"]] == ["api-bobs"]
        every = [x["id"] for x in admin.get("/api/jobs").json()["jobs"]]
        assert "api-alices" in every and "api-bobs" in every
        # Bob asks about (or for) Alice's job: the same 404 as for a job that doesn't exist.
        before = job_obj(cluster, "api-alices")
        for method, path, body in (
            ("GET", "/api/jobs/api-alices", None),
            ("POST", "/api/jobs/api-alices/cancel", None),
            ("POST", "/api/jobs/api-alices/follow_up", {"message": "let me in"}),
            ("POST", "/api/jobs/api-alices/steer", {"message": "hi"}),
            ("POST", "/api/jobs/api-alices/interrupt", None),
            ("POST", "/api/jobs/api-alices/steers/st-000000000000/withdraw", None),
            ("POST", "/api/jobs/api-alices/steers/st-000000000000/class", {"class": "redirect"}),
            ("POST", "/api/jobs/api-alices/turns/1/class", {"class": "redirect"}),
            ("GET", "/api/jobs/api-alices/approvals", None),
            ("GET", "/api/jobs/api-alices/approvals/ap-000000000000", None),
            ("POST", "/api/jobs/api-alices/approvals/ap-000000000000", {"decision": "allow"}),
            ("GET", "/api/jobs/api-alices/events", None),
        ):
            r = bob.http.request(method, path, json=body)
            assert r.status_code == 404, (path, r.text)
            assert detail(r) == "no job 'api-alices'", (path, r.text)
            missing = bob.http.request(method, path.replace("api-alices", "api-nope"), json=body)
            assert missing.status_code == 404 and detail(missing) == "no job 'api-nope'"
        after = job_obj(cluster, "api-alices")
        assert after["spec"] == before["spec"] and not after["spec"].get("cancelled")
        for bad in ("UPPER", "a" * 80, "x_y"):
            assert alice.get(f"/api/jobs/{bad}").status_code == 404
    finally:
        cluster.kubectl("delete", "job.hangar.dev", "api-alices", "api-bobs", "--wait=false")


def test_routes_on_a_job_with_nothing_running_refuse_and_change_nothing(
    cluster: Cluster, stack: Stack
) -> None:
    alice = As(stack, "alice")
    queued_job(cluster, "api-idle", "alice")
    try:
        before = job_obj(cluster, "api-idle")
        r = alice.post("/api/jobs/api-idle/steer", {"message": "hi"})
        assert r.status_code == 409, r.text
        assert detail(r) == (
            "job 'api-idle' has no running turn to steer (it is queued): follow up to start one, or cancel the job"
        )
        r = alice.post("/api/jobs/api-idle/interrupt", {"message": "stop"})
        assert r.status_code == 409 and "no running turn to interrupt" in detail(r)
        r = alice.post("/api/jobs/api-idle/follow_up", {"message": "go on"})
        assert r.status_code == 409 and "has no attempt running yet" in detail(r), r.text
        # Bad bodies: 422 before anything is looked at.
        for path, body in (
            ("steer", {"message": ""}),
            ("steer", {}),
            ("interrupt", {"message": ""}),
            ("follow_up", {"message": ""}),
            ("follow_up", {"message": "x", "class": "unclassified"}),
            ("follow_up", {"message": "x", "class": "bug"}),
            ("follow_up", {"message": "x", "klass": "redirect"}),
            ("turns/1/class", {"class": "unclassified"}),
            ("turns/1/class", {}),
            ("approvals/ap-000000000000", {"decision": "maybe"}),
            ("approvals/ap-000000000000", {"decision": "deny", "message": "x" * 8193}),
        ):
            r = alice.post(f"/api/jobs/api-idle/{path}", body)
            assert r.status_code == 422, (path, body, r.text)
        r = alice.post("/api/jobs/api-idle/approvals/ap-000000000000", {"decision": "allow"})
        assert r.status_code == 404 and detail(r) == "job 'api-idle' has no approval 'ap-000000000000'"
        r = alice.post("/api/jobs/api-idle/steers/st-000000000000/withdraw")
        assert r.status_code == 404 and detail(r) == "job 'api-idle' has no steer 'st-000000000000'"
        r = alice.post("/api/jobs/api-idle/turns/1/class", {"class": "redirect"})
        assert r.status_code == 404 and detail(r) == "job 'api-idle' has no turn 1 (it has 0)"
        assert alice.post("/api/jobs/api-idle/turns/0/class", {"class": "redirect"}).status_code == 404
        listing = alice.get("/api/jobs/api-idle/approvals").json()
        assert listing["job"] == "api-idle" and listing["pending"] == [] and listing["recent"] == []
        assert alice.get("/api/jobs/api-idle/events", params={"since": -1}).status_code == 422
        after = job_obj(cluster, "api-idle")
        assert after["spec"] == before["spec"]
        assert names(cluster, "hsess") == [n for n in names(cluster, "hsess") if "api-idle" not in n]
    finally:
        cluster.kubectl("delete", "job.hangar.dev", "api-idle", "--wait=false")


def test_cancel_then_a_final_job_refuses_everything(cluster: Cluster, stack: Stack) -> None:
    alice = As(stack, "alice")
    queued_job(cluster, "api-cancel", "alice")
    try:
        r = alice.post("/api/jobs/api-cancel/cancel")
        assert r.status_code == 202, r.text
        assert r.json()["cancelled"] is True
        obj = job_obj(cluster, "api-cancel")
        assert obj["spec"]["cancelled"] is True
        assert obj["metadata"]["annotations"]["hangar.dev/cancelled-by"] == "alice"
        j = wait(
            lambda: (x := alice.get("/api/jobs/api-cancel").json())["state"] == "cancelled" and x,
            30,
            "the job cancelled",
        )
        assert j["finished_at"]
        r = alice.post("/api/jobs/api-cancel/cancel")
        assert (
            r.status_code == 409 and detail(r) == "job 'api-cancel' is already cancelled: nothing to cancel"
        )
        for path, body in (
            ("follow_up", {"message": "go on"}),
            ("steer", {"message": "go on"}),
            ("interrupt", None),
        ):
            r = alice.post(f"/api/jobs/api-cancel/{path}", body)
            assert r.status_code == 409, (path, r.text)
            assert detail(r).startswith("job 'api-cancel' is cancelled: it can't"), r.text
    finally:
        cluster.kubectl("delete", "job.hangar.dev", "api-cancel", "--wait=false")


def test_submitting_a_job_records_the_caller_and_a_generated_name(cluster: Cluster, stack: Stack) -> None:
    """The job is created (the operator starts it; it is cancelled at once here); the view says what was
    asked."""
    environment(cluster, "api-jobs-env", NO_MODEL)
    alice = As(stack, "alice")
    r = alice.post(
        "/api/jobs",
        {
            "prompt": "fix the flaky test",
            "environment": "api-jobs-env",
            "attempts": 3,
            "approvals": "deny-risky",
            "tainted": True,
            "deliver": "branch",
        },
    )
    assert r.status_code == 201, r.text
    # A repository that isn't the Environment's: hangar has no credentials for it.
    foreign = alice.post(
        "/api/jobs",
        {"prompt": "p", "environment": "api-jobs-env", "repository": "https://example.com/repo.git"},
    )
    assert foreign.status_code == 422 and foreign.json()["detail"] == (
        "repository 'https://example.com/repo.git' is not environment 'api-jobs-env''s (it names no "
        "repository): hangar has no credentials for it"
    )
    j = r.json()
    try:
        assert re.fullmatch(r"job-[0-9a-f]{10}", j["id"]), j["id"]
        assert j["submitter"] == "alice" and j["attempts_requested"] == 3 and j["approvals"] == "deny-risky"
        assert j["taint"]["tainted"] is True, "a job created tainted shows its taint from the start"
        assert j["deliver"] == "branch" and j["repository"] == ""
        obj = job_obj(cluster, j["id"])
        assert obj["spec"]["submitter"] == "alice" and obj["spec"]["attempts"] == 3
        assert obj["metadata"]["annotations"]["hangar.dev/created-by"] == "alice"
    finally:
        alice.post(f"/api/jobs/{j['id']}/cancel")
        wait(lambda: alice.get(f"/api/jobs/{j['id']}").json()["state"] == "cancelled", 60, "cancelled")
        cluster.kubectl("delete", "job.hangar.dev", j["id"], "--wait=false")


def test_openapi_publishes_the_job_routes(stack: Stack) -> None:
    doc = httpx.get(f"{stack.api_url}/openapi.json").json()
    for path in (
        "/api/jobs",
        "/api/jobs/{job_id}",
        "/api/jobs/{job_id}/cancel",
        "/api/jobs/{job_id}/follow_up",
        "/api/jobs/{job_id}/steer",
        "/api/jobs/{job_id}/steers/{steer_id}/withdraw",
        "/api/jobs/{job_id}/interrupt",
        "/api/jobs/{job_id}/approvals",
        "/api/jobs/{job_id}/approvals/{approval}",
        "/api/jobs/{job_id}/turns/{n}/class",
        "/api/jobs/{job_id}/events",
    ):
        assert path in doc["paths"], path
    schema = doc["components"]["schemas"]["NewJob"]
    assert schema["properties"]["attempts"]["maximum"] == 8 and "submitter" not in schema["properties"]
