"""The Job controller on a FakeKube: attempts created, the job's state derived from them, final states kept."""

from __future__ import annotations

from pathlib import Path

from hangar.models import API_VERSION
from tests.unit.operator_rig import Rig, make_rig


async def job(rig: Rig, name: str = "j1", attempts: int = 2) -> None:
    body = {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"submitter": "ann", "prompt": "do it", "environment": "dev", "attempts": attempts},
    }
    await rig.kube.create("jobs", body)


async def test_a_job_runs_its_attempts_and_is_done_when_one_completes(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    await job(rig)
    await rig.c.jobs.reconcile("default", "j1")
    st = rig.status("jobs", "j1")
    assert st["state"] == "queued" and st["reason"] == "EnvironmentNotFound"
    assert rig.condition("jobs", "j1")["reason"] == "EnvironmentNotFound"
    rig.env()
    await rig.c.jobs.reconcile("default", "j1")
    assert rig.kube.names("sessions") == ["j1-a1", "j1-a2"]
    for s in ("j1-a1", "j1-a2"):
        await rig.reconcile(s)
        await rig.connect(s)
    await rig.c.jobs.reconcile("default", "j1")
    assert rig.status("jobs", "j1")["state"] == "running"
    await rig.event("j1-a1", "turn_ended", turn="j1-a1-1", outcome="completed")
    await rig.c.jobs.reconcile("default", "j1")
    assert rig.status("jobs", "j1")["state"] == "running"  # a2 still works
    await rig.event("j1-a2", "turn_ended", turn="j1-a2-1", outcome="failed", error="nope")
    await rig.c.jobs.reconcile("default", "j1")
    st = rig.status("jobs", "j1")
    assert st["state"] == "done" and rig.condition("jobs", "j1")["status"] == "True"
    assert ("j1", "JobDone") in {(o, r) for (o, r, _) in rig.events()}
    # A final job stops its attempts, which frees their slots.
    assert all(rig.get("sessions", s)["spec"].get("stopped") for s in ("j1-a1", "j1-a2"))


async def test_a_cancelled_job_is_cancelled_for_good(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await job(rig, attempts=1)
    await rig.c.jobs.reconcile("default", "j1")
    await rig.kube.patch("jobs", "j1", {"spec": {"cancelled": True}})
    await rig.c.jobs.reconcile("default", "j1")
    assert rig.status("jobs", "j1")["state"] == "cancelled"
    await rig.c.jobs.reconcile("default", "j1")
    assert rig.status("jobs", "j1")["state"] == "cancelled"
