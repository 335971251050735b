"""The operator's wake-ups: one pending per key, never pushed back by a later one."""

from __future__ import annotations

import asyncio
import time

from hangar_operator.retry import Retrier
from hangar_operator.sweeper import Wakeups


async def test_a_wake_up_due_now_is_not_lost_to_a_later_one_made_in_the_same_turn() -> None:
    """A pool's member became ready (wake now) and, in the same turn of the loop, the pool's running reconcile
    armed its next wake-up a minute away: the wake-up now still runs."""
    ran: list[str] = []
    wakeups = Wakeups(Retrier())

    async def work(what: str) -> None:
        ran.append(what)

    wakeups.now("pools/ns/env", lambda: work("now"))
    wakeups.at("pools/ns/env", time.time() + 60, lambda: work("later"))
    await asyncio.sleep(0.05)
    assert ran == ["now"]
    wakeups.stop()


async def test_a_sooner_wake_up_replaces_a_later_one_and_cancel_drops_it() -> None:
    ran: list[str] = []
    wakeups = Wakeups(Retrier())

    async def work(what: str) -> None:
        ran.append(what)

    wakeups.at("k", time.time() + 60, lambda: work("later"))
    wakeups.at("k", time.time() + 0.01, lambda: work("sooner"))
    await asyncio.sleep(0.1)
    assert ran == ["sooner"]  # one per key: the later one was replaced
    wakeups.at("k", time.time() + 0.01, lambda: work("cancelled"))
    wakeups.cancel("k")
    await asyncio.sleep(0.05)
    assert ran == ["sooner"]
    wakeups.stop()
