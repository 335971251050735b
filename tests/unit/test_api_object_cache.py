"""The API's watch-fed cache (``hangar_api/object_cache.py``, ``watch_cache.py``): listing, events in and out
of order, deletions, a relist after a watch is lost, read-your-writes, the bound on memory."""

from __future__ import annotations

from typing import Any

import pytest

from hangar.kube import Obj
from hangar.testing.fake_kube import FakeKube
from hangar_api.object_cache import ObjectCache
from hangar_api.watch_cache import ApiCache, session_look

LABEL = "hangar.dev/session"


def obj(name: str, rv: int | str | None, session: str | None = "s1", **extra: Any) -> Obj:
    meta: dict[str, Any] = {"name": name}
    if rv is not None:
        meta["resourceVersion"] = str(rv)
    if session is not None:
        meta["labels"] = {LABEL: session}
    return {"metadata": meta, **extra}


def cache(capacity: int = 100) -> ObjectCache[Obj]:
    c: ObjectCache[Obj] = ObjectCache(lambda o: o, capacity, label=LABEL)
    c.relist([], "1")
    c.watching = True
    return c


def rv(c: ObjectCache[Obj], name: str) -> str | None:
    held = c.get(name)
    return held["metadata"].get("resourceVersion") if held is not None else None


def test_usable_only_listed_and_watching() -> None:
    c: ObjectCache[Obj] = ObjectCache(lambda o: o, 10)
    assert not c.usable
    c.watching = True
    assert not c.usable  # not listed yet: a miss would be a lie
    c.relist([obj("a", 5)], "5")
    assert c.usable
    c.watching = False
    assert not c.usable  # the watch broke: what it holds may be stale


def test_listing_then_events_in_order() -> None:
    c = cache()
    c.relist([obj("a", 5), obj("b", 6, session="s2")], "6")
    c.apply("ADDED", obj("c", 7))
    c.apply("MODIFIED", obj("a", 8, spec={"x": 1}))
    assert rv(c, "a") == "8"
    assert [o["metadata"]["name"] for o in c.having(["s1"])] == ["a", "c"]
    assert [o["metadata"]["name"] for o in c.having(["s2", "s1"])] == ["a", "c", "b"]
    assert c.rv == "8"


@pytest.mark.parametrize(
    "events, expect",
    [
        # a late event older than what is held (our own write came first) is ignored
        ([("wrote", 10), ("MODIFIED", 9)], "10"),
        ([("MODIFIED", 9), ("wrote", 10), ("MODIFIED", 10)], "10"),
        ([("MODIFIED", 9), ("MODIFIED", 11), ("wrote", 10)], "11"),
        ([("MODIFIED", 9), ("MODIFIED", 12)], "12"),
    ],
)
def test_an_older_version_never_replaces_a_newer(events: list[tuple[str, int]], expect: str) -> None:
    c = cache()
    for kind, v in events:
        if kind == "wrote":
            c.wrote(obj("a", v))
        else:
            c.apply(kind, obj("a", v))
    assert rv(c, "a") == expect


def test_a_deleted_object_is_not_brought_back_by_a_late_event() -> None:
    c = cache()
    c.apply("ADDED", obj("a", 5))
    c.apply("DELETED", obj("a", 7))
    c.wrote(obj("a", 6))  # a write of ours that returned after the deletion was seen
    c.apply("MODIFIED", obj("a", 7))
    assert c.get("a") is None
    assert c.having(["s1"]) == []
    c.apply("ADDED", obj("a", 9))  # made again under the same name
    assert rv(c, "a") == "9"


def test_a_deletion_older_than_what_is_held_is_ignored() -> None:
    c = cache()
    c.apply("ADDED", obj("a", 9))  # made again; the old one's deletion arrives late
    c.apply("DELETED", obj("a", 8))
    assert rv(c, "a") == "9"


def test_delete_of_an_object_never_seen() -> None:
    c = cache()
    c.apply("DELETED", obj("a", 4))
    c.apply("ADDED", obj("a", 3))
    assert c.get("a") is None


def test_relist_drops_what_is_gone_keeps_what_is_newer() -> None:
    c = cache()
    c.relist([obj("a", 5), obj("b", 6), obj("c", 7)], "7")
    c.wrote(obj("d", 12))  # our write, after the listing below was taken
    c.apply("DELETED", obj("e", 13))  # deleted after the listing: its tombstone stays
    c.relist([obj("a", 5), obj("c", 10)], "11")  # b deleted while the watch was lost (410)
    assert c.get("b") is None
    assert rv(c, "c") == "10"
    assert rv(c, "d") == "12"
    assert "e" in c.gone
    assert c.rv == "11"  # the watch goes on from the listing
    c.apply("ADDED", obj("e", 12))  # an event from before e's deletion
    assert c.get("e") is None


def test_relist_clears_old_tombstones() -> None:
    c = cache()
    c.apply("DELETED", obj("a", 5))
    c.relist([obj("a", 8)], "9")  # made again before the listing
    assert rv(c, "a") == "8"
    assert c.gone == {}


def test_bookmark_moves_only_the_version() -> None:
    c = cache()
    c.apply("ADDED", obj("a", 5))
    c.apply("BOOKMARK", {"metadata": {"resourceVersion": "40"}})
    assert c.rv == "40"
    assert len(c) == 1


