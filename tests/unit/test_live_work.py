"""The operator's live channel (hangar_operator.live_work) on the controllers' rig: which session may take
a live command, how the driver's live frames reach the request that waits on them, and that a watch whose
client went is stopped in the sandbox. The HTTP end and the real driver: tests/e2e/test_mcp_live_e2e.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hangar_operator.live_work import Refused

from .operator_rig import Rig, make_rig


async def _rig(tmp_path: Path) -> Rig:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.running("s1")
    return rig


def _command(rig: Rig, run: str, op: str) -> tuple[str, dict[str, Any]]:
    state = rig.ctx.gateway._runs[run]
    [(cid, body)] = [(c, b) for c, b in state.pending.items() if b["op"] == op]
    return cid, body


async def test_only_a_session_with_a_connected_sandbox_takes_live_work(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    live = rig.c.live
    with pytest.raises(Refused) as e:
        await live.run_of("nope")
    assert e.value.status == 404 and "no session 'nope'" in e.value.reason
    # The status says connected, but the gateway has no link to it (this rig's gateway never listens).
    with pytest.raises(Refused) as e:
        await live.run_of("s1")
    assert e.value.status == 409 and "has no connected sandbox" in e.value.reason
    with pytest.raises(Refused) as e:
        await anext(live.stream("s1", "start_turn", {}))
    assert e.value.status == 400


async def test_frames_reach_their_request_and_a_dropped_watch_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = await _rig(tmp_path)
    live = rig.c.live
    run = rig.run_id("s1")
    monkeypatch.setattr(rig.ctx.gateway, "connected", lambda r: r == run)
    # An exec: its output and result, in order; a frame for another request is not its.
    frames = live.stream("s1", "exec", {"command": "ls", "stream": True})
    first = asyncio.ensure_future(anext(frames))
    await asyncio.sleep(0.05)
    cid, body = _command(rig, run, "exec")
    assert body["command"] == "ls" and cid.startswith("live-")
    live.on_live(run, {"request": "someone-else", "kind": "result", "ok": True})
    live.on_live(run, {"request": cid, "kind": "output", "stream": "stdout", "data": "a\n"})
    live.on_live(run, {"request": cid, "kind": "result", "ok": True, "exit_code": 0})
    assert (await first)["data"] == "a\n"
    assert (await anext(frames))["exit_code"] == 0
    with pytest.raises(StopAsyncIteration):
        await anext(frames)
    # A watch runs until its client goes: then a stop for it is sent to the driver.
    watch = live.stream("s1", "watch", {"action": "start", "path": "src"})
    first = asyncio.ensure_future(anext(watch))
    await asyncio.sleep(0.05)
    wid, _ = _command(rig, run, "watch")
    live.on_live(run, {"request": wid, "kind": "result", "ok": True, "path": "src"})
    assert (await first)["ok"]
    live.on_live(run, {"request": wid, "kind": "changes", "changes": [{"path": "a", "change": "created"}]})
    assert (await anext(watch))["changes"][0]["path"] == "a"
    await watch.aclose()
    stops = [b for b in rig.ctx.gateway._runs[run].pending.values() if b.get("action") == "stop"]
    assert stops == [{"op": "watch", "action": "stop", "watch": wid}]
    # The driver's link breaking ends what waits on the run, with the reason.
    exec2 = live.stream("s1", "exec", {"command": "sleep 9"})
    waiting = asyncio.ensure_future(anext(exec2))
    await asyncio.sleep(0.05)
    live.disconnected(run)
    ended = await waiting
    assert ended["kind"] == "ended" and "disconnected" in ended["reason"]
