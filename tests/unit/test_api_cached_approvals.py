"""The job approval routes and MCP's ``wait_for_turn`` read a job's or session's Approvals through the API's
watch-fed cache (``watch_cache.py``) when it can say, and their own decisions are applied to it at once
(read your writes); a cache that can't say (not listed, not watching) is passed by for the apiserver."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hangar.kube import Obj
from hangar.models import API_VERSION
from hangar.store import open_database
from hangar.testing.fake_kube import FakeKube
from hangar_api.auth import Caller
from hangar_api.mcp import answers, inbox, waiting
from hangar_api.mcp.common import Hub, Target
from hangar_api.watch_cache import ApiCache, api_cache_of
from tests.unit.api_rig import ALICE, api_rig

APPROVAL = "ap-0123456789ab"


class CountingKube(FakeKube):
    """The fake apiserver, counting the reads of Approvals."""

    def __init__(self) -> None:
        super().__init__()
        self.approval_reads: list[str] = []

    async def list(self, plural: str, label_selector: str | None = None) -> list[Obj]:
        if plural == "approvals":
            self.approval_reads.append("list")
        return await super().list(plural, label_selector)

    async def get(self, plural: str, name: str) -> Obj | None:
        if plural == "approvals":
            self.approval_reads.append("get")
        return await super().get(plural, name)


def seed(k: FakeKube, *, just_created: bool = False) -> None:
    """A job, its session and one call that asks: Pending, or (``just_created``) as the operator creates it,
    stamped with when it was asked, its status not written yet."""
    job = k.seed(
        "jobs",
        {
            "apiVersion": API_VERSION,
            "kind": "Job",
            "metadata": {"name": "j1"},
            "spec": {"submitter": "alice", "prompt": "p", "environment": "default"},
            "status": {"state": "awaiting_approval"},
        },
    )
    owner = {"apiVersion": API_VERSION, "kind": "Job", "name": "j1", "uid": job["metadata"]["uid"]}
    k.seed(
        "sessions",
        {
            "apiVersion": API_VERSION,
            "kind": "Session",
            "metadata": {"name": "j1-a1", "labels": {"hangar.dev/job": "j1"}, "ownerReferences": [owner]},
            "spec": {"harness": "claude", "environment": "default"},
            "status": {"phase": "Running"},
        },
    )
    k.seed(
        "approvals",
        {
            "apiVersion": API_VERSION,
            "kind": "Approval",
            "metadata": {"name": APPROVAL, "labels": {"hangar.dev/session": "j1-a1"}},
            "spec": {
                "session": "j1-a1",
                "turn": "j1-a1-1",
                "requestId": "r1",
                "tool": "Bash",
                "command": "rm -rf build",
                "argsHash": "h",
                "policy": "ask",
            },
            "status": {"phase": "Pending", "requestedAt": "2026-12-02T06:00:00Z"},
        },
    )
    if just_created:
        approval = k.peek("approvals", APPROVAL) or {}
        k.server.objects.pop(k._key("approvals", APPROVAL))
        approval.pop("status")
        approval["metadata"] = {
            "name": APPROVAL,
            "labels": {"hangar.dev/session": "j1-a1"},
            "annotations": {"hangar.dev/requested-at": "2026-12-02T06:00:00Z"},
        }
        k.seed("approvals", approval)
        by_hand = {**approval, "metadata": {"name": "ap-by-hand", "labels": {"hangar.dev/session": "j1-a1"}}}
        k.seed("approvals", by_hand)


def prime(cache: ApiCache, k: FakeKube) -> None:
    """The cache listed (as its stream would at start) and watching."""
    items, rv = asyncio.run(k.list_at("approvals"))
    cache.approvals.relist(items, rv)
    cache.approvals.watching = True


def test_the_job_approval_routes_read_the_cache_and_see_their_own_decision(tmp_path: Path) -> None:
    k = CountingKube()
    seed(k)
    with api_rig(tmp_path, kube=k) as rig:
        # Not listed yet: the apiserver is asked.
        r = rig.get("/api/jobs/j1/approvals", token=ALICE)
        assert r.status_code == 200 and [a["id"] for a in r.json()["pending"]] == [APPROVAL]
        assert k.approval_reads == ["list"]
        prime(rig.client.app.state.api_cache, k)  # type: ignore[attr-defined]
        k.approval_reads.clear()
        r = rig.get("/api/jobs/j1/approvals", token=ALICE)
        assert [a["id"] for a in r.json()["pending"]] == [APPROVAL]
        r = rig.get(f"/api/jobs/j1/approvals/{APPROVAL}", token=ALICE)
        assert r.status_code == 200 and r.json()["decision"] is None
        r = rig.post(f"/api/jobs/j1/approvals/{APPROVAL}", {"decision": "deny"}, token=ALICE)
        assert r.status_code == 200, r.text
        assert k.approval_reads == [], "a cached approval was read from the apiserver"
        # No watch runs here: only the route's own write can have told the cache of the decision.
        r = rig.get(f"/api/jobs/j1/approvals/{APPROVAL}", token=ALICE)
        assert r.json()["decision"] == "deny" and r.json()["by"] == "alice"
        r = rig.post(f"/api/jobs/j1/approvals/{APPROVAL}", {"decision": "allow"}, token=ALICE)
        assert r.status_code == 409 and "already decided: deny by alice" in r.json()["detail"]
        assert k.approval_reads == []


def test_a_cache_that_cannot_say_is_passed_by(tmp_path: Path) -> None:
    k = CountingKube()
    seed(k)
    with api_rig(tmp_path, kube=k) as rig:
        cache = rig.client.app.state.api_cache  # type: ignore[attr-defined]
        prime(cache, k)
        cache.approvals.watching = False  # its watch broke: what it holds may be stale
        k.set_status("approvals", APPROVAL, {"phase": "Expired", "message": "no decision in time"})
        r = rig.get("/api/jobs/j1/approvals", token=ALICE)
        assert r.json()["pending"] == [] and [a["phase"] for a in r.json()["recent"]] == ["Expired"]
        r = rig.post(f"/api/jobs/j1/approvals/{APPROVAL}", {"decision": "allow"}, token=ALICE)
        assert r.status_code == 409 and "expired" in r.json()["detail"]
        assert "list" in k.approval_reads and "get" in k.approval_reads


@pytest.mark.parametrize("kind, name", [("job", "j1"), ("session", "j1-a1")])
async def test_wait_for_turn_reads_the_cache_and_does_not_ask_again_what_it_decided(
    tmp_path: Path, kind: Any, name: str
) -> None:
    k = CountingKube()
    seed(k)
    db = await open_database(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        hub = Hub(SimpleNamespace(kube=k, db=db))
        items, rv = await k.list_at("approvals")
        cache = api_cache_of(hub.state)
        cache.approvals.relist(items, rv)
        cache.approvals.watching = True
        target = Target(kind, name, await k.get(f"{kind}s", name) or {})
        snap = await waiting.snapshot(hub, target)
        assert [a["metadata"]["name"] for a in snap.pending] == [APPROVAL]
        got = await answers.decide(
            hub, Caller("bob", "admin"), snap.names, target, APPROVAL, answers.ApprovalForm(decision="allow")
        )
        assert got["outcome"] == "answered"
        # No watch runs: the decision reached the cache with its write, so the next look has nothing to ask.
        snap = await waiting.snapshot(hub, target)
        assert snap.pending == []
        assert k.approval_reads == [], "wait_for_turn read the Approvals from the apiserver"
    finally:
        await db.close()


@pytest.mark.parametrize("kind, name", [("job", "j1"), ("session", "j1-a1")])
async def test_mcp_sees_a_call_that_asks_from_its_approvals_create_as_rest_does(
    tmp_path: Path, kind: Any, name: str
) -> None:
    """The operator creates a call that asks stamped with when it was asked; its status (Pending) follows one
    write later. REST lists it pending from the create; MCP's inbox and ``wait_for_turn`` must too. An
    Approval made by hand (no status, no stamp) is not waiting on anyone."""
    k = CountingKube()
    seed(k, just_created=True)
    db = await open_database(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        hub = Hub(SimpleNamespace(kube=k, db=db))
        target = Target(kind, name, await k.get(f"{kind}s", name) or {})
        snap = await waiting.snapshot(hub, target)
        assert [a["metadata"]["name"] for a in snap.pending] == [APPROVAL]
        box = await inbox.read(hub, Caller("alice", "admin"))
        listed = [i["approval"] for i in box["items"] if i["kind"] == "approval"]
        assert [(a["id"], a["phase"], a["requested_at"]) for a in listed] == [
            (APPROVAL, "Pending", "2026-12-02T06:00:00.000Z")
        ]
        got = await answers.decide(
            hub, Caller("bob", "admin"), snap.names, target, APPROVAL, answers.ApprovalForm(decision="deny")
        )
        assert got["outcome"] == "answered", got
        assert (k.peek("approvals", APPROVAL) or {})["spec"]["decision"] == "deny"
    finally:
        await db.close()


def test_the_session_and_job_views_list_an_approval_their_status_does_not_list_yet(tmp_path: Path) -> None:
    """The operator writes a session's ``pendingApprovals`` (and its job's) after the Approval, off the
    session's lock: GET of the session or the job reads the Approvals themselves, as ``wait_for_turn`` does,
    so neither misses one ``wait_for_turn`` has just reported; one decided but not applied waits on nobody."""
    k = CountingKube()
    seed(k)  # the session's and the job's status list no approval
    with api_rig(tmp_path, kube=k) as rig:
        s = rig.get("/api/sessions/j1-a1").json()
        assert [
            (p["id"], p["session"], p["turn"], p["tool"], p["command"]) for p in s["pending_approvals"]
        ] == [(APPROVAL, None, "j1-a1-1", "Bash", "rm -rf build")]
        j = rig.get("/api/jobs/j1", token=ALICE).json()
        assert [(p["id"], p["session"]) for p in j["pending_approvals"]] == [(APPROVAL, "j1-a1")]
        r = rig.post(f"/api/jobs/j1/approvals/{APPROVAL}", {"decision": "deny"}, token=ALICE)
        assert r.status_code == 200, r.text
        assert rig.get("/api/sessions/j1-a1").json()["pending_approvals"] == []
        assert rig.get("/api/jobs/j1", token=ALICE).json()["pending_approvals"] == []