def test_label_change_and_delete_keep_the_index_right() -> None:
    c = cache()
    c.apply("ADDED", obj("a", 5, session="s1"))
    c.apply("MODIFIED", obj("a", 6, session="s2"))
    assert c.having(["s1"]) == []
    assert [o["metadata"]["name"] for o in c.having(["s2"])] == ["a"]
    c.apply("MODIFIED", obj("a", 7, session=None))
    assert c.having(["s2"]) == [] and c.index == {}
    c.apply("MODIFIED", obj("a", 8, session="s3"))
    c.apply("DELETED", obj("a", 9, session="s3"))
    assert c.index == {} and c.labels == {}


def test_opaque_versions_take_the_newest_event() -> None:
    c = cache()
    c.apply("ADDED", obj("a", "x1"))
    c.apply("MODIFIED", obj("a", "x0"))
    assert rv(c, "a") == "x0"


def test_an_object_the_projection_cannot_read_is_not_held() -> None:
    def project(o: Obj) -> str:
        return str(o["spec"]["policy"])

    c: ObjectCache[str] = ObjectCache(project, 10)
    c.relist([{"metadata": {"name": "t", "resourceVersion": "1"}, "spec": {"policy": "ask"}}], "1")
    assert c.get("t") == "ask"
    c.apply("MODIFIED", {"metadata": {"name": "t", "resourceVersion": "2"}, "spec": {}})
    assert c.get("t") is None  # a reader reads it from the apiserver instead of using the old value


def test_capacity_overflow_empties_and_a_fitting_relist_recovers() -> None:
    c = cache(capacity=3)
    for i in range(3):
        c.apply("ADDED", obj(f"a{i}", i + 2))
    assert c.usable and len(c) == 3
    c.apply("MODIFIED", obj("a0", 10))  # a change of one held is not growth
    assert c.usable
    c.apply("ADDED", obj("a3", 11))
    assert c.overflowed and not c.usable and len(c) == 0 and c.index == {}
    c.relist([obj(f"a{i}", 20) for i in range(4)], "20")
    assert c.overflowed and len(c) == 0
    c.relist([obj("a1", 21)], "21")
    assert c.usable and len(c) == 1


def test_tombstones_are_bounded() -> None:
    c = cache(capacity=3)
    for i in range(10):
        c.apply("DELETED", obj(f"a{i}", i + 2))
    assert list(c.gone) == ["a7", "a8", "a9"]


def test_api_cache_reads_say_ask_the_apiserver_until_usable() -> None:
    c = ApiCache(FakeKube(), capacity=10)  # never started: fed by hand below
    assert c.session("s1") is None and c.approvals_of(["s1"]) is None and c.turn("t1") == (False, None)
    assert c.approval("ap-1") is None
    c.sessions.relist(
        [
            {
                "metadata": {"name": "s1", "resourceVersion": "3"},
                "spec": {"harness": "claude", "environment": "e"},
                "status": {"policy": "ask", "currentTurn": "t1", "taint": {"tainted": True}},
            }
        ],
        "3",
    )
    c.turns.relist(
        [
            {"metadata": {"name": "t1", "resourceVersion": "4"}, "spec": {}},
            {"metadata": {"name": "t3", "resourceVersion": "4"}, "status": {"policy": "deny-risky"}},
        ],
        "4",
    )
    c.approvals.relist([], "4")
    for w in (c.sessions, c.turns, c.approvals):
        w.watching = True
    look = c.session("s1")
    assert look is not None and look.policy == "ask" and look.current_turn == "t1" and look.tainted
    assert not look.deleted
    assert c.turn("t1") == (True, None) and c.turn("t2") == (False, None)
    assert c.turn("t3") == (True, "deny-risky")
    c.wrote_approval(
        {
            "metadata": {
                "name": "ap-1",
                "resourceVersion": "9",
                "labels": {LABEL: "s1"},
                "managedFields": [{"manager": "x"}],
            },
            "spec": {"session": "s1"},
        }
    )
    got = c.approvals_of(["s1"])
    assert got is not None and [a["metadata"]["name"] for a in got] == ["ap-1"]
    assert "managedFields" not in got[0]["metadata"]


def test_session_look_sees_a_deletion() -> None:
    s = {
        "metadata": {"name": "s1", "deletionTimestamp": "2026-12-02T00:00:00Z"},
        "spec": {"harness": "claude", "environment": "e"},
    }
    look = session_look(s)
    assert look.deleted and look.policy is None and look.current_turn is None and not look.tainted


def test_an_environment_is_known_from_a_usable_cache_and_a_miss_is_never_a_no() -> None:
    """A session's create skips its Environment GET only when the cache holds that Environment; a cache that
    is not listed, not watching, or that saw it deleted sends the create to the apiserver."""
    c = ApiCache(object())  # type: ignore[arg-type]  # nothing to watch: fed by hand below
    env = {"metadata": {"name": "e1", "resourceVersion": "5"}, "spec": {}}
    assert not c.environment_known("e1")
    c.environments.relist([env], "5")
    assert not c.environment_known("e1")  # listed, but its watch not running: can't say
    c.environments.watching = True
    assert c.environment_known("e1") and not c.environment_known("e2")
    c.environments.apply("DELETED", {"metadata": {"name": "e1", "resourceVersion": "6"}})
    assert not c.environment_known("e1")
