"""Nothing looks at an idle session on a timer: the cache, the wake-ups and the sweeper (cache.py, sweeper.py).

The rig's controllers with their cache primed, as ``Controllers.start`` does in the operator: the FakeKube
tells the cache of every write, as the real Kube does; watch events (which kopf would deliver) are fed by
hand where a test needs one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hangar.models import API_VERSION
from hangar_operator.cache import Cache
from hangar_operator.status import patch_status

from .governance_rig import until
from .operator_rig import Rig, make_rig


def obj(name: str, rv: str, ns: str = "default", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}, "spec": {}, "status": status}


def test_the_cache_keeps_the_newest_and_drops_what_was_deleted() -> None:
    c = Cache()
    seen: list[tuple[str, Any, Any]] = []
    c.observers.append(lambda plural, old, new: seen.append((plural, old, new)))
    c.put("sessions", obj("a", "5", phase="Idle"))
    c.put("sessions", obj("a", "4", phase="Pending"))  # a late watch event: older than the write
    assert c.get("sessions", "default", "a")["status"]["phase"] == "Idle"  # type: ignore[index]
    c.seen("sessions", {"type": "MODIFIED", "object": obj("a", "6", phase="Running")})
    assert c.get("sessions", "default", "a")["status"]["phase"] == "Running"  # type: ignore[index]
    c.seen("sessions", {"type": "DELETED", "object": obj("a", "7")})
    assert c.get("sessions", "default", "a") is None
    assert [(p, o is None, n is None) for p, o, n in seen] == [
        ("sessions", True, False),
        ("sessions", False, False),
        ("sessions", False, True),
    ]
    c.put("pods", obj("p", "1"))  # a kind it doesn't hold is ignored
    assert "pods" not in c.objs


async def test_a_relisting_drops_what_it_no_longer_has_unless_newer() -> None:
    c = Cache()
    c.put("sessions", obj("gone", "3"))
    c.put("sessions", obj("newer", "12"))  # written after the listing was taken
    listing = [obj("kept", "10")]

    async def lister(plural: str) -> list[dict[str, Any]]:
        return listing if plural == "sessions" else []

    assert not c.primed
    await c.prime(lister)
    assert c.primed
    assert sorted(name for (_, name), _ in c.items("sessions")) == ["kept", "newer"]


async def primed(tmp_path: Path, **settings: Any) -> Rig:
    rig = await make_rig(tmp_path, **settings)
    await rig.ctx.resync_cache()
    return rig


async def test_a_freed_slot_wakes_the_oldest_waiting_session_alone(tmp_path: Path) -> None:
    rig = await primed(tmp_path, max_sandboxes=1)
    rig.env()
    await rig.running("s1")
    for name in ("s2", "s3"):
        await rig.session(name, prompt="hi")
        await rig.reconcile(name)
        assert rig.status("sessions", name)["reason"] == "NoSandboxSlot"
    # s1 stops; nothing reconciles s2 or s3 by hand: the freed slot wakes the older one.
    await rig.kube.patch("sessions", "s1", {"spec": {"stopped": True}})
    await rig.reconcile("s1")
    await until(lambda: rig.status("sessions", "s2")["phase"] == "Starting", "s2 starts")
    await asyncio.sleep(0.2)
    st = rig.status("sessions", "s3")
    assert st["phase"] == "Pending" and st["reason"] == "NoSandboxSlot"
    rig.c.wakeups.stop()


async def test_a_slot_taken_is_counted_before_any_watch_event(tmp_path: Path) -> None:
    rig = await primed(tmp_path, max_sandboxes=1)
    rig.env()
    await rig.session("a", prompt="hi")
    await rig.session("b", prompt="hi")
    # No watch events at all: the cache knows a's sandbox from the operator's own write.
    await asyncio.gather(rig.reconcile("a"), rig.reconcile("b"))
    phases = sorted(rig.status("sessions", n)["phase"] for n in ("a", "b"))
    assert phases == ["Pending", "Starting"]
    rig.c.wakeups.stop()


async def test_an_environment_created_wakes_the_sessions_that_named_it(tmp_path: Path) -> None:
    rig = await primed(tmp_path)
    await rig.session("s", environment="later", prompt="hi")
    await rig.reconcile("s")
    assert rig.status("sessions", "s")["reason"] == "EnvironmentNotFound"
    body = {"apiVersion": API_VERSION, "kind": "Environment", "metadata": {"name": "later"}}
    await rig.kube.create("environments", {**body, "spec": {"image": "img"}})
    await until(lambda: rig.status("sessions", "s")["phase"] == "Starting", "the session starts")
    # The environment's count of sessions follows, without a timer.
    await until(lambda: rig.status("environments", "later").get("sessions") == 1, "counted", 5)
    rig.c.wakeups.stop()


async def test_a_sandbox_that_never_connects_is_released_at_its_deadline(tmp_path: Path) -> None:
    rig = await primed(tmp_path, connect_timeout=0.3)
    rig.env()
    await rig.session("s", prompt="hi")
    await rig.reconcile("s")
    assert rig.status("sessions", "s")["phase"] == "Starting"
    await until(lambda: not rig.status("sessions", "s")["sandbox"].get("pod"), "released", 5)
    assert "did not connect within" in rig.status("turns", "s-1").get("reason", "")
    rig.c.wakeups.stop()


async def test_the_sweeper_confirms_a_pod_gone_before_it_releases(tmp_path: Path) -> None:
    rig = await primed(tmp_path)
    rig.env()
    await rig.running("kept")
    await rig.running("lost")
    await rig.event("lost", "turn_started", turn="lost-1")  # the agent had it: the turn fails with the pod
    pods = {n: rig.status("sessions", n)["sandbox"]["pod"] for n in ("kept", "lost")}
    # The cache has seen neither pod (no watch events here): both look gone, only one is.
    await rig.kube.delete_core("pods", pods["lost"], grace_period_seconds=0)
    assert await rig.c.sweeper.sweep() == 2
    await until(lambda: not rig.status("sessions", "lost")["sandbox"].get("pod"), "lost released")
    assert rig.status("turns", "lost-1")["phase"] == "Failed"
    assert rig.status("sessions", "kept")["sandbox"]["pod"] == pods["kept"]
    assert rig.status("turns", "kept-1")["phase"] == "Running"
    # Once the cache has seen the pod, an idle sweep calls nothing at all.
    rig.ctx.cache.pod_seen("default", pods["kept"], "Running", deleted=False)
    await asyncio.sleep(0.2)
    before = len(rig.kube.writes)
    assert await rig.c.sweeper.sweep() == 0
    assert len(rig.kube.writes) == before
    rig.c.wakeups.stop()


async def test_a_status_patch_that_changes_nothing_is_not_sent(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    s = await rig.session("s")
    s = await patch_status(rig.kube, "sessions", s, {"message": "x"})
    before = len(rig.kube.writes)
    again = await patch_status(rig.kube, "sessions", s, {"message": "x"})
    assert len(rig.kube.writes) == before and again is s
    rv = s["metadata"]["resourceVersion"]  # a compare-and-set is sent all the same: the check is its point
    await patch_status(rig.kube, "sessions", s, {"message": "x"}, resource_version=rv)
    assert len(rig.kube.writes) == before + 1


@pytest.mark.parametrize("prime", [True, False], ids=["cache", "listing"])
async def test_a_burst_of_starts_takes_exactly_the_free_slots(tmp_path: Path, prime: bool) -> None:
    """Slots are reserved under the lock and made outside it: a burst starts side by side, never past the limit."""
    rig = await (primed(tmp_path, max_sandboxes=3) if prime else make_rig(tmp_path, max_sandboxes=3))
    rig.env()
    names = [f"b{i}" for i in range(8)]
    for n in names:
        await rig.session(n, prompt="hi")
    create = rig.kube.create_core

    async def slow_create(kind: str, body: dict[str, Any]) -> bool:
        await asyncio.sleep(0.01)  # as an apiserver call: the other starts run meanwhile
        return await create(kind, body)

    rig.kube.create_core = slow_create  # type: ignore[method-assign]
    await asyncio.gather(*(rig.c.sessions.reconcile("default", n) for n in names))
    phases = [rig.status("sessions", n)["phase"] for n in names]
    assert sorted(phases) == ["Pending"] * 5 + ["Starting"] * 3
    assert not rig.ctx.reserved
    rig.c.wakeups.stop()


async def test_a_connected_sandbox_has_no_connect_deadline_left(tmp_path: Path) -> None:
    """Else every session started in a burst is read again connect_timeout later, idle or not."""
    rig = await primed(tmp_path)
    rig.env()
    await rig.running("s")
    assert not [k for k in rig.c.wakeups.handles if k.endswith("/connect")]
    rig.c.wakeups.stop()
