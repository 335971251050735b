"""A warm claim after its status write (pools.py ``claim``, pool_claims.py ``after_claim``): a claim that wrote
its driver connected records what the hello's own path would (the ``driver_connected`` activity after
``sandbox_starting``, the connect metric, the Event) once, after the write; a failure among its later writes
fails closed; the refill comes after them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hangar.kube import ApiException
from hangar.models import labels as L
from hangar_operator import metrics

from .operator_rig import Rig
from .test_warm_claim_writes import claimed
from .test_warm_pools import members


def held(rig: Rig, plural: str) -> asyncio.Event:
    """Holds every create (secrets) or patch (persistentvolumeclaims) of ``plural`` until the event is set."""
    gate = asyncio.Event()
    create_core, patch_core = rig.kube.create_core, rig.kube.patch_core

    async def create(kind: str, body: dict[str, Any]) -> bool:
        if kind == plural:
            await gate.wait()
        return await create_core(kind, body)

    async def patch(kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if kind == plural:
            await gate.wait()
        return await patch_core(kind, name, body)

    rig.kube.create_core = create  # type: ignore[method-assign]
    rig.kube.patch_core = patch  # type: ignore[method-assign]
    return gate


async def kinds(rig: Rig, session: str = "s1") -> list[str]:
    return [e.kind for e in await rig.ctx.db.events(f"session/{session}")]


def connects() -> float:
    return sum(
        s.value for m in metrics.SANDBOX_CONNECT.collect() for s in m.samples if s.name.endswith("_count")
    )


async def test_a_claim_that_wrote_its_driver_connected_records_the_connect_once(tmp_path: Path) -> None:
    rig, name = await claimed(tmp_path)
    before = connects()
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["sandbox"]["connected"] is True
    # after the write, in a fresh sandbox's order: the start, then the connect
    assert await kinds(rig) == ["sandbox_starting", "driver_connected"]
    [connected] = [e for e in await rig.ctx.db.events("session/s1") if e.kind == "driver_connected"]
    assert connected.payload["run"] == "s1-r1"
    assert connects() == before + 1
    # the hello's on_connect, which waited for the lock, records nothing more and writes nothing
    writes = len(rig.kube.writes)
    await rig.c.router.on_connect("s1-r1", {"driver_version": "test"})
    assert await kinds(rig) == ["sandbox_starting", "driver_connected"]
    assert [w for w in rig.kube.writes[writes:] if "sessions" in str(w)] == []
    assert connects() == before + 1
    assert sorted(e for e in rig.events() if e[1].startswith("Sandbox")) == [
        ("s1", "SandboxConnected", f"warm sandbox {name} connected as s1-r1"),
        ("s1", "SandboxStarted", f"took warm sandbox pod {name}"),
    ]
    # a later reconnect of the same run (its connection dropped) is recorded as any is
    await rig.c.router.on_connect("s1-r1", {"driver_version": "test"})
    assert (await kinds(rig)).count("driver_connected") == 2
    assert rig.c.pools.recorded == set()


async def test_a_claim_written_starting_leaves_the_connect_to_the_hello(tmp_path: Path) -> None:
    rig, _ = await claimed(tmp_path)
    rig.connected.discard("s1-r1")  # type: ignore[attr-defined]  # the hello not back within the wait
    before = connects()
    await rig.reconcile("s1")
    assert rig.status("sessions", "s1")["phase"] == "Starting"
    assert await kinds(rig) == ["sandbox_starting"] and connects() == before
    assert rig.c.pools.recorded == set()
    await rig.c.router.on_connect("s1-r1", {"driver_version": "test"})
    st = rig.status("sessions", "s1")
    assert st["phase"] == "Idle" and st["sandbox"]["connected"] is True
    assert await kinds(rig) == ["sandbox_starting", "driver_connected"] and connects() == before + 1


async def test_a_claims_failed_write_after_its_status_removes_the_pod_and_refills(tmp_path: Path) -> None:
    rig, name = await claimed(tmp_path)
    patch_core = rig.kube.patch_core

    async def refuse(kind: str, obj: str, body: dict[str, Any]) -> dict[str, Any]:
        if kind == "persistentvolumeclaims":
            raise ApiException(status=500, reason="etcd away")
        return await patch_core(kind, obj, body)

    rig.kube.patch_core = refuse  # type: ignore[method-assign]
    woken: list[tuple[str, str]] = []
    rig.c.pools.wake = lambda ns, env, when=0.0: woken.append((ns, env))  # type: ignore[method-assign]
    with pytest.raises(ApiException):
        await rig.reconcile("s1")
    # fail closed: the pod the status names is deleted (its watch releases the sandbox), the pool refills
    assert rig.kube.peek("pods", name) is None
    assert woken == [("default", "dev")]
    assert rig.c.pools.recorded == set()  # no connect is left recorded for a hello that will not come


async def test_the_refill_comes_after_the_claims_writes(tmp_path: Path) -> None:
    rig, name = await claimed(tmp_path)
    gate = held(rig, "persistentvolumeclaims")
    woken: list[tuple[str, str]] = []
    rig.c.pools.wake = lambda ns, env, when=0.0: woken.append((ns, env))  # type: ignore[method-assign]
    task = asyncio.create_task(rig.reconcile("s1"))
    for _ in range(50):
        await asyncio.sleep(0)
    assert rig.status("sessions", "s1")["sandbox"]["pod"] == name  # written
    assert woken == []  # the volume's re-owning still on its way
    gate.set()
    await task
    assert woken == [("default", "dev")]
    assert L.POOL not in rig.get("persistentvolumeclaims", f"{name}-workspace")["metadata"]["labels"]
    assert members(rig) == []  # (the rig's wakeups are off: the test's look refills)
