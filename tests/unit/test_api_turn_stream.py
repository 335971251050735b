"""One Turn stream per API replica (``watch_cache.Watched`` with listeners; ``turn_watch.TurnWatch`` listens):
what the listeners hear of events in and out of order, the API's own writes, deletions, relists with and
without changes after a lost watch, an overflowed cache; and a waiter on a turn across all of these."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hangar.kube import Obj
from hangar.models import API_VERSION
from hangar.testing.fake_kube import FakeKube
from hangar_api.object_cache import ObjectCache
from hangar_api.turn_watch import TurnWatch
from hangar_api.watch_cache import Watched, turn_policy

LABEL = "hangar.dev/session"


def turn(name: str, rv: int, phase: str = "Running", session: str = "s1") -> Obj:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": {LABEL: session}},
        "spec": {"session": session},
        "status": {"phase": phase},
    }


def stream(capacity: int = 100) -> tuple[Watched, list[tuple[str, str, str | None]]]:
    """A Turn stream, listed empty and watching, and what its listener heard: (kind, name, version)."""
    w = Watched(FakeKube(), "turns", ObjectCache(turn_policy, capacity, label=LABEL))
    w.listed([], "1")
    w.cache.watching = True
    heard: list[tuple[str, str, str | None]] = []
    w.listen(
        lambda kind, o: heard.append((kind, o["metadata"]["name"], o["metadata"].get("resourceVersion")))
    )
    return w, heard


def run(w: Watched, steps: list[tuple[Any, ...]]) -> None:
    for step in steps:
        if step[0] == "wrote":
            w.wrote(turn(step[1], step[2]))
        elif step[0] == "list":
            w.listed([turn(n, v) for n, v in step[1]], str(step[2]))
        else:
            w.event(step[0], turn(step[1], step[2]))


@pytest.mark.parametrize(
    "steps, expect",
    [
        pytest.param(
            [("ADDED", "t1", 2), ("MODIFIED", "t1", 3), ("MODIFIED", "t1", 5)],
            [("ADDED", "t1", "2"), ("MODIFIED", "t1", "3"), ("MODIFIED", "t1", "5")],
            id="in order: each state once",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("MODIFIED", "t1", 5), ("MODIFIED", "t1", 3)],
            [("ADDED", "t1", "2"), ("MODIFIED", "t1", "5")],
            id="out of order: an older state is not told",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("MODIFIED", "t1", 2)],
            [("ADDED", "t1", "2")],
            id="the same version twice is told once",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("wrote", "t1", 4), ("MODIFIED", "t1", 4), ("MODIFIED", "t1", 6)],
            [("ADDED", "t1", "2"), ("MODIFIED", "t1", "4"), ("MODIFIED", "t1", "6")],
            id="our own write is told at once, its watch event not again",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("DELETED", "t1", 3), ("DELETED", "t1", 3), ("MODIFIED", "t1", 2)],
            [("ADDED", "t1", "2"), ("DELETED", "t1", "3")],
            id="a deletion once; nothing of it after",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("DELETED", "t1", 3), ("ADDED", "t1", 7)],
            [("ADDED", "t1", "2"), ("DELETED", "t1", "3"), ("ADDED", "t1", "7")],
            id="made again under the same name",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("ADDED", "t2", 3), ("list", [("t1", 2), ("t2", 3)], 9)],
            [("ADDED", "t1", "2"), ("ADDED", "t2", "3")],
            id="a relist without changes tells nothing",
        ),
        pytest.param(
            [
                ("ADDED", "t1", 2),
                ("ADDED", "t2", 3),
                ("ADDED", "t3", 4),
                ("list", [("t1", 6), ("t3", 4), ("t4", 8)], 9),
            ],
            [
                ("ADDED", "t1", "2"),
                ("ADDED", "t2", "3"),
                ("ADDED", "t3", "4"),
                ("DELETED", "t2", "9"),
                ("MODIFIED", "t1", "6"),
                ("ADDED", "t4", "8"),
            ],
            id="a relist tells what changed, was made and was deleted while the watch was lost",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("wrote", "t1", 12), ("list", [("t1", 8)], 9), ("MODIFIED", "t1", 12)],
            [("ADDED", "t1", "2"), ("MODIFIED", "t1", "12")],
            id="a relist older than our own write tells nothing of it",
        ),
        pytest.param(
            [("ADDED", "t1", 2), ("list", [("t1", 5)], 9), ("MODIFIED", "t1", 5), ("MODIFIED", "t1", 10)],
            [("ADDED", "t1", "2"), ("MODIFIED", "t1", "5"), ("MODIFIED", "t1", "10")],
            id="after a relist the watch goes on without repeating it",
        ),
    ],
)
def test_listeners_hear_each_state_once(steps: list[tuple[Any, ...]], expect: list[Any]) -> None:
    w, heard = stream()
    run(w, steps)
    assert heard == expect


def test_a_turn_deleted_while_the_watch_was_lost_is_told_with_its_session() -> None:
    w, _ = stream()
    got: list[tuple[str, Obj]] = []
    w.listen(lambda kind, o: got.append((kind, o)))
    w.event("ADDED", turn("t1", 2, session="s7"))
    w.listed([], "9")
    assert got[-1] == (
        "DELETED",
        {"metadata": {"name": "t1", "resourceVersion": "9", "labels": {LABEL: "s7"}}},
    )


def test_an_overflowed_stream_tells_everything_it_cannot_compare() -> None:
    w, heard = stream(capacity=2)
    run(w, [("ADDED", "t1", 2), ("ADDED", "t2", 3), ("ADDED", "t3", 4)])
    assert w.cache.overflowed and len(w.cache) == 0
    run(w, [("MODIFIED", "t1", 5), ("list", [("t1", 5), ("t2", 3), ("t3", 4)], 9)])
    # Nothing held to compare with: the events and the whole listing are told (twice is possible, never
    # missed); a listing that fits again makes the stream compare again.
    assert heard[3:] == [
        ("MODIFIED", "t1", "5"),
        ("MODIFIED", "t1", "5"),
        ("MODIFIED", "t2", "3"),
        ("MODIFIED", "t3", "4"),
    ]
    heard.clear()
    run(w, [("list", [("t1", 5)], 10), ("MODIFIED", "t1", 5), ("MODIFIED", "t1", 11)])
    assert not w.cache.overflowed
    assert heard == [("ADDED", "t1", "5"), ("MODIFIED", "t1", "11")]


def test_a_failing_listener_does_not_stop_the_others() -> None:
    w, heard = stream()

    def broken(kind: str, o: Obj) -> None:
        raise RuntimeError("listener bug")

    w.listeners.insert(0, broken)
    w.event("ADDED", turn("t1", 2))
    assert heard == [("ADDED", "t1", "2")]


# --- a waiter on a turn (the withdraw route) ---------------------------------------------------------------
def ended(t: Obj) -> bool:
    return bool(t["status"]["phase"] == "Completed")


async def waiting(k: FakeKube, w: Watched) -> tuple[TurnWatch, Obj, asyncio.Task[Obj]]:
    body = {
        "apiVersion": API_VERSION,
        "kind": "Turn",
        "metadata": {"name": "s1-1", "labels": {LABEL: "s1"}},
        "spec": {"session": "s1", "index": 1, "message": "hi"},
        "status": {"phase": "Running"},
    }
    seeded = k.seed("turns", body)
    watch = TurnWatch(k, w, withdraw_wait=30)
    task = asyncio.create_task(watch.wait(seeded, ended, 30))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done() and watch.waiters["s1-1"]
    return watch, seeded, task


async def test_a_waiter_gets_the_first_state_that_satisfies_it() -> None:
    k = FakeKube()
    w, _ = stream()
    watch, _, task = await waiting(k, w)
    w.event("MODIFIED", turn("s1-1", 50, "Running"))
    await asyncio.sleep(0)
    assert not task.done()
    w.event("MODIFIED", turn("s1-1", 52, "Completed"))
    w.event("MODIFIED", turn("s1-1", 53, "Completed"))  # told again: the waiter already has its answer
    got = await asyncio.wait_for(task, 5)
    assert got["metadata"]["resourceVersion"] == "52"
    assert watch.waiters == {}


async def test_a_waiter_gets_what_a_relist_after_a_lost_watch_found() -> None:
    k = FakeKube()
    w, _ = stream()
    _, _, task = await waiting(k, w)
    w.event("MODIFIED", turn("s1-1", 50, "Running"))
    # The watch is lost (a 410); the turn ended meanwhile; the relist tells it.
    w.listed([turn("s1-1", 60, "Completed")], "61")
    got = await asyncio.wait_for(task, 5)
    assert got["metadata"]["resourceVersion"] == "60"


async def test_a_waiter_ignores_an_older_state_told_late() -> None:
    k = FakeKube()
    w, _ = stream()
    _, _, task = await waiting(k, w)
    w.event("MODIFIED", turn("s1-1", 60, "Running"))
    w.event("MODIFIED", turn("s1-1", 55, "Completed"))  # older than what the stream holds: not told
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    task.cancel()


async def test_a_waiter_on_a_turn_deleted_while_the_watch_was_lost_reads_it_and_returns() -> None:
    k = FakeKube()
    w, _ = stream()
    _, _, task = await waiting(k, w)
    w.event("MODIFIED", turn("s1-1", 50, "Running"))
    await k.delete("turns", "s1-1")
    w.listed([], "70")  # the stub says only that it is gone: the waiter reads it, finds nothing
    got = await asyncio.wait_for(task, 5)
    assert got["metadata"]["name"] == "s1-1" and got["status"]["phase"] == "Running"


async def test_listeners_of_the_turn_watch_share_the_one_stream() -> None:
    k = FakeKube()
    w, heard = stream()
    watch = TurnWatch(k, w)
    seen: list[str] = []
    watch.listen(lambda o: seen.append(o["metadata"]["resourceVersion"]))
    watch.listen(lambda o: seen.append("second " + o["metadata"]["resourceVersion"]))
    assert len(w.listeners) == 2  # the stream's own test listener and the turn watch, once
    w.event("ADDED", turn("t1", 4))
    w.event("MODIFIED", turn("t1", 4))
    assert seen == ["4", "second 4"]
    assert heard == [("ADDED", "t1", "4")]


# --- the stream itself on the fake apiserver: list, watch, a 410, the relist's differences -------------------
def turn_body(name: str, phase: str = "Running", session: str = "s1") -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "Turn",
        "metadata": {"name": name, "labels": {LABEL: session}},
        "spec": {"session": session, "index": int(name.rsplit("-", 1)[1]), "message": "hi"},
        "status": {"phase": phase},
    }


async def settle(until: Any) -> None:
    """Until ``until()`` holds (a lost connection is listed again after a back-off of 0.5 s)."""
    for _ in range(3000):
        if until():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the stream did not get there")


@pytest.mark.parametrize("status", [410, 500])
async def test_a_lost_watch_relists_and_tells_only_what_changed_in_the_gap(status: int) -> None:
    k = FakeKube()
    k.seed("turns", turn_body("s1-1"))
    k.seed("turns", turn_body("s1-2", "Completed"))
    k.seed("turns", turn_body("s1-3", session="s2"))
    w = Watched(k, "turns", ObjectCache(turn_policy, 100, label=LABEL))
    heard: list[tuple[str, str, str | None]] = []
    w.listen(
        lambda kind, o: heard.append((kind, o["metadata"]["name"], (o.get("status") or {}).get("phase")))
    )
    w.start()
    try:
        await settle(lambda: w.cache.usable)
        assert sorted(heard) == [
            ("ADDED", "s1-1", "Running"),
            ("ADDED", "s1-2", "Completed"),
            ("ADDED", "s1-3", "Running"),
        ]
        heard.clear()
        k.set_status("turns", "s1-1", {"phase": "Interrupted"})
        await settle(lambda: len(heard) == 1)
        assert heard == [("MODIFIED", "s1-1", "Interrupted")]
        heard.clear()
        # The watch is lost; what happens before it is watched again is in no watch event this stream reads.
        k.break_watches("turns", status)
        k.set_status("turns", "s1-1", {"phase": "Completed"})
        await k.delete("turns", "s1-3")
        await k.create("turns", turn_body("s1-4"))
        await settle(lambda: len(heard) == 3)
        assert sorted(heard) == [
            ("ADDED", "s1-4", None),  # a create's status is not kept (the status subresource)
            ("DELETED", "s1-3", None),  # a stub: only what the cache still knows
            ("MODIFIED", "s1-1", "Completed"),
        ]
        heard.clear()
        k.set_status("turns", "s1-2", {"phase": "Failed"})  # and the watch goes on from the listing
        await settle(lambda: len(heard) == 1)
        assert heard == [("MODIFIED", "s1-2", "Failed")]
        assert w.cache.usable and sorted(w.cache.objs) == ["s1-1", "s1-2", "s1-4"]
    finally:
        w.stop()
