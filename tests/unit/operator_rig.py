"""The operator's controllers on an in-process FakeKube, a real (unstarted) Gateway and a SQLite database.

Commands the controllers send wait in the gateway's queue (``rig.commands(run)``); a driver's events are
fed to the router as the gateway would (``rig.event``). Time-based parts (interrupt grace, approval
deadlines) use short settings so each test stays fast.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from hangar.config import Settings
from hangar.kube import Obj
from hangar.models import API_VERSION
from hangar.store import open_database
from hangar.testing.fake_kube import FakeKube
from hangar_operator.controllers import Controllers, build
from hangar_operator.retry import Retrier


class Rig:
    def __init__(self, c: Controllers, kube: FakeKube) -> None:
        self.c = c
        self.kube = kube
        self.seq: dict[str, itertools.count[int]] = {}

    async def close(self) -> None:
        """Stop what the controllers left running and close the database. The tests share one event loop:
        a wake-up or retry still pending would otherwise run on during the next test."""
        await self.c.stop()
        await self.ctx.db.close()

    @property
    def ctx(self) -> Any:
        return self.c.ctx

    def env(self, name: str = "dev", ns: str = "default", **spec: Any) -> None:
        self.kube.scoped(ns).seed(
            "environments",
            {
                "apiVersion": API_VERSION,
                "kind": "Environment",
                "metadata": {"name": name},
                "spec": {"image": "img", **spec},
            },
        )

    async def session(self, name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "Session",
            "metadata": {"name": name},
            "spec": {"environment": "dev", **spec},
        }
        return await self.kube.scoped(ns).create("sessions", body)

    def get(self, plural: str, name: str, ns: str = "default") -> dict[str, Any]:
        obj = self.kube.scoped(ns).peek(plural, name)
        assert obj is not None, f"{plural}/{name} in {ns} is gone"
        return obj

    def status(self, plural: str, name: str, ns: str = "default") -> dict[str, Any]:
        return dict(self.get(plural, name, ns).get("status") or {})

    def condition(self, plural: str, name: str, ns: str = "default") -> dict[str, Any]:
        return next(c for c in self.status(plural, name, ns)["conditions"] if c["type"] == "Ready")

    def events(self, ns: str = "default") -> list[tuple[str, str, str]]:
        """(involved object's name, reason, message) of every Kubernetes Event posted in ``ns``."""
        out = []
        for name in self.kube.scoped(ns).names("events"):
            e = self.kube.scoped(ns).peek("events", name) or {}
            out.append((e["involvedObject"]["name"], e["reason"], e["message"]))
        return out

    def run_id(self, session: str, ns: str = "default") -> str:
        held = self.ctx.held._held.get((ns, session))  # a Starting write held for the driver's hello
        pod = held.run_pod if held else self.status("sessions", session, ns)["sandbox"]["run"]
        run = self.ctx.run_of(ns, pod)
        assert run is not None
        return str(run.id)

    def commands(self, run_id: str) -> list[str]:
        return self.ctx.gateway.pending_commands(run_id)

    async def reconcile(self, session: str, ns: str = "default") -> None:
        await self.c.sandboxes.check(ns, session)
        await self.c.sessions.reconcile(ns, session)

    async def event(self, session: str, name: str, ns: str = "default", **payload: Any) -> None:
        run = self.run_id(session, ns)
        seq = next(self.seq.setdefault(run, itertools.count(1)))
        await self.c.router.on_event(run, seq, name, payload)
        await self.c.approvals.pending.settled()  # the session's record of its approvals: written on a task

    async def connect(self, session: str, ns: str = "default") -> None:
        await self.c.router.on_connect(self.run_id(session, ns), {"driver_version": "test"})

    async def running(self, session: str, ns: str = "default", **spec: Any) -> str:
        """A session whose sandbox is connected and whose first turn (its prompt) runs."""
        await self.session(session, ns, prompt="hello", **spec)
        await self.reconcile(session, ns)
        await self.connect(session, ns)
        assert self.status("turns", f"{session}-1", ns)["phase"] == "Running"
        return f"{session}-1"


async def make_rig(
    tmp_path: Path, *, snapshot_api: bool = False, start_hold: float = 0.0, **settings: Any
) -> Rig:
    """``snapshot_api``: the cluster serves VolumeSnapshots (the CSI snapshot API). ``start_hold``: seconds a
    new run's Starting write waits for its driver's hello (held_starts.py; the operator's 0.5). 0 here: a
    test reads the status the start wrote at once, as it was before the hold."""
    base = {
        "namespace": "default",
        "watch_namespaces": ("default",),
        "database_url": f"sqlite:///{tmp_path / 'hangar.db'}",
        "interrupt_grace": 0.2,
        "max_sandboxes": 10,
    }
    base.update(settings)
    kube = FakeKube("default", snapshot_api=snapshot_api)
    db = await open_database(str(base["database_url"]))
    c = build(kube, db, Settings(**base), Retrier(first_delay=0.05, max_delay=0.2))
    c.sandboxes.start_hold = start_hold
    rig = Rig(c, kube)
    OPEN.append(rig)
    return rig


OPEN: list[Rig] = []  # closed after each test (tests/conftest.py)


async def close_open_rigs() -> None:
    while OPEN:
        await OPEN.pop().close()


def hold_status_writes(monkeypatch: pytest.MonkeyPatch, plural: str, field: str) -> asyncio.Event:
    """The apiserver slow to take a status write of ``plural`` that holds ``field``: each such write waits
    for the event returned (set it to let them through)."""
    release = asyncio.Event()
    patch_status = FakeKube.patch_status

    async def held(
        self: FakeKube, plural_: str, name: str, status: Obj, resource_version: str | None = None
    ) -> Obj:
        if plural_ == plural and field in status:
            await release.wait()
        return await patch_status(self, plural_, name, status, resource_version)

    monkeypatch.setattr(FakeKube, "patch_status", held)
    return release


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The plural of every object the code under test reads (``get``) from now on, in order."""
    reads: list[str] = []
    get = FakeKube.get

    async def counted(self: FakeKube, plural: str, name: str) -> Obj | None:
        reads.append(plural)
        return await get(self, plural, name)

    monkeypatch.setattr(FakeKube, "get", counted)
    return reads
