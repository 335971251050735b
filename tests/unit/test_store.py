"""The database behind events and the audit log, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hangar.store import Database, open_database

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'h.db'}"
    else:
        url = os.environ.get("HANGAR_TEST_POSTGRES_URL", "")
        if not url:
            pytest.skip("HANGAR_TEST_POSTGRES_URL is not set (tools/test.sh starts a server)")
    d = await open_database(url)
    yield d
    await d.close()


async def test_events_are_numbered_per_scope_and_read_since(db: Database) -> None:
    scope = f"session/{uuid.uuid4().hex[:8]}"
    other = scope + "-other"
    for i in range(5):
        await db.append_event(scope, "progress", {"i": i}, turn="t-1")
    await db.append_event(other, "progress", {"i": 99})
    evs = await db.events(scope)
    assert [e.seq for e in evs] == [1, 2, 3, 4, 5]
    assert [e.payload["i"] for e in await db.events(scope, since=3)] == [3, 4]
    assert [e.seq for e in await db.events(other)] == [1]
    assert await db.last_seq(scope) == 5
    assert [e.payload["i"] for e in await db.last_events(scope, 2)] == [3, 4], "the latest, oldest first"
    assert [e.seq for e in await db.last_events(other, 200)] == [1]


async def test_concurrent_appends_never_share_a_seq(db: Database) -> None:
    scope = f"session/{uuid.uuid4().hex[:8]}"
    await asyncio.gather(*(db.append_event(scope, "k", {"n": n}) for n in range(40)))
    seqs = [e.seq for e in await db.events(scope)]
    assert seqs == list(range(1, 41))


async def test_driver_events_are_recorded_exactly_once(db: Database) -> None:
    run, scope = f"s-r{uuid.uuid4().hex[:6]}", "session/s"
    assert await db.record_driver_event(run, 1, scope, "text", {"text": "a"}, "t") is True
    assert await db.record_driver_event(run, 1, scope, "text", {"text": "a"}, "t") is False
    assert await db.mark_driver_event(run, 2) is True
    assert await db.mark_driver_event(run, 2) is False
    assert await db.driver_acked(run) == 2
    assert await db.driver_acked("never-seen") == 0


async def test_audit_entries_keep_their_detail(db: Database) -> None:
    marker = uuid.uuid4().hex
    await db.audit("lee@acme.test", "session.create", "api-fix", marker=marker)
    entries = [e for e in await db.audit_entries("session.create") if e.get("marker") == marker]
    assert entries and entries[0]["actor"] == "lee@acme.test" and entries[0]["target"] == "api-fix"


async def test_an_endpoint_is_published_and_replaced(db: Database) -> None:
    # A name of its own: the PostgreSQL database is shared with the e2e stacks, whose operators publish "live".
    name = f"live-{uuid.uuid4().hex}"
    assert await db.endpoint(name) is None
    await db.put_endpoint(name, "127.0.0.1:1", "t1")
    await db.put_endpoint(name, "127.0.0.1:2", "t2")  # an operator restarted: the newest wins
    assert await db.endpoint(name) == ("127.0.0.1:2", "t2")


async def test_unknown_database_url_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported database URL"):
        await open_database("mysql://x")


async def test_an_id_is_accepted_once_across_two_connections_at_once(db: Database) -> None:
    """Two api replicas share the database: the same Tower event id given to both is applied once."""
    other = await open_database(db.url)
    try:
        for _ in range(5):
            item = f"ev-{uuid.uuid4().hex}"
            got = await asyncio.gather(
                *(d.accept_id("tower-event", item, 48 * 3600) for d in (db, other, db, other))
            )
            assert sorted(got) == [False, False, False, True]
        item = f"ev-{uuid.uuid4().hex}"
        assert await db.accept_id("tower-event", item, 48 * 3600)
        # Another kind of id is its own namespace; forgetting makes the retry count as new.
        assert await other.accept_id("other-kind", item, 48 * 3600)
        await other.forget_id("tower-event", item)
        assert await db.accept_id("tower-event", item, 48 * 3600)
        # Past the keep time an id is new again (here: kept for 0 seconds).
        await asyncio.sleep(0.01)
        assert await db.accept_id("tower-event", item, 0)
    finally:
        await other.close()


async def test_minted_tokens_are_kept_by_digest_and_revoked_once(db: Database) -> None:
    from hangar.store import minted as M

    tid, digest = f"tok-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex * 2
    row = M.MintedToken(tid, digest, "root", "mcp", "ide", "root", "2026-12-01T10:00:00Z", None, None)
    await M.add(db, row)
    assert [t for t in await M.every(db) if t.id == tid] == [row]
    with pytest.raises(Exception):  # noqa: B017 - each backend's own integrity error: a digest is unique
        await M.add(db, M.MintedToken(tid + "x", digest, "root", "mcp", "", "root", "2026", None, None))
    first = await M.revoke(db, tid, "2026-12-01T11:00:00Z")
    assert first is not None and first.revoked_at == "2026-12-01T11:00:00Z"
    again = await M.revoke(db, tid, "2026-12-01T12:00:00Z")
    assert again is not None and again.revoked_at == "2026-12-01T11:00:00Z", "the first revocation stands"
    assert await M.revoke(db, "tok-0000000000", "2026") is None
    assert "digest" not in row.view() and row.view()["id"] == tid


async def test_sqlite_closes_only_after_the_work_of_a_cancelled_caller_has_ended(tmp_path: Path) -> None:
    """At shutdown a task using the database (the api's minted-token refresh, an event being appended) is
    cancelled while its statements run on a thread; the close must wait for them, not run beside them from
    another thread: a connection closed under a running statement crashed the process (a segmentation fault
    in the unit tier, ~1 run in 4 of a short api test), and one closed between two statements of a
    transaction lost the transaction's write."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    d = await open_database(url)
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT max(x) FROM c"
    write = "INSERT INTO audit (at, actor, action, target, detail) VALUES ('t', 'a', 'test.after', 'x', '{}')"
    writing = asyncio.create_task(d.backend.transaction([(slow, ()), (write, ())]))
    await asyncio.sleep(0.02)  # the transaction's first statement is running on its thread
    writing.cancel()
    await d.close()
    with pytest.raises(asyncio.CancelledError):
        await writing
    again = await open_database(url)
    try:
        assert await again.audit_entries("test.after"), "the connection was closed under the transaction"
    finally:
        await again.close()
