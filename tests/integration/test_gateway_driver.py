"""The operator's driver gateway and the real sandbox driver, over real TCP on 127.0.0.1 with real signatures.

The driver runs as a subprocess (``python3 -m hangar_driver``), on Python 3.8 when one is installed (the
oldest the sandbox images may have), with the one-shot ``antigravity`` command harness: the turn's command
is ``TurnConfig.extra["command"]`` (an argv list), run as the agent with the agent's environment. When the
tests run as root, the driver runs as root and the agent as uid 1001, as in a sandbox pod.
"""

from __future__ import annotations

import asyncio
import base64
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hangar_driver import protocol as P
from hangar_operator.gateway import Gateway

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "sandbox-image"
IS_ROOT = os.geteuid() == 0
AGENT_PATH = "/usr/local/bin:/usr/bin:/bin"


def _driver_python() -> str:
    """Python 3.8 if it is around (the floor the driver promises), else this interpreter."""
    for cand in [
        os.environ.get("HANGAR_TEST_DRIVER_PYTHON"),
        shutil.which("python3.8"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8"))),
    ]:
        if cand and os.path.exists(cand):
            ok = subprocess.run(
                [cand, "-c", "import sys; assert sys.version_info >= (3, 8)"],
                capture_output=True,
                check=False,
            )
            if ok.returncode == 0:
                return cand
    return sys.executable


DRIVER_PYTHON = _driver_python()


# ------------------------------------------------------------------------------------------ the operator side


@dataclass
class Store:
    """What the operator would keep durably: events by run and seq, plus what the callbacks saw."""

    keys: dict[str, bytes] = field(default_factory=dict)
    events: dict[str, dict[int, tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    deliveries: Counter[tuple[str, int]] = field(default_factory=Counter)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    connects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)
    fail_once: set[int] = field(default_factory=set)
    slow: float = 0.0

    async def key_for_run(self, run: str) -> bytes | None:
        return self.keys.get(run)

    async def on_event(self, run: str, seq: int, name: str, payload: dict[str, Any]) -> None:
        if seq in self.fail_once:
            self.fail_once.discard(seq)
            raise RuntimeError(f"database hiccup storing {seq}")
        stored = self.events.setdefault(run, {})
        assert seq not in stored, f"seq {seq} delivered twice"
        assert seq == len(stored) + 1, f"seq {seq} out of order after {len(stored)}"
        stored[seq] = (name, payload)
        self.deliveries[(run, seq)] += 1
        if self.slow:  # committed, but the call has not returned yet: a stop now leaves it stored, unacked
            await asyncio.sleep(self.slow)

    async def on_connect(self, run: str, hello: dict[str, Any]) -> None:
        self.connects.append((run, hello))

    async def on_disconnect(self, run: str) -> None:
        self.disconnects.append(run)

    async def on_rejected(self, who: str, reason: str) -> None:
        self.rejected.append((who, reason))

    async def acked_for_run(self, run: str) -> int:
        return max(self.events.get(run, {}), default=0)

    def gateway(self, port: int = 0) -> Gateway:
        return Gateway(
            host="127.0.0.1",
            port=port,
            key_for_run=self.key_for_run,
            on_event=self.on_event,
            on_connect=self.on_connect,
            on_disconnect=self.on_disconnect,
            on_rejected=self.on_rejected,
            acked_for_run=self.acked_for_run,
        )

    def named(self, run: str, name: str) -> list[dict[str, Any]]:
        return [p for n, p in self.ordered(run) if n == name]

    def ordered(self, run: str) -> list[tuple[str, dict[str, Any]]]:
        stored = self.events.get(run, {})
        return [stored[s] for s in sorted(stored)]

    def result_of(self, run: str, command_id: str) -> list[dict[str, Any]]:
        return [p for p in self.named(run, "command_result") if p.get("command_id") == command_id]


async def until(pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------------------- the sandbox side


@pytest.fixture
def sandbox() -> Iterator[Path]:
    """A directory the agent uid can reach (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="hangar-drv-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Driver:
    def __init__(
        self, sandbox: Path, run: str, key: str, port: int, *, key_by_env: bool = False, pooled: bool = False
    ) -> None:
        self.run, self.key = run, key
        self.workspace = sandbox / "workspace"
        self.workspace.mkdir(exist_ok=True)
        (self.workspace / "README.md").write_text("a repo\n")
        secret = sandbox / "secret"
        secret.mkdir(mode=0o700, exist_ok=True)
        self.key_file = secret / "run-key"
        self.key_file.write_text(key + "\n")
        self.key_file.chmod(0o400)
        self.log = sandbox / "driver.log"
        env = {
            "PATH": AGENT_PATH,
            "PYTHONPATH": str(SANDBOX),
            "HANGAR_GATEWAY": f"127.0.0.1:{port}",
            "HANGAR_RUN_ID": run,
            "HANGAR_HARNESS": "antigravity",
            "HANGAR_WORKSPACE": str(self.workspace),
            "HANGAR_STATE_DIR": str(sandbox / "state"),
            "HANGAR_AGENT_ENV_GREETING": "hi from the pod spec",
            "HANGAR_DRIVER_SECRET_SETTING": "driver-only",
            "LANG": "C.UTF-8",
        }
        if pooled:
            env["HANGAR_POOL"] = "1"
        if key_by_env:
            env["HANGAR_RUN_KEY"] = key
        else:
            env["HANGAR_RUN_KEY_FILE"] = str(self.key_file)
        self.proc = subprocess.Popen(
            [DRIVER_PYTHON, "-m", "hangar_driver"],
            env=env,
            cwd="/",
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
async def env(sandbox: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start a gateway and a driver; everything is stopped afterwards."""
    started: list[tuple[Gateway, Driver]] = []

    async def start(
        *, key_by_env: bool = False, store: Store | None = None, pooled: bool = False
    ) -> tuple[Store, Gateway, Driver]:
        store = store or Store()
        run = "run-" + os.urandom(4).hex()
        key = P.new_run_key()
        store.keys[run] = key.encode()
        gw = store.gateway()
        port = await gw.start()
        drv = Driver(sandbox, run, key, port, key_by_env=key_by_env, pooled=pooled)
        started.append((gw, drv))
        assert await gw.wait_connected(run, 20), drv.logs()
        return store, gw, drv

    yield start
    for gw, drv in started:
        drv.stop()
        await gw.stop()


def oneshot(script: str) -> dict[str, Any]:
    return {"command": ["/bin/sh", "-c", script]}


async def start_turn(gw: Gateway, run: str, turn: str, script: str, **body: Any) -> str:
    return await gw.send(
        run,
        "start_turn",
        {
            "turn": turn,
            "message": "do the thing",
            "approvals": "auto",
            "tainted": False,
            "extra": oneshot(script),
            **body,
        },
    )


def turn_ended(store: Store, run: str, turn: str) -> dict[str, Any] | None:
    for p in store.named(run, "turn_ended"):
        if p.get("turn") == turn:
            return p
    return None


def assert_contiguous(store: Store, run: str) -> None:
    seqs = sorted(store.events.get(run, {}))
    assert seqs == list(range(1, len(seqs) + 1))
    assert all(store.deliveries[(run, s)] == 1 for s in seqs)


# ------------------------------------------------------------------------------------------------------ tests


async def test_a_turn_runs_and_ends(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    run = drv.run
    assert store.connects and store.connects[0][0] == run
    hello = store.connects[0][1]
    assert hello["harness"] == "antigravity" and hello["driver_version"] and hello["python"]
    cid = await start_turn(
        gw, run, "t1", 'echo "$GREETING"; echo "cwd=$(pwd)"; test -n "$HANGAR_IO" && echo io-ok'
    )
    ended = await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    assert ended["outcome"] == "completed", (ended, drv.logs())
    assert ended["exit_status"] == 0
    [result] = store.result_of(run, cid)
    assert result["ok"] is True and result["op"] == "start_turn" and result["turn"] == "t1"
    names = [n for n, _ in store.ordered(run)]
    assert names[0] == "driver_ready"
    assert names.index("turn_started") < names.index("turn_ended")
    everything = json.dumps(store.ordered(run))
    assert "hi from the pod spec" in everything  # HANGAR_AGENT_ENV_GREETING reached the agent as GREETING
    assert "io-ok" in everything
    assert_contiguous(store, run)
    assert gw.pending_commands(run) == []

    # a one-shot harness can't be steered: the message starts the next turn
    sid = await gw.send(run, "steer", {"steer_id": "st-1", "message": "also this"})
    [steer] = await until(lambda: store.result_of(run, sid), what="steer result")
    assert steer["ok"] is False and "cannot be steered: the message starts the next turn" in steer["error"]
    # approvals other than auto need a live harness: refused, nothing runs
    cid = await start_turn(gw, run, "t2", "echo should-not-run", approvals="ask")
    [refused] = await until(lambda: store.result_of(run, cid), what="refusal")
    assert refused["ok"] is False and "live" in refused["error"]
    # the same turn id can't start twice
    cid = await start_turn(gw, run, "t1", "echo again")
    [again] = await until(lambda: store.result_of(run, cid), what="refusal")
    assert again["ok"] is False and "already" in again["error"]

    # shutdown: the driver reports, waits for the ack and exits 0
    cid = await gw.send(run, "shutdown", {})
    await until(lambda: store.result_of(run, cid), what="shutdown result")
    await until(lambda: drv.proc.poll() is not None, what="driver exit")
    assert drv.proc.returncode == 0, drv.logs()
    await until(lambda: store.disconnects, what="disconnect")
    assert_contiguous(store, run)


async def test_a_warm_sandbox_runs_nothing_until_adopted_then_is_the_new_run_only(
    env: Callable[..., Any],
) -> None:
    store, gw, drv = await env(pooled=True)
    pool_run = drv.run
    cid = await start_turn(gw, pool_run, "t0", "echo should-not-run")
    [refused] = await until(lambda: store.result_of(pool_run, cid), what="refusal")
    assert refused["ok"] is False and "until a session adopts it" in refused["error"]
    # adopt: both ends derive the session's key; the driver says hello as the session's run on the
    # connection it has (no new connection: the same peer, and the pool's run never disconnected or came back)
    run, nonce = "sess-r1", "n-" + os.urandom(12).hex()
    store.keys[run] = P.derive_run_key(drv.key, run, nonce).encode()
    pool_conn = gw._runs[pool_run].conn
    assert pool_conn is not None
    await gw.send(pool_run, "adopt", {"run": run, "nonce": nonce}, command_id="adopt-sess-r1")
    assert await gw.wait_connected(run, 20), drv.logs()
    assert gw._runs[run].conn is pool_conn
    await until(lambda: "adopted in place" in drv.logs(), what="the driver's welcome")
    assert pool_run not in gw._runs and not gw.connected(pool_run) and store.disconnects == []
    await until(lambda: store.result_of(run, "adopt-sess-r1"), what="adopt result")
    assert [n for n, _ in store.ordered(run)][:2] == ["driver_ready", "command_result"]
    assert_contiguous(store, run)
    cid = await start_turn(gw, run, "t1", "echo adopted-ok")
    ended = await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    assert ended["outcome"] == "completed", (ended, drv.logs())
    assert "adopted-ok" in json.dumps(store.ordered(run))
    # adopted once: a second adopt is refused
    cid = await gw.send(run, "adopt", {"run": "other-r1", "nonce": nonce})
    [again] = await until(lambda: store.result_of(run, cid), what="second adopt")
    assert again["ok"] is False and "not a warm pool's" in again["error"]
    # the driver never came back as the pool's run after the adoption
    assert [r for r, _ in store.connects].count(pool_run) == 1


async def test_interrupt_stops_a_one_shot_turn(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    run = drv.run
    await start_turn(gw, run, "t1", "hangar-agent progress started; sleep 30")
    await until(lambda: store.named(run, "handback"), what="progress")
    cid = await gw.send(run, "interrupt", {})
    ended = await until(lambda: turn_ended(store, run, "t1"), timeout=15, what="turn_ended")
    assert ended["outcome"] == "interrupted" and ended["exit_status"] == 130, ended
    [result] = store.result_of(run, cid)
    assert result["ok"] is True


async def test_rogue_clients_are_refused_and_reported(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    run = drv.run
    port = gw.port

    async def exchange(*lines: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for line in lines:
                writer.write(line)
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 10)  # the gateway closes the connection
        except ConnectionError:  # closed while we were still writing: just as good
            return b""
        finally:
            writer.close()

    def hello(key: str | bytes, run_id: str = run) -> dict[str, Any]:
        return P.sign(key, P.make_frame(run_id, P.D2G, P.HELLO, {"run": run_id, "harness": "x"}))

    # 1. a hello signed with another key
    before = len(store.rejected)
    assert await exchange(P.encode(hello(P.new_run_key()))) == b""
    assert store.rejected[before][0] == run and "bad signature" in store.rejected[before][1]
    # 2. an unknown run
    assert await exchange(P.encode(hello(P.new_run_key(), "run-nobody"))) == b""
    assert "unknown run" in store.rejected[-1][1]
    # 3. not JSON, not a hello
    await exchange(b"GET / HTTP/1.1\r\n\r\n")
    assert "malformed" in store.rejected[-1][1]
    await exchange(P.encode(P.sign(drv.key, P.make_frame(run, P.D2G, P.PING, {}))))
    assert "first frame is not hello" in store.rejected[-1][1]
    # 4. a frame the gateway signed, played back as the driver's
    g2d = P.sign(drv.key, P.make_frame(run, P.G2D, P.HELLO, {}))
    await exchange(P.encode(g2d))
    assert "wrong direction" in store.rejected[-1][1]
    # 5. with the right key: a valid hello, then a frame with a broken signature closes the connection
    connects_before = len(store.connects)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(P.encode(hello(drv.key)))
    welcome = P.decode(await reader.readline())
    P.verify(drv.key, welcome, P.G2D, run)
    nonce = welcome["body"]["nonce"]
    confirm = P.sign(drv.key, P.make_frame(run, P.D2G, P.ACK, {"ids": [], "nonce": nonce}))
    forged = P.sign(
        drv.key, P.make_frame(run, P.D2G, P.EVENT, {"name": "turn_ended", "payload": {"turn": "x"}}, seq=999)
    )
    forged["body"]["payload"]["turn"] = "y"  # changed after signing
    writer.write(P.encode(confirm) + P.encode(forged))
    await writer.drain()
    await asyncio.wait_for(reader.read(), 10)  # closed
    assert "bad signature" in store.rejected[-1][1]
    writer.close()
    # 6. a replayed hello (captured earlier) can't be confirmed without the key: the old nonce is refused
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(P.encode(hello(drv.key)))
    await reader.readline()
    writer.write(P.encode(confirm))  # the confirmation from the previous connection
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    assert "not confirmed" in store.rejected[-1][1]
    writer.close()
    # 7. an oversized line
    await exchange(b"{" + b" " * (P.MAX_FRAME_BYTES + 10) + b"}\n")
    assert "too large" in store.rejected[-1][1]

    # none of that disturbed the real driver: it is (again) connected and runs a turn
    assert await gw.wait_connected(run, 20)
    await start_turn(gw, run, "t1", "echo fine")
    ended = await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    assert ended["outcome"] == "completed"
    # the keyed client's confirmed connection replaced the driver's; the driver came back and replaced it
    assert len(store.connects) >= connects_before + 2
    assert not any("forged" in json.dumps(p) for _, p in store.ordered(run))
    assert not [p for p in store.named(run, "turn_ended") if p.get("turn") in ("x", "y")]
    assert_contiguous(store, run)


async def test_gateway_restart_mid_turn_loses_and_duplicates_nothing(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    run = drv.run
    store.fail_once = {6}  # storing event 6 fails once: not acked, resent, stored once
    store.slow = 0.02  # the gateway is stopped while a store call is in flight
    steps = 40
    script = f"i=1; while [ $i -le {steps} ]; do hangar-agent progress step-$i; i=$((i+1)); sleep 0.04; done; hangar-agent done finished"
    await start_turn(gw, run, "t1", script)
    await until(lambda: len(store.named(run, "handback")) >= 10, what="some progress")
    port = gw.port
    await gw.stop()  # the operator goes away mid-turn
    stored_at_stop = len(store.events[run])
    await asyncio.sleep(1.0)
    gw2 = store.gateway(port)
    # commands queued while nobody is connected are delivered when the driver comes back
    taint_id = await gw2.send(run, "taint", {}, command_id="cmd-taint-1")
    await gw2.start()
    try:
        assert await gw2.wait_connected(run, 20), drv.logs()
        ended = await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
        assert ended["outcome"] == "completed"
        # the same command id again (an operator re-sending after its own restart): executed once
        await until(lambda: store.result_of(run, taint_id), what="taint result")
        await gw2.send(run, "taint", {}, command_id="cmd-taint-1")
        results = await until(
            lambda: len(store.result_of(run, taint_id)) >= 2 and store.result_of(run, taint_id),
            what="duplicate answer",
        )
        assert results[0]["ok"] is True and not results[0].get("duplicate")
        assert results[1]["duplicate"] is True
        progress = [p["text"] for p in store.named(run, "handback") if p["kind"] == "progress"]
        assert progress == [f"step-{i}" for i in range(1, steps + 1)]
        done = [p for p in store.named(run, "handback") if p["kind"] == "done"]
        assert len(done) == 1 and done[0]["message"] == "finished"
        assert_contiguous(store, run)
        assert len(store.events[run]) > stored_at_stop
        assert not store.fail_once  # the failure happened and was recovered from
        # handback lines of the turn come before its end
        names = [n for n, _ in store.ordered(run)]
        assert max(i for i, n in enumerate(names) if n == "handback") < names.index("turn_ended")
    finally:
        await gw2.stop()


async def test_hangar_agent_hand_backs_arrive_as_events(env: Callable[..., Any], sandbox: Path) -> None:
    store, gw, drv = await env()
    run = drv.run
    script = r"""
set -e
hangar-agent progress "reading the code"
hangar-agent result '{"tests": 12, "passed": true, "notes": "héllo"}'
printf '%s\n' "A report" > report.md
hangar-agent artifact report.md summary.md
printf '{"from": "file"}' > result.json
hangar-agent result @result.json
hangar-agent ask "Should I also update the docs?"
"""
    await start_turn(gw, run, "t1", script)
    ended = await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    assert ended["outcome"] == "completed", (ended, drv.logs())
    hb = store.named(run, "handback")
    kinds = [p["kind"] for p in hb]
    assert kinds == ["progress", "result", "artifact", "result", "ask"], hb
    assert all(p["turn"] == "t1" for p in hb)
    assert hb[0]["text"] == "reading the code"
    assert hb[1]["result"] == {"tests": 12, "passed": True, "notes": "héllo"}
    art = hb[2]
    assert art["name"] == "summary.md" and art["size"] == len(b"A report\n")
    assert art["sha256"] == hashlib.sha256(b"A report\n").hexdigest()
    assert base64.b64decode(art["content_b64"]) == b"A report\n"
    assert hb[3]["result"] == {"from": "file"}
    assert hb[4]["question"] == "Should I also update the docs?"


async def test_hand_backs_escaping_hangar_io_are_refused(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    run = drv.run
    big = json.dumps({"result": "x" * (70 * 1024)})
    # The agent writes the hand-back file itself, bypassing hangar-agent: every line is untrusted.
    lines = [
        {"kind": "result", "file": "../../secret/run-key"},
        {"kind": "result", "file": "/etc/passwd"},
        {"kind": "result", "file": "results/evil.json"},  # a symlink to /etc/passwd
        {"kind": "result", "file": "up/etc/passwd"},  # through a symlinked directory
        {"kind": "result", "file": "linked.json"},  # a hard link (two names, one file)
        {"kind": "artifact", "path": "../../secret/run-key", "name": "k"},
        {"kind": "artifact", "path": "results/evil.json", "name": "p"},
        {"kind": "bogus"},
        json.loads(big) | {"kind": "result"},
        {"kind": "progress", "text": 42},
    ]
    payload = "\n".join(json.dumps(line) for line in lines)
    script = f"""
mkdir -p "$HANGAR_IO/results"
ln -s /etc/passwd "$HANGAR_IO/results/evil.json"
ln -s / "$HANGAR_IO/up"
printf '{{"a": 1}}' > "$HANGAR_IO/orig.json"; ln "$HANGAR_IO/orig.json" "$HANGAR_IO/linked.json"
cat >> "$HANGAR_IO/handback.jsonl" <<'EOF'
{payload}
not json at all
EOF
hangar-agent result '{{"good": true}}'
"""
    await start_turn(gw, run, "t1", script)
    await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    hb = store.named(run, "handback")
    assert [p["kind"] for p in hb] == ["result"] and hb[0]["result"] == {"good": True}, hb
    refusals = [p["message"] for p in store.named(run, "log") if p.get("source") == "handback"]
    assert len(refusals) == len(lines) + 1, refusals
    assert all("refused" in m for m in refusals)
    assert sum("escapes HANGAR_IO" in m for m in refusals) >= 6, refusals
    everything = json.dumps(store.ordered(run))
    assert "root:x:0:0" not in everything and drv.key not in everything


@pytest.mark.skipif(not IS_ROOT, reason="the uid split needs a root driver")
async def test_agent_runs_as_another_uid_and_cannot_read_the_key(env: Callable[..., Any]) -> None:
    store, gw, drv = await env()
    run = drv.run
    script = f"""
uid=$(id -u)
if cat {drv.key_file} >/dev/null 2>&1; then key=readable; else key=refused; fi
if cat /proc/{drv.proc.pid}/environ >/dev/null 2>&1; then environ=readable; else environ=refused; fi
if env | grep -q HANGAR_RUN_KEY; then envkey=present; else envkey=absent; fi
if env | grep -q HANGAR_DRIVER_SECRET_SETTING; then leak=present; else leak=absent; fi
hangar-agent result "{{\\"uid\\": $uid, \\"key\\": \\"$key\\", \\"environ\\": \\"$environ\\", \\"envkey\\": \\"$envkey\\", \\"leak\\": \\"$leak\\"}}"
"""
    await start_turn(gw, run, "t1", script)
    ended = await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    assert ended["outcome"] == "completed", (ended, drv.logs())
    [res] = [p["result"] for p in store.named(run, "handback") if p["kind"] == "result"]
    assert res == {"uid": 1001, "key": "refused", "environ": "refused", "envkey": "absent", "leak": "absent"}
    assert drv.key not in json.dumps(store.ordered(run))
    # the workspace and the turn's HANGAR_IO belong to the agent; the state dir to the driver
    assert drv.workspace.stat().st_uid == 1001
    ready = store.named(run, "driver_ready")[0]
    assert ready["agent_uid"] == 1001


@pytest.mark.skipif(not IS_ROOT, reason="reads the driver's /proc/<pid>/environ, which needs root")
async def test_a_key_passed_by_env_leaves_no_trace_in_the_driver_environ(env: Callable[..., Any]) -> None:
    store, gw, drv = await env(key_by_env=True)
    environ = Path(f"/proc/{drv.proc.pid}/environ").read_bytes()
    assert b"HANGAR_RUN_KEY" not in environ
    assert drv.key.encode() not in environ
    cid = await start_turn(gw, drv.run, "t1", "env")
    await until(lambda: turn_ended(store, drv.run, "t1"), what="turn_ended")
    assert store.result_of(drv.run, cid)[0]["ok"]
    assert drv.key not in json.dumps(store.ordered(drv.run))


async def test_checkpoint_tars_workspace_and_home(env: Callable[..., Any], sandbox: Path) -> None:
    store, gw, drv = await env()
    run = drv.run
    await start_turn(
        gw,
        run,
        "t1",
        'echo work > notes.txt; mkdir -p "$HOME/.claude"; echo conv > "$HOME/.claude/state.json"',
    )
    await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
    out = sandbox / "checkpoints" / "c1.tar.gz"
    cid = await gw.send(run, "checkpoint", {"path": str(out)})
    [res] = await until(lambda: store.result_of(run, cid), what="checkpoint result")
    assert res["ok"], res
    data = out.read_bytes()
    assert res["size"] == len(data) and res["sha256"] == hashlib.sha256(data).hexdigest()
    import tarfile

    with tarfile.open(out) as tf:
        names = set(tf.getnames())
    assert {"workspace/README.md", "workspace/notes.txt", "home/.claude/state.json"} <= names, names


async def test_driver_waits_for_the_gateway_and_a_restarted_driver_continues_the_numbering(
    sandbox: Path,
) -> None:
    store = Store()
    run, key = "run-" + os.urandom(4).hex(), P.new_run_key()
    store.keys[run] = key.encode()
    probe = store.gateway()
    port = await probe.start()  # find a free port, then leave it closed
    await probe.stop()
    drv = Driver(sandbox, run, key, port)  # nothing listens yet: the driver keeps trying
    gw = store.gateway(port)
    try:
        await asyncio.sleep(1.5)
        assert drv.proc.poll() is None
        await gw.start()
        assert await gw.wait_connected(run, 20), drv.logs()
        await start_turn(gw, run, "t1", "hangar-agent progress one")
        await until(lambda: turn_ended(store, run, "t1"), what="turn_ended")
        before = len(store.events[run])
        # the driver process dies (container restart): a new one continues after what is stored
        drv.stop()
        await until(lambda: not gw.connected(run), what="disconnect")
        drv = Driver(sandbox, run, key, port)
        assert await gw.wait_connected(run, 20), drv.logs()
        await until(lambda: len(store.named(run, "driver_ready")) == 2, what="second driver_ready")
        assert store.ordered(run)[before][0] == "driver_ready"  # seq before+1
        await start_turn(gw, run, "t2", "hangar-agent progress two")
        await until(lambda: turn_ended(store, run, "t2"), what="turn_ended")
        assert_contiguous(store, run)
        assert [p["text"] for p in store.named(run, "handback")] == ["one", "two"]
    finally:
        drv.stop()
        await gw.stop()
