"""A call that asks is pending from the Approval's create (one apiserver write before a person sees it): the
operator stamps the times its status will hold on the Approval it creates, and the API lists it, shows those
times and takes a decision before the status is written. Exactly once and the order hold all the same."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hangar.kube import Obj
from hangar.models import Approval
from hangar.models import labels as L
from hangar.models.approval import waiting
from hangar.testing.fake_kube import FakeKube
from hangar_api.approvals import _requested, approval_view, pending_and_recent, refusal
from hangar_operator.approvals import approval_name
from tests.unit.operator_rig import Rig, make_rig


async def asking(rig: Rig, policy: str = "ask", timeout: int = 600) -> None:
    rig.env(approvalTimeoutSeconds=timeout)
    await rig.running("s1", approvals=policy)


def before_status(monkeypatch: pytest.MonkeyPatch, then: Any = None) -> list[Obj]:
    """Each Approval as stored just before the operator's first status write to it (what the API's watch has
    after the create alone); ``then(name)`` runs at that moment (a person deciding, say)."""
    seen: list[Obj] = []
    patch_status = FakeKube.patch_status

    async def spied(
        self: FakeKube, plural: str, name: str, status: Obj, resource_version: str | None = None
    ) -> Obj:
        if plural == "approvals" and not any(s["metadata"]["name"] == name for s in seen):
            stored = self.peek("approvals", name)
            assert stored is not None
            seen.append(stored)
            if then is not None:
                await then(name)
        return await patch_status(self, plural, name, status, resource_version)

    monkeypatch.setattr(FakeKube, "patch_status", spied)
    return seen


async def test_a_call_that_asks_is_listed_pending_from_its_create_with_its_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    await asking(rig, timeout=300)
    seen = before_status(monkeypatch)
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r1", tool="Bash", command="rm -rf x")
    [created] = seen
    assert "status" not in created or not (created.get("status") or {}).get("phase")
    assert _requested(Approval.model_validate(created), ["s1"]) and refusal(created) is None
    pending, recent = pending_and_recent([created], 10)
    assert recent == [] and [p["id"] for p in pending] == [created["metadata"]["name"]]
    view = pending[0]
    assert view["phase"] == "Pending" and view["command"] == "rm -rf x"
    # The times it is shown with are the ones its status then holds.
    st = rig.status("approvals", view["id"])
    assert st["phase"] == "Pending"
    assert (view["requested_at"], view["deadline"]) == (st["requestedAt"], st["deadline"])
    assert approval_view(rig.get("approvals", view["id"]))["requested_at"] == view["requested_at"]
    requested, deadline = (datetime.fromisoformat(st[k]) for k in ("requestedAt", "deadline"))
    assert deadline - requested == timedelta(seconds=300)


async def test_one_without_the_operators_stamp_is_not_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A denial the policy resolves is created without the stamp (its status says Denied a moment later),
    and one made by hand has neither: neither is ever listed as pending."""
    rig = await make_rig(tmp_path)
    await asking(rig, policy="deny-risky")
    seen = before_status(monkeypatch)
    await rig.event(
        "s1", "permission_request", turn="s1-1", request_id="r9", tool="Bash", command="git push --force"
    )
    [created] = seen
    assert not waiting(Approval.model_validate(created))
    assert not _requested(Approval.model_validate(created), ["s1"])
    assert rig.status("approvals", created["metadata"]["name"])["phase"] == "Denied"
    by_hand = {**created, "metadata": {"name": "ap-000000000001", "labels": created["metadata"]["labels"]}}
    forged = {**by_hand, "metadata": {**by_hand["metadata"], "annotations": {L.REQUESTED_AT: "soon"}}}
    for obj in (by_hand, forged):
        assert pending_and_recent([obj], 10)[0] == [] and not _requested(Approval.model_validate(obj), ["s1"])


async def test_a_decision_made_before_the_status_is_written_is_delivered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    await asking(rig)

    events: list[asyncio.Task[None]] = []

    async def decide(name: str) -> None:  # what the API writes (a compare-and-set on spec.decision)
        await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
        # Its watch event, handled beside the driver's event (it waits for the session's lock).
        seen = rig.get("approvals", name)
        events.append(asyncio.create_task(rig.c.approvals.reconcile("default", name, seen)))

    before_status(monkeypatch, then=decide)
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r1", tool="Bash", command="rm -rf x")
    name = approval_name(rig.run_id("s1"), "r1")
    await asyncio.gather(*events)
    # The status write's watch event, and a repeated one: nothing more is sent.
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    await rig.c.approvals.reconcile("default", name)
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and st["by"] == "ann" and st["resolvedBy"] == "person"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1
    assert refusal(rig.get("approvals", name)) is not None  # a second decision: 409


