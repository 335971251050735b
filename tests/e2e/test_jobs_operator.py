"""The Job controller, driven the GitOps way: a Job applied with kubectl, attempts run by the real Claude Code
CLI against a ScriptedModel, decisions written with ``kubectl patch`` on the Approval."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import clis_installed, environment, wait, workspace

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    m = ScriptedModel(
        [
            # Every attempt gets the same script: write a file (a call the policy asks about), then finish.
            Step(when="jobtask", text="Writing.", command="echo attempt > job.txt", repeat=True),
            Step(when="tool_result", text="FINAL: written.", repeat=True),
        ]
    )
    m.start()
    try:
        yield m
    finally:
        m.stop()


def get(cluster: Cluster, plural: str, name: str) -> dict[str, Any] | None:
    r = cluster.kubectl("get", f"{plural}.hangar.dev", name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def apply(cluster: Cluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def job_obj(name: str, env: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"submitter": "alice", "environment": env, "prompt": "jobtask: write job.txt", **spec},
    }


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((get(cluster, "jobs", name) or {}).get("status") or {})


def test_best_of_n_attempts_keep_the_jobs_policy_and_show_its_approvals(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    env_name = "jobs-op-env"
    # The Environment says auto; the Job says ask: both attempts must ask (they keep their parent's policy).
    environment(
        cluster, env_name, {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": "k"}, "auto"
    )
    name = "jobs-op-ask"
    apply(cluster, job_obj(name, env_name, approvals="ask", attempts=2, tainted=True))
    try:
        st = wait(
            lambda: (
                (s := status(cluster, name)).get("state") == "awaiting_approval"
                and len(s.get("pendingApprovals") or []) == 2
                and s
            ),
            120,
            "both attempts waiting on an approval",
            lambda: (
                json.dumps(status(cluster, name), indent=1)
                + repr([r.user_text[:200] for r in model.requests])
            ),
        )
        assert st["policy"] == "ask" and st["awaitingApproval"] is True
        assert st["taint"]["tainted"] is True, "a job created tainted shows it"
        sessions = [f"{name}-a1", f"{name}-a2"]
        assert sorted(p["session"] for p in st["pendingApprovals"]) == sessions
        for sname in sessions:
            s = get(cluster, "sessions", sname)
            assert s is not None
            assert s["spec"]["approvals"] == "ask" and s["status"]["policy"] == "ask"
            assert s["metadata"]["labels"]["hangar.dev/job"] == name
            assert s["metadata"]["ownerReferences"][0]["kind"] == "Job"
            assert s["status"]["taint"]["tainted"] is True
        assert [a["state"] for a in st["attempts"]] == ["awaiting_approval", "awaiting_approval"]
        # `kubectl get hjob` shows what a person needs: the state, the policy and what waits on them.
        row = cluster.kubectl("get", "hjob", name).stdout
        assert "awaiting_approval" in row and "ask" in row and "ap-" in row, row

        # Attempt 1 allowed, attempt 2 denied, both by kubectl patch on the Approval.
        first, second = sorted(st["pendingApprovals"], key=lambda p: p["session"])
        for ap, decision in ((first, "allow"), (second, "deny")):
            cluster.kubectl(
                "patch",
                "approvals.hangar.dev",
                ap["id"],
                "--type=merge",
                "-p",
                json.dumps({"spec": {"decision": decision, "decidedBy": "bob", "message": "job review"}}),
            )
        st = wait(
            lambda: (s := status(cluster, name)).get("state") == "done" and s,
            120,
            "the job done",
            lambda: json.dumps(status(cluster, name), indent=1),
        )
        assert st["pendingApprovals"] == [] and st["awaitingApproval"] is False
        assert [a["state"] for a in st["attempts"]] == ["done", "done"]
        assert st["turns"] == [f"{name}-a1-1", f"{name}-a2-1"]
        assert st["finishedAt"] and st["startedAt"]
        assert (workspace(stack, f"{name}-a1") / "job.txt").read_text().strip() == "attempt"
        assert not (workspace(stack, f"{name}-a2") / "job.txt").exists(), "the denied attempt wrote nothing"
        # A finished job gives its sandboxes back.
        wait(
            lambda: all(
                ((get(cluster, "sessions", s) or {}).get("status") or {}).get("phase") == "Stopped"
                for s in sessions
            ),
            60,
            "the attempts stopped",
        )
        assert status(cluster, name)["taint"]["tainted"] is True, "taint is sticky"
    finally:
        cluster.kubectl("delete", "jobs.hangar.dev", name, "--wait=false", check=False)
    # Owner references: deleting the job deletes its attempts.
    wait(lambda: get(cluster, "sessions", f"{name}-a1") is None, 60, "the attempts garbage-collected")


def test_a_job_waits_for_its_environment_and_cancelling_stops_it(cluster: Cluster, stack: Stack) -> None:
    name = "jobs-op-cancel"
    apply(cluster, job_obj(name, "jobs-op-missing-env"))
    try:
        st = wait(
            lambda: (s := status(cluster, name)).get("reason") == "EnvironmentNotFound" and s,
            60,
            "the job waiting for its environment",
        )
        assert st["state"] == "queued" and "jobs-op-missing-env" in st["message"]
        assert get(cluster, "sessions", f"{name}-a1") is None, "no attempt without an environment"
        cluster.kubectl(
            "patch", "jobs.hangar.dev", name, "--type=merge", "-p", json.dumps({"spec": {"cancelled": True}})
        )
        st = wait(lambda: (s := status(cluster, name)).get("state") == "cancelled" and s, 60, "cancelled")
        assert st["finishedAt"]
    finally:
        cluster.kubectl("delete", "jobs.hangar.dev", name, "--wait=false", check=False)


def test_the_apiserver_refuses_a_job_name_with_no_room_for_its_attempts(cluster: Cluster) -> None:
    long_name = "j" + "x" * 37  # 38 characters: "<name>-a8" would pass the 40-character session limit
    r = cluster.kubectl("apply", "-f", "-", input=json.dumps(job_obj(long_name, "e")), check=False)
    assert r.returncode != 0 and "at most 37 characters" in r.stderr, r.stderr
    r = cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(job_obj("jobs-op-bad", "e", attempts=9)), check=False
    )
    assert r.returncode != 0 and "attempts" in r.stderr, r.stderr


def test_a_session_in_the_way_of_an_attempt_fails_the_job_and_is_left_alone(
    cluster: Cluster, stack: Stack
) -> None:
    """Someone's own session named like an attempt (and even labelled with the job) is not the job's: the
    job fails with the reason instead of adopting it, and that session is neither used nor stopped."""
    name = "jobs-op-taken"
    squatter = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": f"{name}-a1", "labels": {"hangar.dev/job": name}},
        "spec": {"harness": "claude", "environment": "jobs-op-none", "approvals": "auto"},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(squatter))
    environment(cluster, "jobs-op-env2", {}, None)
    apply(cluster, job_obj(name, "jobs-op-env2", approvals="ask"))
    try:
        st = wait(lambda: (s := status(cluster, name)).get("state") == "failed" and s, 60, "the job failed")
        assert st["reason"] == "AttemptNameTaken" and f"{name}-a1" in st["message"], st
        s = get(cluster, "sessions", f"{name}-a1")
        assert s is not None and s["spec"]["approvals"] == "auto" and not s["spec"].get("stopped")
    finally:
        cluster.kubectl("delete", "jobs.hangar.dev", name, "--wait=false", check=False)
        cluster.kubectl("delete", "hsess", f"{name}-a1", "--wait=false", check=False)


def test_an_attempt_whose_session_is_deleted_is_lost_not_run_again(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    environment(
        cluster, "jobs-op-env3", {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": "k"}
    )
    name = "jobs-op-lost"
    apply(cluster, job_obj(name, "jobs-op-env3", approvals="ask"))
    try:
        wait(lambda: status(cluster, name).get("state") == "awaiting_approval", 120, "the attempt waiting")
        cluster.kubectl("delete", "hsess", f"{name}-a1", "--wait=true")
        st = wait(lambda: (s := status(cluster, name)).get("state") == "failed" and s, 60, "the job failed")
        assert st["attempts"][0]["state"] == "failed" and st["attempts"][0]["outcome"] == "session deleted"
        assert st["pendingApprovals"] == [] and st["finishedAt"]
        time.sleep(3)  # the controller's next passes must not start it again
        assert get(cluster, "sessions", f"{name}-a1") is None, "a lost attempt is not run again"
        assert len([r for r in model.requests if r.contains("jobtask")]) == 1
    finally:
        cluster.kubectl("delete", "jobs.hangar.dev", name, "--wait=false", check=False)
