"""An MCP task whose API replica died does not stay ``working`` until its TTL: the running replica beats
(``mcp_task_leases``), and a replica that finds a task not final whose beat is older than ``DEAD_MS`` fails
it with the reason; the replica, if it lives on, sees the final status and stops the work. On SQLite and a
real PostgreSQL server (the store's fixture)."""

from __future__ import annotations

import asyncio
import uuid

from hangar.store import Database, open_database
from hangar.store.tasks import TaskStore, now_ms
from hangar_api.mcp import tasks
from hangar_api.mcp.tasks import DEAD_MS, GONE, TaskRun, judged, stop_when_cancelled

from .test_store import db as db  # the SQLite / PostgreSQL fixture


async def made(store: TaskStore, beat_ago_ms: int | None) -> str:
    tid = uuid.uuid4().hex
    await store.create(tid, "alice", "started", now_ms())
    if beat_ago_ms is not None:
        await store.beat(tid, now_ms() - beat_ago_ms)
    return tid


async def test_a_task_whose_replica_stopped_beating_is_failed_by_another(db: Database) -> None:
    other = await open_database(db.url)  # the replica that looks: its own connection
    try:
        store, looker = TaskStore(db), TaskStore(other)
        dead = await made(store, DEAD_MS + 5_000)
        row = await looker.get(dead)
        assert row is not None and row.status == "working" and row.beat_ms is not None
        row = await judged(looker, row, running_here=False)
        assert row.status == "failed" and row.message == GONE and row.final
        assert row.error == {"code": tasks.INTERNAL_ERROR, "message": GONE}
        # The replica, should it live on, can't undo it: a final status is kept.
        await store.set_status(dead, "completed", "done", result={"content": []})
        await store.beat(dead, now_ms())
        again = await store.get(dead)
        assert again is not None and again.status == "failed" and again.result is None
    finally:
        await other.close()


async def test_a_live_or_unjudgeable_task_is_left_alone(db: Database) -> None:
    store = TaskStore(db)
    live = await made(store, 1_000)
    never = await made(store, None)  # made by a replica that does not beat: its life can't be judged
    old_here = await made(store, DEAD_MS * 3)
    for tid, here in ((live, False), (never, False), (old_here, True)):
        row = await store.get(tid)
        assert row is not None
        assert (await judged(store, row, running_here=here)).status == "working", tid
    # The write itself is conditional: a beat that came after the reader's look keeps the task running.
    stale = await made(store, DEAD_MS * 2)
    row = await store.get(stale)
    await store.beat(stale, now_ms())
    assert row is not None and (await judged(store, row, running_here=False)).status == "working"
    done = await made(store, DEAD_MS * 2)
    await store.set_status(done, "completed", "done", result={"content": []})
    row = await store.get(done)
    assert row is not None and (await judged(store, row, running_here=False)).status == "completed"
    await store.purge(now_ms() + 1)
    rows = await db.backend.fetch("SELECT task FROM mcp_task_leases WHERE task IN (?, ?)", (live, stale))
    assert rows == []


async def test_the_running_replica_beats_and_stops_when_another_failed_its_task(db: Database) -> None:
    store = TaskStore(db)
    tid = await made(store, DEAD_MS + 1)
    task = TaskRun(tid, "alice", store)
    work = asyncio.create_task(asyncio.sleep(60))
    task.runner = work
    old_beat = tasks.BEAT_SECONDS
    tasks.BEAT_SECONDS = 0.0  # beat at the first look (it is 5 s)
    try:
        watcher = asyncio.create_task(stop_when_cancelled(task))
        for _ in range(400):
            row = await store.get(tid)
            if row is not None and row.beat_ms is not None and now_ms() - row.beat_ms < DEAD_MS:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the running replica never beat")
        assert not work.done()
        # Another replica judged it dead (its database was away too long, say): the work stops.
        await store.fail_if_dead(tid, now_ms() + 1, GONE, {"code": -32603, "message": GONE})
        await asyncio.wait_for(watcher, 10)
        await asyncio.sleep(0)
        assert work.cancelled()
    finally:
        tasks.BEAT_SECONDS = old_beat
        work.cancel()
