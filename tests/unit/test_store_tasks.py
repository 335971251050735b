"""MCP tasks in the database, on SQLite and on a real PostgreSQL server: what one replica writes another
reads; an input key is answered once across two connections; a final status is never overwritten."""

from __future__ import annotations

import asyncio
import uuid

from hangar.store import Database, open_database
from hangar.store.tasks import TaskStore, now_ms

from .test_store import db as db  # the SQLite / PostgreSQL fixture


async def test_a_task_written_by_one_replica_is_read_and_answered_through_another(db: Database) -> None:
    other = await open_database(db.url)  # another replica: its own connection
    try:
        a, b = TaskStore(db), TaskStore(other)
        tid = uuid.uuid4().hex
        await a.create(tid, "alice", "started", now_ms())
        seen = await b.get(tid)
        assert seen is not None and (seen.owner, seen.status, seen.message) == ("alice", "working", "started")
        form = {"method": "elicitation/create", "params": {"message": "allow?"}}
        await a.set_status(tid, "input_required", "waiting", {"approve-ap-1": form})
        seen = await b.get(tid)
        assert (
            seen is not None and seen.status == "input_required" and seen.requests == {"approve-ap-1": form}
        )
        # Two replicas answer the same key at once: exactly one answer is kept.
        got = await asyncio.gather(
            a.respond(tid, "approve-ap-1", {"action": "accept", "content": {"decision": "allow"}}),
            b.respond(tid, "approve-ap-1", {"action": "decline"}),
        )
        assert sorted(got) == [False, True]
        assert await b.answered(tid) == {"approve-ap-1"}
        taken = await a.take(tid)
        assert list(taken) == ["approve-ap-1"] and await a.take(tid) == {}, "taken once"
        # A cancel through b is final: a's later write doesn't undo it.
        await b.cancel(tid)
        await a.set_status(tid, "completed", "done", result={"content": []})
        seen = await a.get(tid)
        assert seen is not None and seen.status == "cancelled" and seen.final and seen.result is None
        await a.purge(now_ms() + 1)
        assert await b.get(tid) is None and await b.answered(tid) == set()
        assert await a.get("never") is None
    finally:
        await other.close()


async def test_a_completed_task_keeps_its_result(db: Database) -> None:
    store = TaskStore(db)
    tid = uuid.uuid4().hex
    await store.create(tid, "bob", "started", now_ms())
    await store.set_status(tid, "completed", "done", result={"isError": False, "content": [{"type": "text"}]})
    await store.set_status(tid, "failed", "late", error={"code": -32603, "message": "x"})
    row = await store.get(tid)
    assert (
        row is not None
        and row.status == "completed"
        and row.result
        == {
            "isError": False,
            "content": [{"type": "text"}],
        }
    )
    assert row.error is None and row.updated_ms >= row.created_ms
