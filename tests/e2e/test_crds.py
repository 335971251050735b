"""The CRDs: generated from the models, installed on a real apiserver, validating what users write."""

from __future__ import annotations

import json

from hangar import crdgen
from hangar.paths import repo_root

from .conftest import Cluster


def test_crd_files_match_the_models() -> None:
    assert crdgen.drift(repo_root()) == [], "run `hangar crds` and commit the result"


def test_kubectl_get_hangar_lists_every_kind_with_columns(cluster: Cluster) -> None:
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "apiVersion": "hangar.dev/v1alpha1",
                        "kind": "Environment",
                        "metadata": {"name": "crd-env"},
                        "spec": {"image": "python:3.12-slim", "approvals": "ask"},
                    },
                    {
                        "apiVersion": "hangar.dev/v1alpha1",
                        "kind": "Session",
                        "metadata": {"name": "crd-sess"},
                        "spec": {"environment": "crd-env", "harness": "codex"},
                    },
                ],
            }
        ),
    )
    out = cluster.kubectl("get", "hangar").stdout
    assert "environment.hangar.dev/crd-env" in out
    assert "session.hangar.dev/crd-sess" in out
    header = cluster.kubectl("get", "sessions.hangar.dev").stdout.splitlines()[0].split()
    assert header[:5] == ["NAME", "HARNESS", "ENVIRONMENT", "PHASE", "APPROVALS"]
    assert "TURNS" in header and "TAINTED" in header
    wide = cluster.kubectl("get", "hsess", "-o", "wide").stdout.splitlines()[0]
    assert "POD" in wide and "COST" in wide
    assert "IMAGE" in cluster.kubectl("get", "henv").stdout.splitlines()[0]
    for short in ("hturn", "happ", "hjob"):
        assert cluster.kubectl("get", short).returncode == 0
    cluster.kubectl("delete", "session.hangar.dev/crd-sess", "environment.hangar.dev/crd-env", "--wait=false")


def test_invalid_session_is_refused_with_reasons(cluster: Cluster) -> None:
    bad = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": "has-a-very-long-name-that-is-over-forty-chars"},
        "spec": {"environment": 5, "harness": "emacs", "approvals": "sometimes"},
    }
    r = cluster.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert r.returncode != 0
    assert 'spec.harness: Unsupported value: "emacs"' in r.stderr
    assert "spec.environment" in r.stderr and "must be of type string" in r.stderr
    assert 'spec.approvals: Unsupported value: "sometimes"' in r.stderr
    named = {**bad, "spec": {"environment": "e"}}
    r = cluster.kubectl("create", "-f", "-", input=json.dumps(named), check=False)
    assert r.returncode != 0
    assert "Session name must be a DNS label of at most 40 characters" in r.stderr
    missing = {**bad, "metadata": {"name": "nospec"}, "spec": {"harness": "claude"}}
    r = cluster.kubectl("create", "-f", "-", input=json.dumps(missing), check=False)
    assert r.returncode != 0 and "spec.environment: Required value" in r.stderr
    assert cluster.kubectl("get", "hsess", "-o", "name").stdout.strip() == ""


def test_turn_must_belong_to_exactly_one_owner(cluster: Cluster) -> None:
    bad = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Turn",
        "metadata": {"name": "orphan-1"},
        "spec": {"index": 1, "message": "hi"},
    }
    r = cluster.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert r.returncode != 0 and "exactly one of spec.session or spec.job" in r.stderr
    r = cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({**bad, "spec": {"index": 0, "message": "", "session": "s"}}),
        check=False,
    )
    assert "spec.index" in r.stderr and "spec.message" in r.stderr


def test_a_submitted_job_and_a_forks_parent_are_fixed(cluster: Cluster) -> None:
    job = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "crd-fixed-job"},
        "spec": {"submitter": "alice", "environment": "crd-none", "prompt": "do it", "attempts": 2},
    }
    fork = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": "crd-fixed-fork"},
        "spec": {"environment": "crd-none", "forkOf": "crd-parent", "stopped": True},
    }
    plain = {
        **fork,
        "metadata": {"name": "crd-fixed-plain"},
        "spec": {"environment": "crd-none", "stopped": True},
    }
    for obj in (job, fork, plain):
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))
    try:
        for patch in ({"prompt": "do something else"}, {"attempts": 3}, {"approvals": "auto"}):
            r = cluster.kubectl(
                "patch",
                "jobs.hangar.dev",
                "crd-fixed-job",
                "--type=merge",
                "-p",
                json.dumps({"spec": patch}),
                check=False,
            )
            assert r.returncode != 0 and "a Job's spec is fixed once submitted" in r.stderr, (patch, r.stderr)
        got = json.loads(cluster.kubectl("get", "jobs.hangar.dev", "crd-fixed-job", "-o", "json").stdout)
        assert got["spec"]["prompt"] == "do it" and got["spec"]["attempts"] == 2, "nothing changed"
        r = cluster.kubectl(
            "patch", "jobs.hangar.dev", "crd-fixed-job", "--type=merge", "-p", '{"spec": {"cancelled": true}}'
        )
        assert r.returncode == 0, "cancelling is the one change a job takes"
        for name, patch in (
            ("crd-fixed-fork", {"forkOf": "crd-other"}),
            ("crd-fixed-plain", {"forkOf": "crd-p"}),
        ):
            r = cluster.kubectl(
                "patch", "hsess", name, "--type=merge", "-p", json.dumps({"spec": patch}), check=False
            )
            assert r.returncode != 0 and "spec.forkOf can't change" in r.stderr, r.stderr
    finally:
        cluster.kubectl("delete", "jobs.hangar.dev", "crd-fixed-job", "--wait=false", check=False)
        cluster.kubectl("delete", "hsess", "crd-fixed-fork", "crd-fixed-plain", "--wait=false", check=False)
