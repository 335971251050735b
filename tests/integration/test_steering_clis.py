"""Interrupt with a message, at the adapter: the real CLIs stop and go on with the message in the same turn.

The rig (throw-away HOME, scripted model, the adapter called as the driver core calls it) is the one of
tests/integration/test_harness_real_clis.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from hangar.testing.model_server import Step

from .test_harness_real_clis import LIVE, SLOW, Rig, _continue_works, _wait_streaming, make_rig

pytestmark = pytest.mark.clis
__all__ = ["make_rig"]  # the fixture, imported for the tests below


@pytest.mark.parametrize("name", LIVE)
@pytest.mark.parametrize("state", ["tool", "text"])
def test_interrupt_with_a_message_goes_on_in_the_same_turn(
    make_rig: Callable[..., Rig], name: str, state: str
) -> None:
    first = (
        Step(text="Slow.", command=SLOW.format(secs=15) + " && echo late > late.txt")
        if state == "tool"
        else Step(text="Going on and on:", words=60, word_delay=0.15)
    )
    rig = make_rig(name, [first, Step(when="STOP: do this instead", text="FINAL: doing it instead.")])
    turn = rig.start("start something long")
    if state == "tool":
        rig.events.wait("tool_use")
        time.sleep(0.8)
    else:
        _wait_streaming(rig, 1)
    rig.harness.interrupt(message="STOP: do this instead", interrupt_id="i1")
    confirmed = rig.events.wait("interrupted", timeout=15)
    assert confirmed == {"turn": turn, "interrupt_id": "i1", "continued": True}
    ended = rig.events.ended(turn, 30)
    # The same turn went on with the message: it completes (the interrupted step is not its failure).
    assert ended["outcome"] == "completed" and ended["exit_status"] == 0, ended
    assert "doing it instead" in ended["summary"]
    assert len(rig.events.all("turn_ended")) == 1
    assert rig.model.requests[-1].contains("STOP: do this instead")
    assert rig.model.requests[-1].contains("start something long"), "the same conversation"
    assert not any("did not confirm" in p["message"] for p in rig.events.all("log"))
    assert not (rig.work / "late.txt").exists()
    _continue_works(rig, "STOP: do this instead")


@pytest.mark.parametrize("name", LIVE)
def test_interrupt_with_a_message_after_the_turn_ended_does_nothing(
    make_rig: Callable[..., Rig], name: str
) -> None:
    rig = make_rig(name, [Step(text="FINAL: quick.")])
    ended = rig.run("be quick")
    assert ended["outcome"] == "completed"
    rig.harness.interrupt(message="too late", interrupt_id="i2")
    time.sleep(0.5)
    assert rig.events.all("interrupted") == []
    assert len(rig.events.all("turn_ended")) == 1
