"""The session's ``pendingApprovals`` written off its lock, in order (``approvals/pending_writer.py``), and a
decision's answer sent once however many watch events lead to it."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hangar.kube import Obj
from hangar.models.session import Counters
from hangar_operator.approvals import approval_name
from hangar_operator.approvals.controller import Approvals
from hangar_operator.approvals.pending_writer import Change, apply
from tests.unit.operator_rig import Rig, hold_status_writes, make_rig

from .test_approval_controller import asked


def entry(i: str) -> dict[str, Any]:
    """A session's record of an approval, as the request writes it."""
    return {"id": i, "turn": "s1-1", "tool": "Bash", "command": f"echo {i}"}


def add(i: str) -> Change:
    return Change("add", entry={"id": i, "tool": "Bash"})


def drop(i: str) -> Change:
    return Change("drop", id=i)


COUNT = Change("count")


def ids(pending: list[dict[str, Any]]) -> list[str]:
    return [p["id"] for p in pending]


@pytest.mark.parametrize(
    ("before", "changes", "after", "counted"),
    [
        ([], [], [], 0),
        ([], [add("a")], ["a"], 0),
        ([], [add("a"), COUNT], ["a"], 1),
        (["a"], [add("a")], ["a"], 0),  # listed already (an event applied again): not twice
        (["a"], [drop("a")], [], 0),
        (["a"], [drop("b")], ["a"], 0),  # dropping what is not listed changes nothing
        ([], [add("a"), drop("a")], [], 0),  # asked and decided before the first write: never shown
        ([], [drop("a"), add("a")], ["a"], 0),  # the order asked is the order applied
        (["a"], [add("b"), add("c"), drop("b")], ["a", "c"], 0),
        (["a", "b"], [drop("a"), add("c"), COUNT, drop("b"), COUNT], ["c"], 2),
        (["a"], [add("b"), add("a")], ["a", "b"], 0),  # listed in the order first asked
        ([], [COUNT, COUNT, COUNT], [], 3),
    ],
)
def test_apply(before: list[str], changes: list[Change], after: list[str], counted: int) -> None:
    pending, n = apply([{"id": i} for i in before], 5, changes)
    assert ids(pending) == after and n == 5 + counted


def test_apply_leaves_its_input_alone() -> None:
    before = [{"id": "a"}]
    apply(before, 0, [drop("a"), add("b")])
    assert before == [{"id": "a"}]


changes_st = st.lists(
    st.one_of(
        st.sampled_from("abcd").map(add),
        st.sampled_from("abcd").map(drop),
        st.just(COUNT),
    ),
    max_size=20,
)


@given(changes_st, st.lists(st.integers(0, 20), max_size=5))
def test_a_burst_written_at_once_is_what_one_write_per_change_makes(
    changes: list[Change], cuts: list[int]
) -> None:
    one_by_one: tuple[list[dict[str, Any]], int] = ([], 0)
    for c in changes:
        one_by_one = apply(*one_by_one, [c])
    batched: tuple[list[dict[str, Any]], int] = ([], 0)
    bounds = sorted({0, len(changes), *(min(c, len(changes)) for c in cuts)})
    for lo, hi in itertools.pairwise(bounds):
        batched = apply(*batched, changes[lo:hi])
    assert batched == one_by_one


# --- the writer, on the fake apiserver ---------------------------------------------------------------------


def session_writes(rig: Rig, session: str = "s1") -> list[Obj]:
    return [
        w.body
        for w in rig.kube.writes
        if w.verb == "patch_status" and w.name == session and "pendingApprovals" in (w.body or {})
    ]


async def test_a_burst_queued_while_a_write_is_out_goes_in_one_more_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    await asked(rig, "s1")
    release = hold_status_writes(monkeypatch, "sessions", "pendingApprovals")
    w = rig.c.approvals.pending
    before = len(session_writes(rig))
    w.add("default", "s1", entry("x1"), count=True)
    await asyncio.sleep(0.05)  # the first write is out and held
    for i in range(2, 6):
        w.add("default", "s1", entry(f"x{i}"), count=True)
    w.drop("default", "s1", "x3")
    release.set()
    await asyncio.wait_for(w.settled(), 5)
    assert len(session_writes(rig)) == before + 2
    st_ = rig.status("sessions", "s1")
    assert ids(st_["pendingApprovals"])[1:] == ["x1", "x2", "x4", "x5"]
    assert st_["counters"]["approvals"] == 1 + 5


