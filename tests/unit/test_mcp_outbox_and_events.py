"""The MCP server's small pieces with many cases: a subscriber's throttled outbox (timed from the write), the
bounded event store behind resumable SSE, and reading ``since`` cursors."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification

from hangar_api.inbox_looks import pull_request
from hangar_api.mcp.events import BoundedEventStore
from hangar_api.mcp.outbox import Outbox
from hangar_api.mcp.resources import parse_cursor, parse_since


async def _burst(
    slow: float, marks: int, every: float, interval: float = 0.1
) -> list[tuple[str, float, float]]:
    """``marks`` changes of one URI ``every`` seconds apart, through an outbox whose writes take ``slow``."""
    writes: list[tuple[str, float, float]] = []

    async def write(uri: str) -> None:
        began = time.monotonic()
        await asyncio.sleep(slow)
        writes.append((uri, began, time.monotonic()))

    box = Outbox(write, interval=interval)
    runner = asyncio.create_task(box.run())
    try:
        for _ in range(marks):
            box.mark("hangar://x")
            await asyncio.sleep(every)
        await asyncio.sleep(interval + slow + 0.05)
    finally:
        runner.cancel()
    return writes


@pytest.mark.parametrize("slow", [0.0, 0.03, 0.15])
async def test_the_window_starts_when_a_notification_is_written(slow: float) -> None:
    writes = await _burst(slow, marks=20, every=0.01)
    assert len(writes) >= 2, "the first change at once, one more for the rest"
    for (_, _, ended), (_, began, _) in itertools.pairwise(writes):
        assert began - ended >= 0.1 - 0.002, writes  # never closer than the window after a write ended
    assert len(writes) <= 1 + (0.2 + 0.15) / 0.1 + 1, writes


async def test_the_last_change_is_always_notified() -> None:
    writes = await _burst(0.0, marks=5, every=0.03)
    assert writes[-1][1] >= writes[0][1] + 0.1, "a trailing write after the burst"


async def test_uris_have_windows_of_their_own_and_a_failed_write_breaks_the_outbox() -> None:
    order: list[str] = []

    async def write(uri: str) -> None:
        if uri == "bad":
            raise ConnectionError("gone")
        order.append(uri)

    box = Outbox(write, interval=10)
    box.mark("a")
    box.mark("b")
    runner = asyncio.create_task(box.run())
    await asyncio.sleep(0.05)
    assert order == ["a", "b"]
    box.mark("bad")
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(runner, 1)
    assert box.broken is not None
    box.mark("a")  # a broken outbox takes no more
    assert not box._dirty


def _note(n: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"n": n})


async def _replay(store: BoundedEventStore, after: str) -> tuple[str | None, list[tuple[str | None, int]]]:
    got: list[tuple[str | None, int]] = []

    async def send(m: EventMessage) -> None:
        params = getattr(m.message, "params", None) or {}
        got.append((m.event_id, int(params["n"])))

    return await store.replay_events_after(after, send), got


async def test_the_event_store_replays_a_stream_after_an_id_and_forgets_old_ones() -> None:
    store = BoundedEventStore(per_stream=3, max_streams=2)
    prime = await store.store_event("s1", None)
    ids = [await store.store_event("s1", _note(i)) for i in range(3)]
    other = await store.store_event("s2", _note(99))
    stream, got = await _replay(store, ids[0])
    assert stream == "s1" and got == [(ids[1], 1), (ids[2], 2)], got
    assert await _replay(store, prime) == (None, []), "the priming event fell out of the 3 kept"
    stream, got = await _replay(store, other)
    assert stream == "s2" and got == []
    await store.store_event("s3", _note(7))  # a third stream: the least recently written (s1) goes
    assert (await _replay(store, ids[2]))[0] is None
    assert (await _replay(store, other))[0] == "s2"
    assert (await _replay(store, "not-a-number"))[0] is None


def test_since_and_cursors() -> None:
    assert parse_since(None) is None and parse_since("") is None and parse_since("12") == 12
    for bad in ("yesterday", "-1", "1.5", "9" * 19, " 3"):
        with pytest.raises(ToolError, match="invalid: since="):
            parse_since(bad)
    assert parse_cursor("7") == 7 and parse_cursor("job:3,a1:12") == {"job": 3, "a1": 12}
    for bad in ("job:x", "b1:3", "job:3,", "a1:" + "9" * 19):
        with pytest.raises(ToolError, match="invalid: since="):
            parse_cursor(bad)


def test_a_job_delivery_names_its_pull_request_wherever_it_keeps_it() -> None:
    url = "https://github.com/o/r/pull/7"
    assert pull_request({"pr_url": url}) == url
    assert pull_request({"pr": {"url": url}}) == url
    assert pull_request({"url": url}) == url
    assert pull_request({"url": "https://github.com/o/r/tree/b"}) is None
    assert pull_request({"branch": "b"}) is None and pull_request(None) is None
