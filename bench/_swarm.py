"""A swarm of driver clients in one process: each speaks the real driver protocol (``hangar_driver.protocol``:
the same frames, the same HMAC signatures with the run key read from the session's Secret) to the operator's
gateway, for a sandbox pod that kwok reports Running but that runs nothing.

A client says hello, confirms the connection, reports ``driver_ready``, pings as the real driver does, and
answers commands: ``start_turn`` is acknowledged and answered with ``turn_started`` and ``turn_ended`` (a turn
whose message starts with ``hold`` stays running until a steer arrives), ``steer`` with a ``steer`` event
(delivered). It records when each command arrived (the bench's clock), so the bench can time the operator.

``Swarm.flood`` makes the activity a running agent makes: every client sends ``text`` events (as the Claude
adapter emits one per assistant text block: no ``turn`` in the payload, so the operator finds the session's
current turn itself, as it does for a real driver), keeping at most ``window`` unacknowledged. The gateway
acknowledges an event (``ack`` with the highest seq stored) only after the operator has applied it and stored
it: an acknowledged event is an applied one, and the swarm times each from its send to its ack.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable
from typing import Any

from hangar_driver import protocol as P

PING_EVERY = 20.0  # as the real driver (link.PING_AFTER): the gateway closes a connection silent for 90 s


class FakeDriver:
    def __init__(self, run: str, key: bytes, host: str, port: int, on_command: Callable[..., None]) -> None:
        self.run, self.key, self.host, self.port = run, key, host, port
        self.on_command = on_command
        self.seq = 0
        self.writer: asyncio.StreamWriter | None = None
        self.connected_at: float | None = None
        self.held: dict[str, str] = {}  # turn -> its start_turn command id, for a turn held until a steer
        self.seen: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        self.acked = 0  # the highest event seq the gateway acknowledged (applied and stored)
        self.ack_changed = asyncio.Event()
        self.sent_at: dict[int, float] = {}  # flood events not yet acknowledged: seq -> when sent
        self.applied: list[tuple[float, float]] = []  # flood events: (acknowledged at, send → ack seconds)
        self.ready = False  # welcomed on the current connection: events may go
        self.lost = 0  # flood events sent on a connection that broke before they were acknowledged

    def _frame(self, ftype: str, body: dict[str, Any], seq: int = 0) -> bytes:
        return P.encode(P.sign(self.key, P.make_frame(self.run, P.D2G, ftype, body, seq=seq)))

    def _send(self, ftype: str, body: dict[str, Any], seq: int = 0) -> None:
        assert self.writer is not None
        self.writer.write(self._frame(ftype, body, seq))

    def event(self, name: str, payload: dict[str, Any]) -> None:
        self.seq += 1
        self._send(P.EVENT, {"name": name, "payload": payload}, seq=self.seq)

    async def run_forever(self) -> None:
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.5 + random.random())  # the gateway went away: reconnect, as the driver

    async def _session(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=P.MAX_FRAME_BYTES)
        self.writer = writer
        try:
            hello = {
                "run": self.run,
                "harness": "claude",
                "driver_version": "bench-swarm",
                "python": "3.11.0",
                "resume_from": self.seq + 1 if self.seq else None,
                "boot": P.new_id(),
                "live": True,
                "pid": os.getpid(),
            }
            self._send(P.HELLO, hello)
            frame = P.decode(await asyncio.wait_for(reader.readline(), 30))
            P.verify(self.key, frame, P.G2D, self.run)
            acked, nonce = frame["body"]["acked"], frame["body"]["nonce"]
            self._acknowledged(int(acked))
            # What the gateway has not stored is gone with the old connection (this client keeps no outbox,
            # as the real driver does): number the next event after the stored ones, or the gateway would
            # see a gap and close again.
            self.lost += sum(1 for s in self.sent_at if s > acked)
            self.sent_at = {s: t for s, t in self.sent_at.items() if s <= acked}
            self.seq = int(acked)
            self._send(P.ACK, {"ids": [], "nonce": nonce})
            self.ready = True
            if self.connected_at is None:
                self.connected_at = time.time()
                self.event(
                    "driver_ready", {"harness": "claude", "live": True, "driver_version": "bench-swarm"}
                )
            self.nonce = nonce
            pinger = asyncio.create_task(self._ping())
            try:
                while True:
                    line = await reader.readline()
                    if not line:
                        raise EOFError("gateway closed the connection")
                    frame = P.decode(line)
                    P.verify(self.key, frame, P.G2D, self.run)
                    if frame["type"] == P.COMMAND:
                        self._command(frame["id"], frame["body"])
                    elif frame["type"] == P.ACK and isinstance(frame["body"].get("seq"), int):
                        self._acknowledged(frame["body"]["seq"])
            finally:
                pinger.cancel()
        finally:
            self.ready = False
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _acknowledged(self, seq: int) -> None:
        """The gateway has applied and stored every event up to ``seq`` (acks are cumulative)."""
        if seq <= self.acked:
            return
        now = time.time()
        for s in range(self.acked + 1, seq + 1):
            sent = self.sent_at.pop(s, None)
            if sent is not None:
                self.applied.append((now, now - sent))
        self.acked = seq
        self.ack_changed.set()

    async def flood(self, until: float, window: int) -> None:
        """``text`` events until ``until`` (wall clock), at most ``window`` of them unacknowledged."""
        n = 0
        while time.time() < until:
            if not self.ready or self.seq - self.acked >= window:
                self.ack_changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.ack_changed.wait(), 1.0)
                continue
            n += 1
            self.event("text", {"text": f"bench activity {n}"})
            self.sent_at[self.seq] = time.time()
            if n % 64 == 0:
                await asyncio.sleep(0)  # a window larger than the socket buffer: let the loop breathe

    async def _ping(self) -> None:
        await asyncio.sleep(random.uniform(0, PING_EVERY))  # spread 1,000 clients' pings over the interval
        while True:
            self._send(P.PING, {})
            await asyncio.sleep(PING_EVERY)

    def _command(self, cid: str, body: dict[str, Any]) -> None:
        self._send(P.ACK, {"ids": [cid], "nonce": self.nonce})
        if cid in self.seen:
            return  # resent after a reconnect: executed once, as the driver does
        self.seen.add(cid)
        op = body.get("op")
        self.on_command(self.run, op, body, time.time())
        result = {"command_id": cid, "op": op, "ok": True, "error": None}
        if op == "start_turn":
            turn = str(body.get("turn"))
            self.event("turn_started", {"turn": turn})
            self.event("command_result", {**result, "turn": turn})
            if str(body.get("message", "")).startswith("hold"):
                self.held[turn] = cid
            else:
                self._end(turn)
        elif op == "steer":
            turn = str(body.get("turn"))
            sid = body.get("steer_id")
            self.event("command_result", {**result, "turn": turn, "steer_id": sid})
            self.event(
                "steer", {"turn": turn, "steer_id": sid, "status": "delivered", "written_at": time.time()}
            )
            if self.held.pop(turn, None) is not None:
                self._end(turn)
        else:
            self.event("command_result", result)

    def _end(self, turn: str) -> None:
        self.event(
            "turn_ended",
            {"turn": turn, "outcome": "completed", "exit_status": 0, "summary": "ok", "usage": {}},
        )


class Swarm:
    """One FakeDriver per run, started when the bench sees its pod Running."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.drivers: dict[str, FakeDriver] = {}
        self.commands: list[tuple[str, str, dict[str, Any], float]] = []
        self.waiters: dict[tuple[str, str], asyncio.Future[float]] = {}
        self.arrived: dict[tuple[str, str], float] = {}  # a command may beat the bench's expect()

    def _on_command(self, run: str, op: str, body: dict[str, Any], at: float) -> None:
        self.commands.append((run, op, body, at))
        key = (op, str(body.get("steer_id") if op == "steer" else body.get("turn")))
        self.arrived[key] = at
        fut = self.waiters.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(at)

    def expect(self, op: str, ident: str) -> asyncio.Future[float]:
        """A future set to the time the command ``op`` for ``ident`` (turn name or steer id) arrives."""
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if (op, ident) in self.arrived:
            fut.set_result(self.arrived[(op, ident)])
        else:
            self.waiters[(op, ident)] = fut
        return fut

    def start(self, run: str, key: bytes) -> None:
        if run in self.drivers:
            return
        d = FakeDriver(run, key, self.host, self.port, self._on_command)
        d.task = asyncio.create_task(d.run_forever())
        self.drivers[run] = d

    async def flood(self, seconds: float, window: int, drain: float = 60.0) -> dict[str, Any]:
        """Every connected client sends activity events for ``seconds``; then up to ``drain`` seconds for the
        last ones to be acknowledged. ``per_second``: the events applied ÷ the time from the first send to
        the last acknowledgement (the rate the operator sustains, its backlog included: with many clients the
        window's events are still being applied well after it); ``per_second_within_window``: only those
        acknowledged within the window."""
        drivers = [d for d in self.drivers.values() if d.ready]
        for d in drivers:
            d.applied.clear()
            d.sent_at.clear()
            d.lost = 0
        t0 = time.time()
        until = t0 + seconds
        await asyncio.gather(*(d.flood(until, window) for d in drivers))
        deadline = time.monotonic() + drain
        while any(d.sent_at for d in drivers) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        applied = [a for d in drivers for a in d.applied]
        within = sum(1 for at, _ in applied if at <= until)
        span = max((at for at, _ in applied), default=t0) - t0
        return {
            "seconds": seconds,
            "drivers": len(drivers),
            "window": window,
            "sent": len(applied) + sum(len(d.sent_at) + d.lost for d in drivers),
            "applied": len(applied),
            "applied_within_window": within,
            "unacknowledged_after_drain": sum(len(d.sent_at) for d in drivers),
            "lost_to_reconnects": sum(d.lost for d in drivers),
            "per_second": len(applied) / span if span > 0 else 0.0,
            "per_second_within_window": within / seconds,
            "first_to_last_s": span,
            "send_to_applied_s": [lat for _, lat in applied],
        }

    async def stop(self) -> None:
        for d in self.drivers.values():
            if d.task is not None:
                d.task.cancel()
        for d in self.drivers.values():
            if d.task is not None:
                with contextlib.suppress(BaseException):
                    await d.task
