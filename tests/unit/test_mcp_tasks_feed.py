"""What a task looks like on the wire, and the notifications/tasks feed: one per change, read from the
database (as any replica reads it), until the task is final."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hangar.store import open_database
from hangar.store.tasks import TaskStore, now_ms
from hangar_api.mcp.common import Hub
from hangar_api.mcp.tasks import TTL_MS, Tasks, wire


async def test_the_feed_sends_each_change_once_until_the_task_is_final(tmp_path: Path) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        store = TaskStore(db)
        tasks = Tasks(verifier=None, hub=Hub(SimpleNamespace(db=db)))  # type: ignore[arg-type]
        await store.create("t1", "alice", "started", now_ms())
        sent: list[dict[str, Any]] = []

        async def send(task: dict[str, Any]) -> None:
            sent.append(task)

        feed = asyncio.create_task(tasks.follow(["t1"], send))
        await asyncio.sleep(0.2)
        form = {"method": "elicitation/create", "params": {"mode": "form", "message": "allow?"}}
        await store.set_status("t1", "input_required", "waiting for your answer", {"approve-ap-1": form})
        await asyncio.sleep(0.8)
        await store.set_status("t1", "input_required", "waiting for your answer", {"approve-ap-1": form})
        await asyncio.sleep(0.8)  # the same status again: nothing new to send
        await store.set_status("t1", "completed", "done", result={"content": [], "isError": False})
        await asyncio.wait_for(feed, 5)  # final: the feed ends
    finally:
        await db.close()
    assert [(t["status"], t.get("statusMessage")) for t in sent] == [
        ("working", "started"),
        ("input_required", "waiting for your answer"),
        ("completed", "done"),
    ]
    assert sent[1]["inputRequests"] == {"approve-ap-1": form} and "result" not in sent[1]
    assert sent[2]["result"] == {"content": [], "isError": False} and "inputRequests" not in sent[2]
    assert all(t["taskId"] == "t1" and t["ttlMs"] == TTL_MS for t in sent)


async def test_wire_shows_what_each_status_carries(tmp_path: Path) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        store = TaskStore(db)
        await store.create("t2", "bob", "started", 1_700_000_000_000)
        await store.set_status("t2", "failed", "boom", error={"code": -32603, "message": "boom"})
        row = await store.get("t2")
    finally:
        await db.close()
    assert row is not None
    w = wire(row)
    assert (
        w["createdAt"] == "2023-11-14T22:13:20Z" and w["status"] == "failed" and w["statusMessage"] == "boom"
    )
    assert (
        w["error"] == {"code": -32603, "message": "boom"} and "result" not in w and "inputRequests" not in w
    )
