"""The database: SQLite by default, PostgreSQL in production. One small async interface over both.

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS events (
        scope TEXT NOT NULL, seq INTEGER NOT NULL, turn TEXT, kind TEXT NOT NULL,
        payload TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (scope, seq))""",
    """CREATE TABLE IF NOT EXISTS driver_events (
        run TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (run, seq))""",
    """CREATE TABLE IF NOT EXISTS audit (
        at TEXT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
        detail TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS audit_action ON audit (action, at)",
    """CREATE TABLE IF NOT EXISTS seen_ids (
        kind TEXT NOT NULL, id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (kind, id))""",
    """CREATE TABLE IF NOT EXISTS tower_decisions (
        id TEXT PRIMARY KEY, decision TEXT NOT NULL, at TEXT NOT NULL)""",
    # MCP tasks (hangar_api.mcp.tasks through hangar.store.tasks), so every api replica answers tasks/*.
    """CREATE TABLE IF NOT EXISTS mcp_tasks (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, status TEXT NOT NULL, message TEXT,
        requests TEXT NOT NULL, result TEXT, error TEXT, created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS mcp_tasks_created ON mcp_tasks (created_ms)",
    # The running replica's heartbeat per task (a table of its own: an existing mcp_tasks gains no column).
    """CREATE TABLE IF NOT EXISTS mcp_task_leases (
        task TEXT PRIMARY KEY, beat_ms BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS mcp_task_responses (
        task TEXT NOT NULL, input_key TEXT NOT NULL, response TEXT NOT NULL, taken INTEGER NOT NULL,
        PRIMARY KEY (task, input_key))""",
    # Message bodies longer than a resource keeps inline, by SHA-256 (hangar.bodies).
    """CREATE TABLE IF NOT EXISTS bodies (
        digest TEXT PRIMARY KEY, body TEXT NOT NULL, size INTEGER NOT NULL, at TEXT NOT NULL)""",
    # Tokens minted by the api (``hangar connect``): the SHA-256 of each, never the token (hangar.store.minted).
    """CREATE TABLE IF NOT EXISTS minted_tokens (
        id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE, subject TEXT NOT NULL, role TEXT NOT NULL,
        name TEXT NOT NULL, created_by TEXT NOT NULL, created_at TEXT NOT NULL, expires_at TEXT,
        revoked_at TEXT)""",
    # Where a process serves another (the operator's live channel for the api), with its bearer token.
    """CREATE TABLE IF NOT EXISTS endpoints (
        name TEXT PRIMARY KEY, address TEXT NOT NULL, token TEXT NOT NULL, at TEXT NOT NULL)""",
]


# How long Tower's decisions are kept for a call whose receipt hangar has not recorded yet (spec 002).
TOWER_DECISIONS_SECONDS = 3600


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now() -> str:
    return _iso(datetime.now(UTC).timestamp())


@dataclass(frozen=True)
class Event:
    seq: int
    scope: str
    turn: str | None
    kind: str
    payload: dict[str, Any]
    at: str

    def dump(self) -> dict[str, Any]:
        return {"seq": self.seq, "turn": self.turn, "kind": self.kind, "at": self.at, **self.payload}


class _Backend(Protocol):
    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None: ...
    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...
    async def transaction(self, steps: list[tuple[str, tuple[Any, ...]]]) -> bool: ...
    async def close(self) -> None: ...


class _Sqlite:
    """One connection, used by one thread of its own: every statement, and the close, run there in the order
    they were asked. A statement whose caller was cancelled (a task stopped at shutdown) still runs to its
    end before the close, which before could run beside it on another worker thread and crash the process
    (a SQLite connection closed under a running statement)."""

    def __init__(self, path: str) -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hangar-sqlite")

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn)

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        await self._run(lambda: self.conn.execute(sql, params))

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await self._run(lambda: self.conn.execute(sql, params).fetchall())

    async def transaction(self, steps: list[tuple[str, tuple[Any, ...]]]) -> bool:
        def run() -> bool:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                for sql, params in steps:
                    self.conn.execute(sql, params)
                self.conn.execute("COMMIT")
                return True
            except sqlite3.IntegrityError:
                self.conn.execute("ROLLBACK")
                return False
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

        return await self._run(run)

    async def close(self) -> None:
        await self._run(self.conn.close)
        self.thread.shutdown(wait=False)


