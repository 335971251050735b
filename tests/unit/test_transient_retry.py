"""retry.transient: the operator's first listing is tried again while the apiserver says "not now"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hangar.kube import ApiException
from hangar_operator.retry import transient


def _failing(statuses: list[int]) -> tuple[list[int], Callable[[], Awaitable[None]]]:
    calls: list[int] = []

    async def work() -> None:
        calls.append(len(calls))
        if len(calls) <= len(statuses):
            raise ApiException(status=statuses[len(calls) - 1], reason="test")

    return calls, work


def test_not_now_is_tried_again_until_it_works() -> None:
    calls, work = _failing([429, 503])
    asyncio.run(transient(work, within=5.0, first_delay=0.01))
    assert len(calls) == 3


def test_a_refusal_is_raised_at_once() -> None:
    calls, work = _failing([403])
    with pytest.raises(ApiException) as e:
        asyncio.run(transient(work, within=5.0, first_delay=0.01))
    assert e.value.status == 403 and len(calls) == 1


def test_not_now_for_too_long_is_raised() -> None:
    calls, work = _failing([429] * 100)
    with pytest.raises(ApiException) as e:
        asyncio.run(transient(work, within=0.05, first_delay=0.01))
    assert e.value.status == 429 and 1 < len(calls) < 100
