"""MCP tasks in the database (tables ``mcp_tasks`` and ``mcp_task_responses``, made by ``db.SCHEMA``), so any
api replica answers ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` for a task another one runs.

The replica that runs a task writes its status as it changes; any replica reads it. An answer
(``tasks/update``) is a row of ``mcp_task_responses``: its primary key makes each input key answered once,
whichever replica takes it, and the running replica takes the rows it has not taken yet. A cancel is written
as the final status at once (a later write of the running replica never overwrites a final status), and the
running replica, seeing it, stops the work.

The running replica also beats (``mcp_task_leases``: one row per task, its last beat), so a replica that
died is seen by the others: a task not final whose beat is older than a limit is failed by whichever replica
looks (:meth:`TaskStore.fail_if_dead`, a conditional write: a beat that came meanwhile keeps it running).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .db import Database

FINAL = ("completed", "failed", "cancelled")
_NOT_FINAL = "status NOT IN ('completed', 'failed', 'cancelled')"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TaskRow:
    id: str
    owner: str
    status: str
    message: str | None
    requests: dict[str, Any]  # outstanding input requests, as on the wire
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created_ms: int
    updated_ms: int
    beat_ms: int | None = None  # the running replica's last heartbeat (None: it never beat)

    @property
    def final(self) -> bool:
        return self.status in FINAL


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


class TaskStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, task_id: str, owner: str, message: str, at_ms: int) -> None:
        await self.db.backend.execute(
            "INSERT INTO mcp_tasks (id, owner, status, message, requests, created_ms, updated_ms) "
            "VALUES (?, ?, 'working', ?, '{}', ?, ?)",
            (task_id, owner, message, at_ms, at_ms),
        )

    async def get(self, task_id: str) -> TaskRow | None:
        rows = await self.db.backend.fetch(
            "SELECT t.id, t.owner, t.status, t.message, t.requests, t.result, t.error, t.created_ms, "
            "t.updated_ms, l.beat_ms FROM mcp_tasks t LEFT JOIN mcp_task_leases l ON l.task = t.id "
            "WHERE t.id = ?",
            (task_id,),
        )
        if not rows:
            return None
        r = rows[0]
        return TaskRow(
            id=str(r[0]),
            owner=str(r[1]),
            status=str(r[2]),
            message=None if r[3] is None else str(r[3]),
            requests=dict(json.loads(r[4] or "{}")),
            result=None if r[5] is None else dict(json.loads(r[5])),
            error=None if r[6] is None else dict(json.loads(r[6])),
            created_ms=int(r[7]),
            updated_ms=int(r[8]),
            beat_ms=None if r[9] is None else int(r[9]),
        )

    async def set_status(
        self,
        task_id: str,
        status: str,
        message: str | None,
        requests: dict[str, Any] | None = None,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """The task's new status, unless it is final already (a cancel written by another replica stays)."""
        await self.db.backend.execute(
            "UPDATE mcp_tasks SET status = ?, message = ?, requests = ?, result = ?, error = ?, updated_ms = ? "
            f"WHERE id = ? AND {_NOT_FINAL}",
            (status, message, json.dumps(requests or {}), _json(result), _json(error), now_ms(), task_id),
        )

    async def beat(self, task_id: str, at_ms: int) -> None:
        """The running replica is alive and runs ``task_id`` (its lease renewed)."""
        await self.db.backend.execute(
            "INSERT INTO mcp_task_leases (task, beat_ms) VALUES (?, ?) "
            "ON CONFLICT (task) DO UPDATE SET beat_ms = excluded.beat_ms",
            (task_id, at_ms),
        )

    async def fail_if_dead(
        self, task_id: str, beat_before_ms: int, message: str, error: dict[str, Any]
    ) -> None:
        """Fails the task if it is not final and its replica's last beat is older than ``beat_before_ms``;
        a task that never beat is left alone (its replica can't be judged)."""
        await self.db.backend.execute(
            "UPDATE mcp_tasks SET status = 'failed', message = ?, requests = '{}', error = ?, updated_ms = ? "
            f"WHERE id = ? AND {_NOT_FINAL} AND EXISTS "
            "(SELECT 1 FROM mcp_task_leases WHERE task = ? AND beat_ms < ?)",
            (message, json.dumps(error), now_ms(), task_id, task_id, beat_before_ms),
        )

    async def cancel(self, task_id: str) -> None:
        await self.set_status(task_id, "cancelled", "cancelled")

    async def respond(self, task_id: str, key: str, response: dict[str, Any]) -> bool:
        """Records the answer to ``key``; False when it was answered already (here or on another replica)."""
        return await self.db.backend.transaction(
            [
                (
                    "INSERT INTO mcp_task_responses (task, input_key, response, taken) VALUES (?, ?, ?, 0)",
                    (task_id, key, json.dumps(response)),
                )
            ]
        )

    async def answered(self, task_id: str) -> set[str]:
        rows = await self.db.backend.fetch(
            "SELECT input_key FROM mcp_task_responses WHERE task = ?", (task_id,)
        )
        return {str(r[0]) for r in rows}

    async def take(self, task_id: str) -> dict[str, dict[str, Any]]:
        """The answers not taken yet, marked taken (only the replica running the task takes them)."""
        rows = await self.db.backend.fetch(
            "SELECT input_key, response FROM mcp_task_responses WHERE task = ? AND taken = 0", (task_id,)
        )
        for r in rows:
            await self.db.backend.execute(
                "UPDATE mcp_task_responses SET taken = 1 WHERE task = ? AND input_key = ?", (task_id, r[0])
            )
        return {str(r[0]): dict(json.loads(r[1])) for r in rows}

    async def purge(self, older_than_ms: int) -> None:
        """Drops the tasks created before ``older_than_ms`` and their answers."""
        await self.db.backend.execute(
            "DELETE FROM mcp_task_responses WHERE task IN (SELECT id FROM mcp_tasks WHERE created_ms < ?)",
            (older_than_ms,),
        )
        await self.db.backend.execute(
            "DELETE FROM mcp_task_leases WHERE task IN (SELECT id FROM mcp_tasks WHERE created_ms < ?)",
            (older_than_ms,),
        )
        await self.db.backend.execute("DELETE FROM mcp_tasks WHERE created_ms < ?", (older_than_ms,))
