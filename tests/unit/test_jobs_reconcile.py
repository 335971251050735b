"""The Job controller's reconcile against FakeKube: the first of the unit tier's reconcile tests.

The controller reaches Kubernetes only through ``Kube`` (here FakeKube) and its activity log through a real
sqlite Database, through the operator rig's Context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hangar.kube import ApiException
from hangar.models.labels import JOB as JOB_LABEL
from hangar.store.db import Database
from hangar.testing.fake_kube import FakeKube
from hangar_operator.jobs import Jobs

from .operator_rig import Rig, make_rig


class Deps:
    """What the Job controller reaches: its Kube (here FakeKube) and the activity log, on the rig's Context."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.kube: FakeKube = rig.kube
        self.db: Database = rig.ctx.db


class _Jobs:
    def __init__(self, ctl: Jobs) -> None:
        self.ctl = ctl

    async def reconcile(self, name: str) -> None:
        await self.ctl.reconcile("default", name)


@pytest.fixture
async def deps(tmp_path: Path) -> Deps:
    return Deps(await make_rig(tmp_path, approvals=None))  # closed after the test (conftest.py)


def jobs(d: Deps) -> _Jobs:
    return _Jobs(d.rig.c.jobs)


def job(name: str = "j", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"submitter": "alice", "prompt": "fix it", "environment": "dev", **spec},
    }


def environment(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Environment",
        "metadata": {"name": "dev"},
        "spec": {"image": "img", **spec},
    }


async def test_a_job_starts_its_attempts_as_owned_sessions(deps: Deps) -> None:
    k = deps.kube
    await k.create("environments", environment(approvals="ask"))
    made = await k.create("jobs", job(attempts=2))
    k.writes.clear()
    await jobs(deps).reconcile("j")
    assert [(w.verb, w.resource, w.name) for w in k.writes] == [
        ("create", "sessions", "j-a1"),
        ("create", "sessions", "j-a2"),
        ("patch_status", "jobs", "j"),
    ]
    for i, s in enumerate(await k.list("sessions", f"{JOB_LABEL}=j"), 1):
        assert s["metadata"]["name"] == f"j-a{i}"
        assert [r["uid"] for r in s["metadata"]["ownerReferences"]] == [made["metadata"]["uid"]]
        assert s["spec"]["approvals"] == "ask" and s["spec"]["prompt"] == "fix it"
    st = (await k.get("jobs", "j") or {})["status"]
    assert st["state"] == "queued" and st["policy"] == "ask"
    assert [(a["index"], a["session"], a["state"]) for a in st["attempts"]] == [
        (1, "j-a1", "queued"),
        (2, "j-a2", "queued"),
    ]
    events = [e.kind for e in await deps.db.events("job/j")]
    assert events.count("attempt_started") == 2


async def test_a_second_reconcile_with_nothing_new_writes_nothing(deps: Deps) -> None:
    k = deps.kube
    await k.create("environments", environment())
    await k.create("jobs", job())
    await jobs(deps).reconcile("j")
    k.writes.clear()
    await jobs(deps).reconcile("j")
    assert k.writes == []


async def test_the_job_follows_its_attempts_turn(deps: Deps) -> None:
    k = deps.kube
    await k.create("environments", environment())
    await k.create("jobs", job())
    ctl = jobs(deps)
    await ctl.reconcile("j")
    k.set_status("sessions", "j-a1", {"phase": "Running", "currentTurn": "j-a1-t1"})
    k.seed(
        "turns",
        {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Turn",
            "metadata": {"name": "j-a1-t1", "labels": {"hangar.dev/session": "j-a1"}},
            "spec": {"session": "j-a1", "index": 1, "message": "fix it"},
            "status": {"phase": "Running"},
        },
    )
    await ctl.reconcile("j")
    st = (await k.get("jobs", "j") or {})["status"]
    assert st["state"] == "running" and st["turns"] == ["j-a1-t1"] and st["startedAt"]
    k.set_status("turns", "j-a1-t1", {"phase": "NeedsInput", "question": "Which branch?"})
    await ctl.reconcile("j")
    st = (await k.get("jobs", "j") or {})["status"]
    assert st["state"] == "needs_input" and st["question"] == "Which branch?"
    k.set_status("turns", "j-a1-t1", {"phase": "Completed", "outcome": "completed", "question": None})
    k.writes.clear()
    await ctl.reconcile("j")
    st = (await k.get("jobs", "j") or {})["status"]
    assert st["state"] == "done" and st["finishedAt"]
    # A job that ends stops its attempts, so their sandboxes go back to the pool.
    assert ("patch", "sessions", "j-a1") in [(w.verb, w.resource, w.name) for w in k.writes]
    assert (await k.get("sessions", "j-a1") or {})["spec"]["stopped"] is True


async def test_a_job_waits_for_its_environment(deps: Deps) -> None:
    k = deps.kube
    await k.create("jobs", job())
    await jobs(deps).reconcile("j")
    st = (await k.get("jobs", "j") or {})["status"]
    assert (st["state"], st["reason"]) == ("queued", "EnvironmentNotFound")
    assert k.names("sessions") == []


async def test_a_failed_create_is_retried_by_the_next_reconcile(deps: Deps) -> None:
    k = deps.kube
    await k.create("environments", environment())
    await k.create("jobs", job())
    k.fail_next("create", "sessions", 500)
    with pytest.raises(ApiException):
        await jobs(deps).reconcile("j")
    assert k.names("sessions") == []
    await jobs(deps).reconcile("j")
    assert k.names("sessions") == ["j-a1"]


async def test_a_session_of_the_attempts_name_not_owned_by_the_job_fails_it(deps: Deps) -> None:
    k = deps.kube
    await k.create("environments", environment())
    await k.create(
        "sessions",
        {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Session",
            "metadata": {"name": "j-a1", "labels": {JOB_LABEL: "j"}},
            "spec": {"environment": "dev"},
        },
    )
    await k.create("jobs", job())
    await jobs(deps).reconcile("j")
    st = (await k.get("jobs", "j") or {})["status"]
    assert (st["state"], st["reason"]) == ("failed", "AttemptNameTaken")


async def test_deleting_a_job_collects_its_attempts(deps: Deps) -> None:
    k = deps.kube
    await k.create("environments", environment())
    await k.create("jobs", job(attempts=3))
    await jobs(deps).reconcile("j")
    assert len(k.names("sessions")) == 3
    await k.delete("jobs", "j")
    assert k.names("sessions") == []