async def test_a_write_the_apiserver_did_not_take_is_tried_again_with_what_came_meanwhile(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    rig.kube.fail_next("patch_status", "sessions", 503, name="s1", times=2)
    w = rig.c.approvals.pending
    w.drop("default", "s1", name)
    await asyncio.sleep(0)
    w.add("default", "s1", entry("x2"))
    await asyncio.wait_for(w.settled(), 10)
    assert ids(rig.status("sessions", "s1")["pendingApprovals"]) == ["x2"]


async def test_a_write_refused_for_good_is_given_up_and_the_next_change_written(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    rig.kube.fail_next("patch_status", "sessions", 422, name="s1")
    w = rig.c.approvals.pending
    w.add("default", "s1", entry("x2"))
    await asyncio.wait_for(w.settled(), 5)
    assert ids(rig.status("sessions", "s1")["pendingApprovals"]) == [name]
    w.drop("default", "s1", name)
    await asyncio.wait_for(w.settled(), 5)
    assert rig.status("sessions", "s1")["pendingApprovals"] == []


async def test_a_session_gone_ends_its_writer(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    w = rig.c.approvals.pending
    w.add("default", "nobody", entry("x1"), count=True)
    await asyncio.wait_for(w.settled(), 5)
    assert not w.tasks and not w.queued


async def test_asked_and_decided_the_record_follows_in_order(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    first = await asked(rig, "s1")
    await rig.event("s1", "permission_request", turn="s1-1", request_id="r2", tool="Bash", command="rm -rf y")
    second = approval_name(rig.run_id("s1"), "r2")
    assert ids(rig.status("sessions", "s1")["pendingApprovals"]) == [first, second]
    await rig.kube.patch("approvals", first, {"spec": {"decision": "deny", "decidedBy": "ann"}})
    await rig.c.approvals.reconcile("default", first)
    await rig.c.approvals.pending.settled()
    st_ = rig.status("sessions", "s1")
    assert ids(st_["pendingApprovals"]) == [second] and st_["counters"]["approvals"] == 2


# --- the answer, sent once ---------------------------------------------------------------------------------


def count_answers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the approvals whose answer went to the gateway, one entry a send."""
    sent: list[str] = []
    answer = Approvals.answer

    async def counted(self: Approvals, ns: str, run: str, name: str, *a: Any) -> None:
        sent.append(name)
        await answer(self, ns, run, name, *a)

    monkeypatch.setattr(Approvals, "answer", counted)
    return sent


async def test_a_decision_seen_again_after_it_was_delivered_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    sent = count_answers(monkeypatch)
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    stale = rig.get("approvals", name)  # the decision's watch event, still queued behind the first look
    await rig.c.approvals.reconcile("default", name)  # the status's event, read afresh: decided
    await rig.c.approvals.reconcile("default", name, stale)
    assert sent == [name]
    assert rig.status("approvals", name)["phase"] == "Allowed"


async def test_a_decide_that_lost_its_compare_and_set_does_not_send_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    sent = count_answers(monkeypatch)
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    rig.kube.fail_next("patch_status", "approvals", 409, name=name)
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    assert sent == [name]
    assert rig.status("approvals", name)["phase"] == "Allowed"
    assert rig.commands("s1-r1").count(f"answer-{name}") == 1


# --- a record lost to a stop is repaired by the Approval's next look ---------------------------------------


async def test_a_waiting_approval_missing_from_the_list_is_written_again_by_its_next_look(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.kube.patch_status("sessions", "s1", {"pendingApprovals": []})  # the queued record lost
    rig.c.approvals.timers.pop(("default", name)).cancel()  # a restart: nothing armed here
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))  # the listing's event
    await asyncio.wait_for(rig.c.approvals.pending.settled(), 5)
    assert ids(rig.status("sessions", "s1")["pendingApprovals"]) == [name]


async def test_an_ended_approval_still_listed_is_dropped_by_its_next_event(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    await rig.kube.patch("approvals", name, {"spec": {"decision": "allow", "decidedBy": "ann"}})
    await rig.c.approvals.reconcile("default", name)
    await rig.c.approvals.pending.settled()
    await rig.kube.patch_status("sessions", "s1", {"pendingApprovals": [entry(name)]})  # the drop lost
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))  # its status's event
    await asyncio.wait_for(rig.c.approvals.pending.settled(), 5)
    assert rig.status("sessions", "s1")["pendingApprovals"] == []


async def test_a_look_at_a_listed_approval_writes_nothing(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    name = await asked(rig, "s1")
    rig.c.approvals.timers.pop(("default", name)).cancel()
    before = len(session_writes(rig))
    await rig.c.approvals.reconcile("default", name, rig.get("approvals", name))
    await asyncio.wait_for(rig.c.approvals.pending.settled(), 5)
    assert len(session_writes(rig)) == before and rig.c.approvals.armed("default", name)


async def test_its_count_leaves_the_counters_written_beside_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer counts an approval off the session's lock, so a write under the lock (a turn's tokens and
    cost, a sandbox counted) can land while its patch is out: its patch holds the approval count alone."""
    rig = await make_rig(tmp_path)
    await asked(rig, "s1")
    await rig.c.approvals.pending.settled()
    release = hold_status_writes(monkeypatch, "sessions", "pendingApprovals")
    counted = rig.status("sessions", "s1")["counters"].get("approvals", 0)
    w = rig.c.approvals.pending
    w.add("default", "s1", entry("x2"), count=True)
    await asyncio.sleep(0.05)  # its write is out, read from the session before the next write
    rig.kube.set_status("sessions", "s1", {"counters": {"turns": 7, "costUsd": 1.25, "sandboxes": 3}})
    release.set()
    await asyncio.wait_for(w.settled(), 5)
    c = rig.status("sessions", "s1")["counters"]
    assert (c["turns"], c["costUsd"], c["sandboxes"], c["approvals"]) == (7, 1.25, 3, counted + 1)


@pytest.mark.parametrize(
    ("before", "after", "patch"),
    [
        ({}, {}, {}),
        ({"approvals": 1}, {"approvals": 2}, {"approvals": 2}),
        ({"turns": 2, "costUsd": 0.5}, {"turns": 3, "costUsd": 0.5}, {"turns": 3}),
        (
            {"inputTokens": 5},
            {"inputTokens": 5, "outputTokens": 9, "costUsd": 0.01},
            {"outputTokens": 9, "costUsd": 0.01},
        ),
        ({"sandboxes": 4}, {"sandboxes": 0}, {"sandboxes": 0}),  # back to its default: still written
    ],
)
def test_counters_changed_holds_what_changed_only(
    before: dict[str, Any], after: dict[str, Any], patch: dict[str, Any]
) -> None:

    assert Counters.model_validate(after).changed(Counters.model_validate(before)) == patch
