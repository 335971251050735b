"""The inbox's order: oldest first, whichever way the time is written, then by what each item is about."""

from __future__ import annotations

from hangar_api.mcp.inbox import _order


def test_a_created_at_second_and_a_stamp_sort_by_time() -> None:
    items = [
        {"kind": "approval", "since": "2026-12-03T10:00:00.300Z", "ref": "a", "approval": {"id": "ap-1"}},
        {"kind": "question", "since": "2026-12-03T10:00:00Z", "ref": "b", "turn": "b-t1"},
        {"kind": "review", "since": "2026-12-03T09:59:59.999Z", "ref": "c"},
        {"kind": "failed", "since": "2026-12-03T10:00:01Z", "ref": "d"},
    ]
    assert [i["ref"] for i in sorted(items, key=_order)] == ["c", "b", "a", "d"]


def test_at_the_same_time_by_ref_kind_and_id() -> None:
    at = "2026-12-03T10:00:00.000Z"
    items = [
        {"kind": "question", "since": at, "ref": "s", "turn": "s-t2"},
        {"kind": "approval", "since": "2026-12-03T10:00:00Z", "ref": "s", "approval": {"id": "ap-2"}},
        {"kind": "approval", "since": at, "ref": "s", "approval": {"id": "ap-1"}},
        {"kind": "question", "since": at, "ref": "r", "turn": "r-t1"},
    ]
    order = [(i["ref"], i["kind"], i.get("turn") or i["approval"]["id"]) for i in sorted(items, key=_order)]
    assert order == [
        ("r", "question", "r-t1"),
        ("s", "approval", "ap-1"),
        ("s", "approval", "ap-2"),
        ("s", "question", "s-t2"),
    ]
