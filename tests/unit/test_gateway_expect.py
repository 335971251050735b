"""A run the operator just made: what is stored for it is read while its pod starts (``Gateway.expect``),
so its driver's first hello is welcomed without a database read on the way."""

from __future__ import annotations

import asyncio
from typing import Any

from hangar_driver import protocol as P
from hangar_operator.gateway import Gateway

KEY = P.new_run_key().encode()
RUN = "s-r1"


class Rig:
    def __init__(self, stored: int = 3, fail_first: bool = False) -> None:
        self.reads: list[str] = []
        self.stored, self.fail_first = stored, fail_first
        self.connected: list[str] = []

    async def acked_for_run(self, run: str) -> int:
        self.reads.append(run)
        if self.fail_first and len(self.reads) == 1:
            raise RuntimeError("database away")
        return self.stored

    def gateway(self) -> Gateway:
        async def key(run: str) -> bytes | None:
            return KEY if run == RUN else None

        async def nothing(*_: Any) -> None:
            return None

        async def on_connect(run: str, hello: dict[str, Any]) -> None:
            self.connected.append(run)

        return Gateway(
            host="127.0.0.1",
            port=0,
            key_for_run=key,
            on_event=nothing,
            on_connect=on_connect,
            on_disconnect=nothing,
            on_rejected=nothing,
            acked_for_run=self.acked_for_run,
        )


async def _hello(port: int) -> dict[str, Any]:
    """Say hello as the run's driver and confirm: the welcome."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(P.encode(P.sign(KEY, P.make_frame(RUN, P.D2G, P.HELLO, {"run": RUN}))))
    welcome = P.decode(await reader.readline())
    P.verify(KEY, welcome, P.G2D, RUN)
    ack = {"ids": [], "nonce": welcome["body"]["nonce"]}
    writer.write(P.encode(P.sign(KEY, P.make_frame(RUN, P.D2G, P.ACK, ack))))
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    return dict(welcome["body"])


def test_a_run_expected_is_welcomed_with_what_was_read_when_it_was_made() -> None:
    async def go() -> None:
        rig = Rig(stored=3)
        gw = rig.gateway()
        port = await gw.start()
        try:
            gw.expect(RUN)
            gw.expect(RUN)  # once
            await asyncio.sleep(0.05)
            assert rig.reads == [RUN]  # read ahead, before any hello
            assert (await _hello(port))["acked"] == 3
            assert rig.reads == [RUN] and rig.connected == [RUN]  # the hello read nothing more
            assert (await _hello(port))["acked"] == 3  # a later hello reads as before
            assert rig.reads == [RUN, RUN]
        finally:
            await gw.stop()

    asyncio.run(go())


def test_a_read_ahead_that_failed_is_made_again_at_the_hello() -> None:
    async def go() -> None:
        rig = Rig(stored=5, fail_first=True)
        gw = rig.gateway()
        port = await gw.start()
        try:
            gw.expect(RUN)
            await asyncio.sleep(0.05)
            assert (await _hello(port))["acked"] == 5
            assert rig.reads == [RUN, RUN]
        finally:
            await gw.stop()

    asyncio.run(go())


def test_a_forgotten_run_drops_its_read_ahead() -> None:
    async def go() -> None:
        rig = Rig()
        gw = rig.gateway()
        gw.expect(RUN)
        gw.forget(RUN)
        gw.expect("other-r1")
        await gw.stop()
        assert not gw._expected

    asyncio.run(go())
