"""The Approval controller on a FakeKube: Pending, then decided by a person, expired or withdrawn, once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hangar_operator.approvals import approval_name
from tests.unit.operator_rig import Rig, count_reads, make_rig


async def asked(rig: Rig, session: str, request_id: str = "r1", timeout: int | None = None) -> str:
    if timeout:
        rig.env(approvalTimeoutSeconds=timeout)
    else:
        rig.env()
    turn = await rig.running(session, approvals="ask")
    await rig.event(
        session, "permission_request", turn=turn, request_id=request_id, tool="Bash", command="rm -rf x"
    )
    name = approval_name(rig.run_id(session), request_id)
    st = rig.status("approvals", name)
    assert st["phase"] == "Pending" and rig.condition("approvals", name)["reason"] == "Pending"
    pending = rig.status("sessions", session)["pendingApprovals"]
    assert [p["id"] for p in pending] == [name]
    return name


async def test_a_person_allows_and_the_answer_goes_to_the_driver_once(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    await rig.c.approvals.reconcile("default", name)
    await rig.c.approvals.reconcile("default", name)  # a repeated event decides nothing twice
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and st["by"] == "ann" and st["resolvedBy"] == "person"
    assert rig.condition("approvals", name)["status"] == "True"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1
    await rig.c.approvals.pending.settled()
    assert rig.status("sessions", "s1").get("pendingApprovals") in (None, [])
    await rig.event("s1", "command_result", op="answer", ok=True, command_id=f"answer-{name}")
    await rig.c.approvals.deliveries.settled()  # recorded on its own task (approvals/delivery.py)
    assert rig.status("approvals", name)["deliveredAt"]


async def test_an_unanswered_approval_expires_and_says_so(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1", timeout=1)
    # Up to 20 s: the timer fires at 1 s, but a loaded machine may run it late. The Events are written after
    # the status (a failed one loses nothing the status says), so the wait is for both, not the phase alone.
    for _ in range(400):
        await asyncio.sleep(0.05)
        timed_out = {o for (o, r, _) in rig.events() if r == "ApprovalTimedOut"}
        if rig.status("approvals", name)["phase"] != "Pending" and timed_out >= {name, "s1"}:
            break
    st = rig.status("approvals", name)
    assert st["phase"] == "Expired" and st["resolvedBy"] == "timeout" and st["decision"] == "deny"
    assert {o for (o, r, _) in rig.events() if r == "ApprovalTimedOut"} == {name, "s1"}


async def test_the_turns_end_withdraws_its_pending_approvals(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.event("s1", "turn_ended", turn="s1-1", outcome="interrupted")
    st = rig.status("approvals", name)
    assert st["phase"] == "Withdrawn" and st["reason"] == "the turn ended"
    # A decision arriving after that changes nothing.
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow"}})
    await rig.c.approvals.reconcile("default", name)
    assert rig.status("approvals", name)["phase"] == "Withdrawn"


async def test_deny_risky_answers_at_once_and_records_a_denial(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1", approvals="deny-risky")
    await rig.event(
        "s1", "permission_request", turn=turn, request_id="r9", tool="Bash", command="git push --force"
    )
    name = approval_name("s1-r1", "r9")
    st = rig.status("approvals", name)
    assert st["phase"] == "Denied" and st["resolvedBy"] == "policy"
    assert f"answer-{name}" in rig.commands("s1-r1")


async def test_a_decision_seen_in_its_event_is_delivered_with_one_read_of_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch event's Approval is the first look (a person waits on the answer): the Approval is not read
    again, the session once (sandbox gone? held for Tower?), and the answer goes out once."""
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    seen = await rig.kube.patch("approvals", name, {"spec": {"decision": "deny", "decidedBy": "ann"}})
    reads = count_reads(monkeypatch)
    await rig.c.approvals.reconcile("default", name, seen)
    assert reads.count("approvals") == 0 and reads.count("sessions") <= 2  # the second: _resolved's
    st = rig.status("approvals", name)
    assert st["phase"] == "Denied" and st["by"] == "ann" and st["resolvedBy"] == "person"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1
    # A later event showing the Approval decided is read afresh: nothing is sent or written again.
    writes = len(rig.kube.writes)
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    assert len(rig.kube.writes) == writes and rig.commands("s1-r1").count(f"answer-{name}") == 1


async def test_delivered_at_is_when_the_drivers_word_arrived_not_when_the_lock_came_free(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    await rig.c.approvals.reconcile("default", name)
    holding, release = asyncio.Event(), asyncio.Event()

    async def busy() -> None:  # the operator still writing under the session's lock
        async with rig.ctx.lock("default", "s1"):
            holding.set()
            await release.wait()

    task = asyncio.create_task(busy())
    await holding.wait()
    arrived = datetime.now(UTC)
    confirm = asyncio.create_task(
        rig.event("s1", "command_result", op="answer", ok=True, command_id=f"answer-{name}")
    )
    await asyncio.sleep(0.5)
    release.set()
    await asyncio.gather(task, confirm)
    await rig.c.approvals.deliveries.settled()
    delivered = datetime.fromisoformat(rig.status("approvals", name)["deliveredAt"])
    assert arrived <= delivered + timedelta(milliseconds=1) < arrived + timedelta(milliseconds=400)


async def test_a_decision_looks_at_the_cached_session_and_reads_it_only_to_confirm_a_gone_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.ctx.resync_cache()
    assert rig.ctx.cache.primed
    seen = await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    # The cache (wrongly) says the sandbox that asked is gone: the session is read before anything is
    # withdrawn, and the decision is delivered.
    stale = rig.get("sessions", "s1")
    stale["status"]["sandbox"]["run"] = "someone-else"
    rig.ctx.cache.objs["sessions"][("default", "s1")] = stale
    reads = count_reads(monkeypatch)
    await rig.c.approvals.reconcile("default", name, seen)
    st = rig.status("approvals", name)
    assert st["phase"] == "Allowed" and st["resolvedBy"] == "person"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1
    assert reads[:1] == ["sessions"]  # the confirming read, before the decision
    # Cached as it is: no read of the session before the answer goes out.
    name2 = approval_name(rig.run_id("s1"), "r2")
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r2", tool="Bash", command="rm -rf y")
    seen2 = await rig.kube.patch("approvals", name2, {"spec": {"decision": "deny", "decidedBy": "ann"}})
    reads.clear()
    sent_before: list[str] = []

    async def watched_answer(*args: object, **kw: object) -> None:
        sent_before.extend(reads)
        await answer(*args, **kw)  # type: ignore[arg-type]

    answer = rig.c.approvals.answer
    monkeypatch.setattr(rig.c.approvals, "answer", watched_answer)
    await rig.c.approvals.reconcile("default", name2, seen2)
    assert rig.status("approvals", name2)["phase"] == "Denied"
    assert "sessions" not in sent_before and "approvals" not in sent_before
