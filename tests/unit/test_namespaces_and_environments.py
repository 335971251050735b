"""Several namespaces: each object handled in its own, run ids and activity scopes that never collide."""

from __future__ import annotations

from pathlib import Path

from hangar_operator.runs import make_run, parse_run, scope
from tests.unit.operator_rig import make_rig


def test_run_ids_and_scopes() -> None:
    home = make_run("hangar", "hangar", "s1", 1)
    other = make_run("hangar", "team-a", "s1", 1)
    assert (home.id, home.pod, home.key_secret) == ("s1-r1", "s1-r1", "s1-r1-key")
    assert (other.id, other.pod) == ("team-a.s1-r1", "s1-r1")
    assert parse_run("hangar", "s1-r1") == home and parse_run("hangar", "team-a.s1-r1") == other
    assert parse_run("hangar", "not a run") is None
    assert scope("hangar", "session", "hangar", "s1") == "session/s1"
    assert scope("hangar", "session", "team-a", "s1") == "session/team-a/s1"


async def test_two_namespaces_with_a_session_of_the_same_name(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, watch_namespaces=("default", "team-a"))
    for ns in ("default", "team-a"):
        rig.env(ns=ns)
        await rig.running("s1", ns)
    assert rig.kube.scoped("team-a").peek("pods", "s1-r1") is not None
    assert rig.run_id("s1") == "s1-r1" and rig.run_id("s1", "team-a") == "team-a.s1-r1"
    assert "start-s1-1" in rig.commands("team-a.s1-r1") and "start-s1-1" in rig.commands("s1-r1")
    await rig.event("s1", "turn_ended", "team-a", turn="s1-1", outcome="completed", summary="there")
    assert rig.status("turns", "s1-1", "team-a")["phase"] == "Completed"
    assert rig.status("turns", "s1-1")["phase"] == "Running"  # the home one is untouched
    assert await rig.ctx.db.driver_acked("team-a.s1-r1") == 1 and await rig.ctx.db.driver_acked("s1-r1") == 0
    kinds = [e.kind for e in await rig.ctx.db.events("session/team-a/s1")]
    assert "turn_ended" in kinds and "turn_ended" not in [
        e.kind for e in await rig.ctx.db.events("session/s1")
    ]
    # A run id of a namespace the operator does not serve is refused.
    assert await rig.c.router.key_for_run("elsewhere.s1-r1") is None
    assert await rig.c.router.key_for_run("team-a.s1-r1") is not None


async def test_an_environment_counts_its_sessions(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.session("s1")
    await rig.session("s2")
    await rig.c.environments.reconcile("default", "dev")
    st = rig.status("environments", "dev")
    assert st["sessions"] == 2 and st["observedGeneration"] == 1
    assert rig.condition("environments", "dev")["status"] == "True"
