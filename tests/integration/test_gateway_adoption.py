"""A warm sandbox's driver adopted in place (protocol "Adoption in place"), over real TCP with real signatures:
what the gateway refuses (a hello it sent no adoption for, the pool's key, a nonce of another connection),
what it accepts, and the real driver falling back to a new connection when the gateway refuses."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from hangar_driver import protocol as P
from hangar_operator.gateway import Gateway

from .test_gateway_driver import Store, env, sandbox, until

__all__ = ["env", "sandbox"]  # fixtures, used by name

POOL = "pool-e-abc"


class Client:
    """A driver's side spoken by hand: the pool's run, connected and confirmed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, nonce: str) -> None:
        self.reader, self.writer, self.nonce = reader, writer, nonce

    @classmethod
    async def connect(cls, port: int, key: str) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(P.encode(P.sign(key, P.make_frame(POOL, P.D2G, P.HELLO, {"run": POOL, "harness": "x"}))))
        welcome = P.decode(await reader.readline())
        P.verify(key, welcome, P.G2D, POOL)
        nonce = welcome["body"]["nonce"]
        writer.write(P.encode(P.sign(key, P.make_frame(POOL, P.D2G, P.ACK, {"ids": [], "nonce": nonce}))))
        await writer.drain()
        return cls(reader, writer, nonce)

    async def send(self, frame: dict[str, Any]) -> None:
        self.writer.write(P.encode(frame))
        await self.writer.drain()

    async def closed(self) -> bool:
        """Read until the gateway closes the connection (frames it sent before are skipped)."""
        try:
            while await asyncio.wait_for(self.reader.readline(), 10):
                pass
        except ConnectionError:
            pass
        self.writer.close()
        return True


def adoption(key: str, run: str, nonce: str, came_from: str = POOL) -> dict[str, Any]:
    body = {"run": run, "harness": "x", "resume_from": None, "adopted_from": came_from, "nonce": nonce}
    return P.sign(key, P.make_frame(run, P.D2G, P.HELLO, body))


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[Store, Gateway, str]]:
    store = Store()
    pool_key = P.new_run_key()
    store.keys[POOL] = pool_key.encode()
    gw = store.gateway()
    await gw.start()
    yield store, gw, pool_key
    await gw.stop()


async def test_the_gateway_takes_an_adoption_only_as_it_sent_it(gateway: tuple[Store, Gateway, str]) -> None:
    store, gw, pool_key = gateway
    run, adopt_nonce = "s1-r1", "n" * 24
    key = P.derive_run_key(pool_key, run, adopt_nonce)
    store.keys[run] = key.encode()

    # 1. no adoption sent to this run: a hello in place is refused, even with the session's right key
    c = await Client.connect(gw.port, pool_key)
    await c.send(adoption(key, run, c.nonce))
    assert await c.closed() and "no adoption sent" in store.rejected[-1][1]
    assert not gw.connected(run)

    await gw.send(POOL, P.OP_ADOPT, {"run": run, "nonce": adopt_nonce}, "adopt-s1-r1")
    # 2. an adoption as another run than the one sent
    c = await Client.connect(gw.port, pool_key)
    store.keys["s2-r1"] = P.derive_run_key(pool_key, "s2-r1", adopt_nonce).encode()
    await c.send(adoption(P.derive_run_key(pool_key, "s2-r1", adopt_nonce), "s2-r1", c.nonce))
    assert await c.closed() and "no adoption sent" in store.rejected[-1][1]
    # 3. signed with the pool's key, not the derived one
    c = await Client.connect(gw.port, pool_key)
    await c.send(adoption(pool_key, run, c.nonce))
    assert await c.closed() and "bad signature" in store.rejected[-1][1]
    # 4. the right key, but the nonce of an earlier connection (a captured adoption, replayed)
    old_nonce = c.nonce
    c = await Client.connect(gw.port, pool_key)
    await c.send(adoption(key, run, old_nonce))
    assert await c.closed() and "wrong nonce" in store.rejected[-1][1]
    # 5. from another pool run than the connection's
    c = await Client.connect(gw.port, pool_key)
    await c.send(adoption(key, run, c.nonce, came_from="pool-e-other"))
    assert await c.closed() and "another run" in store.rejected[-1][1]
    assert not gw.connected(run) and [r for r, _ in store.connects if r == run] == []

    # 6. as sent: the gateway welcomes the session's run on this connection, signed with the derived key
    c = await Client.connect(gw.port, pool_key)
    await c.send(adoption(key, run, c.nonce))
    while True:  # the adopt command (queued for the pool's run) may come first
        frame = P.decode(await asyncio.wait_for(c.reader.readline(), 10))
        if frame["run"] == run:
            break
        P.verify(pool_key, frame, P.G2D, POOL)
    P.verify(key, frame, P.G2D, run)
    assert frame["type"] == P.WELCOME and frame["body"] == {"acked": 0, "nonce": c.nonce}
    assert await gw.wait_connected(run, 5) and store.connects[-1][0] == run
    assert POOL not in gw._runs and not gw.connected(POOL) and gw.pending_commands(POOL) == []
    # events of the session's run are taken and acknowledged on it
    await c.send(P.sign(key, P.make_frame(run, P.D2G, P.EVENT, {"name": "log", "payload": {}}, seq=1)))
    ack = P.decode(await asyncio.wait_for(c.reader.readline(), 10))
    P.verify(key, ack, P.G2D, run)
    assert ack["body"] == {"seq": 1} and store.named(run, "log") == [{}]
    # the pool's key is worth nothing on it any more
    await c.send(P.sign(pool_key, P.make_frame(POOL, P.D2G, P.PING, {})))
    assert await c.closed() and store.rejected[-1][0] == run
    # the refused connections (1-5) were the pool's; the adopted one ended as the session's only
    assert store.disconnects == [POOL] * 5 + [run]


async def test_a_refused_adoption_in_place_falls_back_to_a_new_connection(env: Callable[..., Any]) -> None:
    store, gw, drv = await env(pooled=True)
    pool_run = drv.run
    run, nonce = "sess-r1", "n-" + os.urandom(12).hex()
    # the operator does not know the session's key yet: the hello in place is refused, then the driver's
    # own hello on a new connection too, until it does
    await gw.send(pool_run, "adopt", {"run": run, "nonce": nonce}, command_id="adopt-sess-r1")
    await until(lambda: [w for w, why in store.rejected if w == run and "unknown run" in why], what="refusal")
    store.keys[run] = P.derive_run_key(drv.key, run, nonce).encode()
    assert await gw.wait_connected(run, 20), drv.logs()
    await until(lambda: store.result_of(run, "adopt-sess-r1"), what="adopt result")
    assert [n for n, _ in store.ordered(run)][:2] == ["driver_ready", "command_result"]
    assert "adopted in place" not in drv.logs()