class _Postgres:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = asyncio.Lock()

    @classmethod
    async def connect(cls, url: str) -> _Postgres:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        return cls(conn)

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        async with self.lock:
            await self.conn.execute(self._sql(sql), params)

    async def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self.lock:
            cur = await self.conn.execute(self._sql(sql), params)
            rows: list[tuple[Any, ...]] = await cur.fetchall()
            return rows

    async def transaction(self, steps: list[tuple[str, tuple[Any, ...]]]) -> bool:
        import psycopg

        async with self.lock:
            try:
                async with self.conn.transaction():
                    for sql, params in steps:
                        await self.conn.execute(self._sql(sql), params)
                return True
            except psycopg.errors.UniqueViolation:
                return False

    async def close(self) -> None:
        await self.conn.close()


class Database:
    def __init__(self, backend: _Backend, url: str) -> None:
        self.backend = backend
        self.url = url
        self._purged: dict[str, float] = {}  # kind -> when accept_id last dropped expired ids

    async def migrate(self) -> None:
        for stmt in SCHEMA:
            await self.backend.execute(stmt)

    async def close(self) -> None:
        await self.backend.close()

    # activity events -----------------------------------------------------------------------------------
    def _event_steps(
        self, scope: str, kind: str, payload: dict[str, Any], turn: str | None
    ) -> list[tuple[str, tuple[Any, ...]]]:
        return [
            (
                "INSERT INTO events (scope, seq, turn, kind, payload, at) "
                "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM events WHERE scope = ?",
                (scope, turn, kind, json.dumps(payload), now(), scope),
            )
        ]

    async def append_event(
        self, scope: str, kind: str, payload: dict[str, Any], turn: str | None = None
    ) -> None:
        for _ in range(5):  # another writer took the same seq: take the next one
            if await self.backend.transaction(self._event_steps(scope, kind, payload, turn)):
                return
        raise RuntimeError(f"could not append event to {scope}")

    async def record_driver_event(
        self, run: str, seq: int, scope: str, kind: str, payload: dict[str, Any], turn: str | None
    ) -> bool:
        """Stores a driver event exactly once. False when (run, seq) was already stored."""
        steps = [("INSERT INTO driver_events (run, seq) VALUES (?, ?)", (run, seq))]
        for _ in range(5):
            if await self.backend.transaction(steps + self._event_steps(scope, kind, payload, turn)):
                return True
            if await self.backend.fetch("SELECT 1 FROM driver_events WHERE run = ? AND seq = ?", (run, seq)):
                return False
        raise RuntimeError(f"could not record driver event {run}#{seq}")

    async def mark_driver_event(self, run: str, seq: int) -> bool:
        """Marks a driver event seen without an activity event (for events not shown to users)."""
        return await self.backend.transaction(
            [("INSERT INTO driver_events (run, seq) VALUES (?, ?)", (run, seq))]
        )

    async def driver_acked(self, run: str) -> int:
        rows = await self.backend.fetch(
            "SELECT COALESCE(MAX(seq), 0) FROM driver_events WHERE run = ?", (run,)
        )
        return int(rows[0][0]) if rows else 0

    async def events(self, scope: str, since: int = 0, limit: int = 1000) -> list[Event]:
        rows = await self.backend.fetch(
            "SELECT seq, scope, turn, kind, payload, at FROM events WHERE scope = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (scope, since, limit),
        )
        return [_event(r) for r in rows]

    async def last_events(self, scope: str, n: int) -> list[Event]:
        """The ``n`` latest events of ``scope``, oldest first."""
        rows = await self.backend.fetch(
            "SELECT seq, scope, turn, kind, payload, at FROM events WHERE scope = ? ORDER BY seq DESC LIMIT ?",
            (scope, n),
        )
        return [_event(r) for r in reversed(rows)]

    async def has_event(self, scope: str, turn: str, kind: str) -> bool:
        """Whether ``scope`` recorded an event of ``kind`` for ``turn`` (e.g. the driver's turn_started)."""
        rows = await self.backend.fetch(
            "SELECT 1 FROM events WHERE scope = ? AND turn = ? AND kind = ? LIMIT 1", (scope, turn, kind)
        )
        return bool(rows)

    async def turn_events(self, scope: str, turn: str, kind: str, limit: int = 200) -> list[Event]:
        """The events of ``kind`` that ``scope`` recorded for ``turn``, oldest first (e.g. its hand-backs)."""
        rows = await self.backend.fetch(
            "SELECT seq, scope, turn, kind, payload, at FROM events WHERE scope = ? AND turn = ? AND kind = ? "
            "ORDER BY seq LIMIT ?",
            (scope, turn, kind, limit),
        )
        return [_event(r) for r in rows]

    async def last_seq(self, scope: str) -> int:
        rows = await self.backend.fetch("SELECT COALESCE(MAX(seq), 0) FROM events WHERE scope = ?", (scope,))
        return int(rows[0][0])

    # ids accepted once (Tower's event ids) ------------------------------------------------------------
    async def accept_id(self, kind: str, item: str, keep_seconds: float) -> bool:
        """Records ``item`` as accepted; False when it was accepted within ``keep_seconds`` already.

        The primary key makes this atomic across processes sharing the database: of two api replicas given
        the same id at once, exactly one gets True. Ids older than ``keep_seconds`` are dropped first."""
        now_ts = datetime.now(UTC).timestamp()
        cutoff = _iso(now_ts - keep_seconds)
        # Old ids are dropped at most once a minute (a scan of the table), not on every event.
        if now_ts - self._purged.get(kind, 0.0) >= min(60.0, keep_seconds):
            await self.backend.execute("DELETE FROM seen_ids WHERE kind = ? AND at < ?", (kind, cutoff))
            self._purged[kind] = now_ts
        elif await self.backend.fetch(
            "SELECT 1 FROM seen_ids WHERE kind = ? AND id = ? AND at < ?", (kind, item, cutoff)
        ):
            await self.backend.execute("DELETE FROM seen_ids WHERE kind = ? AND id = ?", (kind, item))
        return await self.backend.transaction(
            [("INSERT INTO seen_ids (kind, id, at) VALUES (?, ?, ?)", (kind, item, now()))]
        )

    async def forget_id(self, kind: str, item: str) -> None:
        """Un-accepts ``item``: its retry then counts as new (Tower could not be asked about it)."""
        await self.backend.execute("DELETE FROM seen_ids WHERE kind = ? AND id = ?", (kind, item))

    # Tower's decisions, kept an hour (a "decided" may come before hangar has the call's receipt) ------
    async def keep_tower_decision(self, receipt: str, decision: dict[str, Any]) -> None:
        """Records (or refreshes) Tower's answer for ``receipt``; every re-read writes it again."""
        cutoff = _iso(datetime.now(UTC).timestamp() - TOWER_DECISIONS_SECONDS)
        await self.backend.execute("DELETE FROM tower_decisions WHERE at < ?", (cutoff,))
        await self.backend.transaction(
            [
                ("DELETE FROM tower_decisions WHERE id = ?", (receipt,)),
                (
                    "INSERT INTO tower_decisions (id, decision, at) VALUES (?, ?, ?)",
                    (receipt, json.dumps(decision), now()),
                ),
            ]
        )

    async def tower_decision(self, receipt: str) -> dict[str, Any] | None:
        """Tower's answer for ``receipt`` kept within the last hour, or None."""
        cutoff = _iso(datetime.now(UTC).timestamp() - TOWER_DECISIONS_SECONDS)
        rows = await self.backend.fetch(
            "SELECT decision FROM tower_decisions WHERE id = ? AND at >= ?", (receipt, cutoff)
        )
        return dict(json.loads(rows[0][0])) if rows else None

    # message bodies kept outside resources (hangar.bodies) -------------------------------------------
    async def put_body(self, digest: str, body: str, size: int) -> None:
        """Stores ``body`` under its digest once. Storing it again only renews its time, so a sweep that
        runs before the resource naming it is written does not take it (``unnamed_bodies``)."""
        await self.backend.execute(
            "INSERT INTO bodies (digest, body, size, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (digest) DO UPDATE SET at = excluded.at",
            (digest, body, size, now()),
        )

    async def get_body(self, digest: str) -> str | None:
        rows = await self.backend.fetch("SELECT body FROM bodies WHERE digest = ?", (digest,))
        return str(rows[0][0]) if rows else None

    async def bodies_before(self, seconds_ago: float) -> list[str]:
        """Digests of the bodies stored (or stored again) more than ``seconds_ago`` seconds ago."""
        cutoff = _iso(datetime.now(UTC).timestamp() - seconds_ago)
        rows = await self.backend.fetch("SELECT digest FROM bodies WHERE at < ?", (cutoff,))
        return [str(r[0]) for r in rows]

    async def delete_bodies(self, digests: list[str], seconds_ago: float) -> None:
        """Deletes these bodies unless one was stored again within the last ``seconds_ago`` seconds."""
        cutoff = _iso(datetime.now(UTC).timestamp() - seconds_ago)
        for digest in digests:
            await self.backend.execute("DELETE FROM bodies WHERE digest = ? AND at < ?", (digest, cutoff))

    # endpoints (the operator's live channel) ------------------------------------------------------------
    async def put_endpoint(self, name: str, address: str, token: str) -> None:
        await self.backend.execute(
            "INSERT INTO endpoints (name, address, token, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET address = excluded.address, token = excluded.token, "
            "at = excluded.at",
            (name, address, token, now()),
        )

    async def endpoint(self, name: str) -> tuple[str, str] | None:
        """(address, token) of ``name``, or None when no process published it."""
        rows = await self.backend.fetch("SELECT address, token FROM endpoints WHERE name = ?", (name,))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    # audit ---------------------------------------------------------------------------------------------
    async def audit(self, actor: str, action: str, target: str, **detail: Any) -> None:
        await self.backend.execute(
            "INSERT INTO audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)",
            (now(), actor, action, target, json.dumps(detail)),
        )

    async def audit_entries(self, action: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        if action:
            rows = await self.backend.fetch(
                "SELECT at, actor, action, target, detail FROM audit WHERE action = ? ORDER BY at DESC LIMIT ?",
                (action, limit),
            )
        else:
            rows = await self.backend.fetch(
                "SELECT at, actor, action, target, detail FROM audit ORDER BY at DESC LIMIT ?", (limit,)
            )
        return [{"at": r[0], "actor": r[1], "action": r[2], "target": r[3], **json.loads(r[4])} for r in rows]


def _event(row: tuple[Any, ...]) -> Event:
    return Event(int(row[0]), row[1], row[2], row[3], json.loads(row[4]), row[5])


async def open_database(url: str) -> Database:
    if url.startswith("sqlite:///"):
        backend: _Backend = _Sqlite(url.removeprefix("sqlite:///"))
    elif url.startswith(("postgresql://", "postgres://")):
        backend = await _Postgres.connect(url)
    else:
        raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")
    db = Database(backend, url)
    await db.migrate()
    return db
