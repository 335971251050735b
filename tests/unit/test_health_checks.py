"""hangar/health.py: the checks behind /readyz and /healthz: every check runs, a failure says which and
why, a slow check fails by the timeout, answers are cached for a short while, and a flag check follows its
event."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from hangar.health import Checks, flag, report


async def ok() -> None:
    return None


async def broken() -> None:
    raise RuntimeError("cannot list sessions in team-a: 403 Forbidden")


async def forbidden() -> None:
    raise ApiException(status=403, reason="Forbidden")


async def slow() -> None:
    await asyncio.sleep(10)


async def test_all_pass() -> None:
    passed, results = await Checks({"a": ok, "b": ok}).run()
    assert passed and results == {"a": "ok", "b": "ok"}
    assert report(results) == "a: ok\nb: ok\n"


@pytest.mark.parametrize(
    ("check", "why"),
    [
        (broken, "RuntimeError: cannot list sessions in team-a: 403 Forbidden"),
        (forbidden, "apiserver answered 403 Forbidden"),
        (slow, "no answer within 0.2s"),
    ],
)
async def test_one_failure_fails_the_probe_and_says_why(check: object, why: str) -> None:
    passed, results = await Checks({"good": ok, "bad": check}, timeout=0.2).run()  # type: ignore[dict-item]
    assert not passed
    assert results == {"good": "ok", "bad": why}


async def test_checks_run_together_so_two_slow_ones_take_one_timeout() -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await Checks({"a": slow, "b": slow}, timeout=0.3).run()
    assert loop.time() - t0 < 0.55


async def test_answers_are_cached_for_ttl_then_run_again() -> None:
    calls = 0

    async def counted() -> None:
        nonlocal calls
        calls += 1

    checks = Checks({"c": counted}, ttl=0.2)
    await checks.run()
    await checks.run()
    assert calls == 1
    await asyncio.sleep(0.25)
    await checks.run()
    assert calls == 2
    uncached = Checks({"c": counted}, ttl=0)
    await uncached.run()
    await uncached.run()
    assert calls == 4


async def test_a_flag_check_follows_its_event() -> None:
    event = asyncio.Event()
    checks = Checks({"kopf": flag(event, "kopf's startup")}, ttl=0)
    passed, results = await checks.run()
    assert not passed and results["kopf"] == "RuntimeError: kopf's startup not yet"
    event.set()
    assert (await checks.run())[0]
