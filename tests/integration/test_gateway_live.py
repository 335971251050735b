"""A person's live work (exec, process, watch) through the real gateway and the real driver subprocess over
real TCP: answered by signed ``live`` frames handed to ``on_live``, never stored as events; run as the
agent's uid (uid 1001 when the tests run as root, as in a sandbox pod)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hangar_driver import protocol as P

from .test_gateway_driver import IS_ROOT, until
from .test_gateway_driver import env as env  # the fixtures: a gateway and a real driver
from .test_gateway_driver import sandbox as sandbox


async def test_live_commands_answer_with_live_frames_as_the_agent(
    env: Callable[..., Any], sandbox: Path
) -> None:
    store, gw, drv = await env()
    run = drv.run
    frames: list[dict[str, Any]] = []
    gw.on_live = lambda r, body: frames.append({"run": r, **body})

    def of(request: str, kind: str) -> list[dict[str, Any]]:
        return [f for f in frames if f["request"] == request and f["kind"] == kind]

    await gw.send(
        run, "exec", {"command": "id -u; echo streamed; cat " + str(drv.key_file), "stream": True}, "x-1"
    )
    [result] = await until(lambda: of("x-1", "result"), what="exec result")
    assert result["ok"] and result["run"] == run, (result, drv.logs())
    assert result["stdout"].split()[0] == ("1001" if IS_ROOT else str(os.getuid()))
    if IS_ROOT:
        assert result["exit_code"] != 0 and drv.key not in json.dumps(frames)  # the agent can't read the key
    assert "streamed" in "".join(f["data"] for f in of("x-1", "output"))
    # A process round trip.
    await gw.send(run, "process", {"action": "start", "command": "cat"}, "p-1")
    [started] = await until(lambda: of("p-1", "result"), what="process start")
    await gw.send(
        run, "process", {"action": "input", "id": started["id"], "data": "hi\n", "eof": True}, "p-2"
    )
    await until(lambda: of("p-2", "result"), what="input")

    async def read() -> str:
        n = len(frames)
        await gw.send(run, "process", {"action": "read", "id": started["id"]}, f"p-r{n}")
        [r] = await until(lambda: of(f"p-r{n}", "result"), what="read")
        return str(r["data"])

    for _ in range(50):
        if await read() == "hi\n":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(frames)
    # A watch: changes, then its stop ends it.
    (drv.workspace / "w").mkdir()
    (drv.workspace / "w").chmod(0o777)
    await gw.send(run, "watch", {"action": "start", "path": "w"}, "w-1")
    await until(lambda: of("w-1", "result"), what="watching")
    (drv.workspace / "w" / "f.txt").write_text("x")
    [changes, *_] = await until(lambda: of("w-1", "changes"), what="changes")
    assert changes["changes"] == [{"path": "f.txt", "change": "created"}]
    await gw.send(run, "watch", {"action": "stop", "watch": "w-1"}, "w-2")
    await until(lambda: of("w-1", "ended"), what="ended")
    # None of it was stored as an event (no command_result for live ops).
    assert not [p for p in store.named(run, "command_result") if p.get("op") in P.LIVE_OPS]


async def test_a_live_frame_not_signed_with_the_run_key_is_refused(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    heard: list[dict[str, Any]] = []
    gw.on_live = lambda r, body: heard.append(body)
    for ftype, body in ((P.LIVE, {"request": "x", "kind": "result", "ok": True}), (P.HELLO, {})):
        forged = P.sign(b"not-the-key", P.make_frame(drv.run, P.D2G, ftype, body))
        n = len(store.rejected)
        with socket.create_connection(("127.0.0.1", gw.port)) as sock:
            sock.sendall(P.encode(forged))
            await until(lambda n=n: len(store.rejected) > n, what="the refusal")
    assert heard == []
    assert "first frame is not hello" in store.rejected[-2][1] and "bad signature" in store.rejected[-1][1]
