"""``exec`` as a task: which calls become tasks (only one that would run: valid arguments; a refusal stays an
ordinary call's immediate error), what the task's status message shows of the streamed output, and a task
stopped by a cancel recorded in the database (as another replica records it) while its work waits on
something else than the task."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from hangar.limits import EXEC_OUTPUT_MAX
from hangar.store import open_database
from hangar.store.tasks import TaskStore, now_ms
from hangar_api.auth import Caller
from hangar_api.mcp.common import Hub
from hangar_api.mcp.live import TAIL_MAX, register_live, task_status
from hangar_api.mcp.tasks import TaskRun, Tasks, stop_when_cancelled


def _gate() -> Any:
    tasks = Tasks(verifier=None, hub=Hub(SimpleNamespace()))  # type: ignore[arg-type]
    register_live(MCPServer("t"), Hub(SimpleNamespace()), lambda ctx: Caller("x", "admin"), tasks)
    return tasks._gates["exec"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"session": "s1"},  # no command
        {"session": "s1", "command": "   "},  # blank
        {"session": "Bad_Name", "command": "ls"},
        {"session": "s1", "command": "ls", "timeout_seconds": "10"},  # a string for an integer
        {"session": "s1", "command": "ls", "timeout_seconds": 601},
        {"session": "s1", "command": "ls", "max_output_bytes": EXEC_OUTPUT_MAX + 1},
        {"session": "s1", "command": "ls", "stream": "yes"},
    ],
)
async def test_an_exec_with_bad_arguments_is_no_task(arguments: dict[str, Any]) -> None:
    # Answered at once as an ordinary call (the schema's refusal); the hub is never asked for the session.
    assert await _gate()(Caller("alice", "admin"), arguments) is False


async def test_a_jobs_token_is_no_task_either() -> None:
    # Sessions are for admin and mcp tokens: the ordinary call refuses it at once.
    assert await _gate()(Caller("bob", "jobs"), {"session": "s1", "command": "ls"}) is False


@pytest.mark.parametrize(
    ("sent", "tail", "says"),
    [
        (0, "", "running: no output yet"),
        (6, "line1\n", "running: 6 characters of output so far; the latest: line1"),
        (18, "line1\nline2\n\n  \n", "running: 18 characters of output so far; the latest: line2"),
        (3, "\n\n\n", "running: 3 characters of output so far"),
        (900, "x" * 900, "running: 900 characters of output so far; the latest: …" + "x" * TAIL_MAX),
    ],
)
def test_the_status_message_sums_up_the_streamed_output(sent: int, tail: str, says: str) -> None:
    assert task_status(sent, tail) == says


async def test_a_cancel_recorded_in_the_database_stops_work_that_waits_elsewhere(tmp_path: Path) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        store = TaskStore(db)
        await store.create("t1", "alice", "started", now_ms())
        task = TaskRun("t1", "alice", store)
        forever = asyncio.Event()

        async def work() -> None:  # an exec waiting on the sandbox: it never looks at the task itself
            watcher = asyncio.create_task(stop_when_cancelled(task))
            try:
                await forever.wait()
            finally:
                watcher.cancel()

        task.runner = asyncio.create_task(work())
        await asyncio.sleep(1.5)
        assert not task.runner.done()  # working: the watcher leaves it be
        await store.cancel("t1")  # what tasks/cancel on any replica writes
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task.runner, 10)
        row = await store.get("t1")
        assert row is not None and row.status == "cancelled"

        # A task gone from the database (expired and purged) stops its work the same way.
        await store.create("t2", "alice", "started", now_ms())
        gone = TaskRun("t2", "alice", store)

        async def waits() -> None:
            watcher = asyncio.create_task(stop_when_cancelled(gone))
            try:
                await forever.wait()
            finally:
                watcher.cancel()

        gone.runner = asyncio.create_task(waits())
        await store.purge(now_ms() + 1)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(gone.runner, 10)
    finally:
        await db.close()