async def test_one_whose_status_was_refused_is_withdrawn_with_its_turn(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    await asking(rig)
    rig.kube.fail_next("patch_status", "approvals", 422)  # refused for good: the event is recorded failed
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r1", tool="Bash", command="rm -rf x")
    name = approval_name(rig.run_id("s1"), "r1")
    obj = rig.get("approvals", name)
    assert waiting(Approval.model_validate(obj)) and not (obj.get("status") or {}).get("phase")
    await rig.event("s1", "turn_ended", turn="s1-1", outcome="completed")
    obj = rig.get("approvals", name)
    assert obj["status"]["phase"] == "Withdrawn" and not waiting(Approval.model_validate(obj))
    pending, recent = pending_and_recent([obj], 10)
    assert pending == [] and [r["phase"] for r in recent] == ["Withdrawn"]


async def test_an_event_applied_again_keeps_the_times_it_was_first_shown_with(tmp_path: Path) -> None:
    """The status write failed (the apiserver away): the event is not acknowledged and comes again; the
    Approval exists, and its status takes the times it has been listed with since its create."""
    rig = await make_rig(tmp_path)
    await asking(rig)
    run = rig.run_id("s1")
    payload = {"turn": "s1-1", "request_id": "r1", "tool": "Bash", "command": "rm -rf x"}
    rig.kube.fail_next("patch_status", "approvals", 503)
    with pytest.raises(Exception):  # noqa: B017 - whatever the apiserver said: not acknowledged
        await rig.c.router.on_event(run, 50, "permission_request", payload)
    name = approval_name(run, "r1")
    shown = approval_view(rig.get("approvals", name))
    assert shown["phase"] == "Pending" and shown["requested_at"]
    assert datetime.fromisoformat(shown["requested_at"]) <= datetime.now(UTC)
    await rig.c.router.on_event(run, 50, "permission_request", payload)
    st = rig.status("approvals", name)
    assert st["phase"] == "Pending"
    assert (st["requestedAt"], st["deadline"]) == (shown["requested_at"], shown["deadline"])
    await rig.c.approvals.pending.settled()
    assert [p["id"] for p in rig.status("sessions", "s1")["pendingApprovals"]] == [name]


async def test_the_pending_list_keeps_the_order_they_were_asked_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    await asking(rig)
    seen = before_status(monkeypatch)
    for rid in ("r1", "r2", "r3"):
        await rig.event("s1", "permission_request", turn="s1-1", request_id=rid, tool="Bash", command=rid)
        await asyncio.sleep(0.005)  # the stamps have milliseconds
    names = [approval_name(rig.run_id("s1"), rid) for rid in ("r1", "r2", "r3")]
    # r1 and r2 with their status written, r3 as just created.
    items = [seen[2], rig.get("approvals", names[1]), rig.get("approvals", names[0])]
    pending, _ = pending_and_recent(items, 10)
    assert [p["id"] for p in pending] == names


async def test_the_sandboxs_time_is_shown_from_the_create_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything the pending view shows is there from the create: a client that sees the approval pending
    before its status is written also sees when the sandbox says its agent asked (the same value)."""
    rig = await make_rig(tmp_path)
    await asking(rig)
    await asyncio.sleep(0.05)  # the turn began before the time the sandbox claims (else it is not kept)
    seen = before_status(monkeypatch)
    asked = datetime.now(UTC).timestamp() - 0.01
    await rig.event(
        "s1",
        "permission_request",
        turn="s1-1",
        request_id="r1",
        tool="Bash",
        command="rm -rf x",
        asked_at=asked,
    )
    [created] = seen
    early = approval_view(created)
    st = rig.status("approvals", early["id"])
    assert early["sandbox_asked_at"] and early["sandbox_asked_at"] == st["sandboxAskedAt"]
    assert early["sandbox_asked_at"] <= early["requested_at"]
    # A call without the sandbox's word has none, before or after its status.
    seen.clear()
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r2", tool="Bash", command="rm -rf y")
    [plain] = seen
    assert approval_view(plain)["sandbox_asked_at"] is None
    assert approval_view(rig.get("approvals", plain["metadata"]["name"]))["sandbox_asked_at"] is None
