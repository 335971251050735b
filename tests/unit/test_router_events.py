"""A driver's event that names no turn (a ``text`` event, say) belongs to the session's current turn: the
router finds it in the operator's cache, not by reading the session from the apiserver for every event."""

from __future__ import annotations

from pathlib import Path

from hangar_operator import metrics

from .operator_rig import make_rig


async def test_an_event_without_a_turn_is_recorded_on_the_current_turn_without_a_read(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    await rig.ctx.resync_cache()
    rig.env()
    turn = await rig.running("s")
    # Any read of the session from here fails: the cache has what the operator wrote.
    rig.kube.fail_next("get", "sessions", 500, times=100)
    await rig.event("s", "text", text="hello from the CLI")
    scope = rig.ctx.scope("session", "default", "s")
    [ev] = await rig.ctx.db.turn_events(scope, turn, "text")
    assert ev.payload["text"] == "hello from the CLI"


async def test_before_the_cache_is_primed_the_session_is_read(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s")
    rig.ctx.cache.primed = False  # e.g. the operator's first listing has not finished
    await rig.event("s", "text", text="still on its turn")
    scope = rig.ctx.scope("session", "default", "s")
    [ev] = await rig.ctx.db.turn_events(scope, turn, "text")
    assert ev.payload["text"] == "still on its turn"


async def test_each_applied_event_is_counted_once_by_name(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s")
    counter = metrics.DRIVER_EVENTS.labels(name="text")
    before = counter._value.get()
    run = rig.run_id("s")
    await rig.c.router.on_event(run, 50, "text", {"turn": turn, "text": "a"})
    await rig.c.router.on_event(run, 50, "text", {"turn": turn, "text": "a"})  # sent again: stored once
    assert counter._value.get() == before + 1
