"""The driver gateway's limits before authentication, over real TCP on 127.0.0.1 (issue 11, finding 6):
a small per-frame budget and one deadline for the whole handshake, so unauthenticated connections can't
make the operator hold (and keep) memory."""

from __future__ import annotations

import asyncio
import gc
import sys
import textwrap
from typing import Any

from prometheus_client import REGISTRY

from hangar_driver import protocol as P
from hangar_operator import gateway as G
from hangar_operator.gateway import Gateway

METRIC = "hangar_driver_messages_rejected_total"


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def started() -> tuple[Gateway, list[tuple[str, str]]]:
    rejected: list[tuple[str, str]] = []

    async def key_for_run(run: str) -> bytes | None:
        return None

    async def nothing(*_: Any) -> None:
        return None

    async def on_rejected(who: str, reason: str) -> None:
        rejected.append((who, reason))

    async def acked(_: str) -> int:
        return 0

    gw = Gateway(
        host="127.0.0.1",
        port=0,
        key_for_run=key_for_run,
        on_event=nothing,
        on_connect=nothing,
        on_disconnect=nothing,
        on_rejected=on_rejected,
        acked_for_run=acked,
    )
    await gw.start()
    return gw, rejected


# 20 connections, each sending a 4 MiB frame with no end of line and holding the connection open.
CLIENTS = textwrap.dedent(
    """
    import socket, sys, time
    port = int(sys.argv[1])
    chunk = b"{" + b" " * (4 * 1024 * 1024)
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(5)
        try:
            s.sendall(chunk)
        except OSError:
            pass
        socks.append(s)
    time.sleep(2)
    for s in socks:
        s.close()
    """
)


async def test_unauthenticated_partial_frames_leave_no_memory_behind() -> None:
    gw, rejected = await started()
    counted = REGISTRY.get_sample_value(METRIC, {"reason": "frame_too_large"}) or 0.0
    try:
        gc.collect()
        before = rss_bytes()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENTS, str(gw.port))
        peak = before
        while proc.returncode is None:
            peak = max(peak, rss_bytes())
            try:
                await asyncio.wait_for(proc.wait(), 0.05)
            except TimeoutError:
                pass
        assert proc.returncode == 0
        for _ in range(100):
            if not gw._conns:
                break
            await asyncio.sleep(0.05)
        gc.collect()
        after = rss_bytes()
        # Before the hello budget each connection buffered its 4 MiB: ~75 MB held, and kept.
        assert peak - before < 16 * 1024 * 1024, (before, peak)
        assert after - before < 4 * 1024 * 1024, (before, after)
        assert rejected and all("too large" in r for _, r in rejected)
        # Every refusal is counted, under a fixed label.
        assert (REGISTRY.get_sample_value(METRIC, {"reason": "frame_too_large"}) or 0.0) - counted >= 20
    finally:
        await gw.stop()


async def test_a_hello_over_the_budget_is_refused_and_the_handshake_has_one_deadline() -> None:
    gw, rejected = await started()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        big = P.make_frame("s1-r1", P.D2G, P.HELLO, {"pad": "x" * G.HELLO_MAX_BYTES})
        writer.write(P.encode(big))
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
        assert "too large" in rejected[-1][1]
        writer.close()
        # A connection that says nothing is closed at the deadline.
        saved = G.HELLO_TIMEOUT
        G.HELLO_TIMEOUT = 0.3
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
            assert await asyncio.wait_for(reader.read(), 10) == b""
            assert "no hello in time" in rejected[-1][1]
            writer.close()
        finally:
            G.HELLO_TIMEOUT = saved
    finally:
        await gw.stop()
