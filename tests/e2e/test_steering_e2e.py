"""Steering a running agent end to end: REST / kubectl → Turn spec → operator → driver → the real CLI.

Real kube-apiserver, operator, API and pod runner processes, the real Claude Code and Codex CLIs against a
ScriptedModel on 127.0.0.1. What the model was sent is the proof of what the agent saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from hangar.config import Settings
from hangar.devcluster.stack import Stack
from hangar.models.limits import STEERS_MAX
from hangar.testing.model_server import Request, ScriptedModel, Step
from hangar_api.app import create_app
from hangar_driver import protocol as P

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, wait, workspace

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]

# A tool that runs long enough to steer or interrupt it (Claude refuses a bare `sleep N` on its own).
SLOW = "python3 -c 'import time; time.sleep({s})'"
# Codex hangs at thread/start inside the sandbox until the adapter's spawn context is fixed (a known bug,
# another issue): the Codex tests below fail with that until then, and say so.
CODEX_BUG = "known bug: Codex hangs at thread/start inside the sandbox (the spawn-context fix is pending)"


def claude_env(cluster: Cluster, name: str, url: str, approvals: str | None = None) -> None:
    environment(cluster, name, {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test"}, approvals)


def codex_env(cluster: Cluster, name: str, model: ScriptedModel) -> None:
    environment(cluster, name, {"OPENAI_BASE_URL": model.openai_base_url, "OPENAI_API_KEY": "sk-test"})


CREATED: list[str] = []


@pytest.fixture(autouse=True)
def _delete_sessions(stack: Stack) -> Any:
    """Each test's sessions go when it ends, so their sandboxes don't pile up on the local node."""
    yield
    api = Api(stack)
    while CREATED:
        api.delete(f"/api/sessions/{CREATED.pop()}")


def new_session(api: Api, name: str, env: str, message: str, **extra: Any) -> None:
    r = api.post("/api/sessions", {"name": name, "environment": env, "message": message, **extra})
    assert r.status_code == 201, r.text
    CREATED.append(name)


def tool_running(api: Api, name: str, n: int = 1) -> bool:
    return any(e["kind"] == "tool_use" for e in api.events(name))


def streaming(model: ScriptedModel, n: int = 1) -> bool:
    """The model's n-th answer is on its way (the scripted words stream out one by one)."""
    return len(model.requests) >= n and not model.requests[n - 1].finished.is_set()


def steer_of(api: Api, name: str, n: int, sid: str) -> dict[str, Any]:
    t = api.turn(name, n)
    assert t is not None
    return next(s for s in t["steers"] if s["id"] == sid)


def seen(model: ScriptedModel, text: str) -> list[int]:
    """Indexes of the model requests whose new user input carries ``text``."""
    return [r.index for r in model.requests if text in r.user_text or any(text in x for x in r.tool_results)]


def progress(api: Api, name: str) -> list[str]:
    return [e["message"] for e in api.events(name) if e["kind"] == "progress"]


def codex_guard(api: Api, name: str) -> None:
    """Fail with the known Codex bug's name when the turn never got past thread/start."""
    t = api.turn(name, 1)
    if t and t["phase"] == "Failed" and "thread/start" in (t["reason"] or ""):
        pytest.fail(f"{CODEX_BUG}: {t['reason'][:300]}")


# --- steer ---------------------------------------------------------------------------------------------
def test_claude_steer_during_a_tool_arrives_in_the_same_turn(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Running the slow thing.", command=SLOW.format(s=4)),
            Step(when="tool_result:STEER: keep the signature", text="FINAL: kept the signature."),
            Step(when="STEER: keep the signature", text="FINAL: kept the signature."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-claude", url)
        api = Api(stack)
        new_session(api, "st-tool", "st-claude", "move the retry logic")
        wait(lambda: tool_running(api, "st-tool"), 90, "the tool to start", lambda: api.debug("st-tool"))
        r = api.post("/api/sessions/st-tool/steer", {"message": "STEER: keep the signature"})
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["kind"] == "steer" and body["turn"]["name"] == "st-tool-1"
        sid = body["steer"]["id"]
        assert body["steer"]["status"] == "sending" and body["steer"]["by"] == "admin"
        t1 = api.wait_turn("st-tool", 1)
        assert t1["phase"] == "Completed" and "kept the signature" in t1["summary"], api.debug("st-tool")
        st = steer_of(api, "st-tool", 1, sid)
        assert st["status"] == "delivered" and st["written_at"] and st["class"] == "unclassified", st
        # The model got it with the tool's result, in the same turn: one turn, two model requests.
        assert seen(model, "STEER: keep the signature") == [2]
        assert model.requests[1].tool_results
        assert api.turn("st-tool", 2) is None
        assert any(m == "steered: STEER: keep the signature" for m in progress(api, "st-tool"))
        assert api.session("st-tool")["counters"]["steers"] == 1
    finally:
        model.stop()


def test_claude_send_while_text_streams_is_a_steer_that_runs_as_the_next_turn(
    cluster: Cluster, stack: Stack
) -> None:
    model = ScriptedModel(
        [
            Step(text="Thinking out loud:", words=30, word_delay=0.15),
            Step(when="STEER: be brief", text="FINAL: brief now."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-claude-q", url)
        api = Api(stack)
        new_session(api, "st-stream", "st-claude-q", "tell me a long story")
        wait(lambda: streaming(model), 90, "the answer to stream", lambda: api.debug("st-stream"))
        time.sleep(0.5)
        r = api.post("/api/sessions/st-stream/messages", {"message": "STEER: be brief"})
        assert r.status_code == 202, r.text
        assert r.json()["kind"] == "steer"
        sid = r.json()["steer"]["id"]
        t1 = api.wait_turn("st-stream", 1)
        assert t1["phase"] == "Completed" and "word30" in t1["summary"], api.debug("st-stream")
        st = steer_of(api, "st-stream", 1, sid)
        assert st["status"] == "queued" and st["next_turn"] == "st-stream-2", st
        t2 = api.wait_turn("st-stream", 2)
        assert t2["phase"] == "Completed" and "brief now" in t2["summary"], api.debug("st-stream")
        assert t2["from_steer"] == sid and t2["message"] == "STEER: be brief"
        # Held while only text streamed: the first answer never saw it; the next turn is the same conversation.
        assert seen(model, "STEER: be brief") == [2]
        assert model.requests[1].contains("tell me a long story")
    finally:
        model.stop()


def test_a_steer_on_its_way_when_the_sandbox_dies_starts_the_next_turn(
    cluster: Cluster, stack: Stack
) -> None:
    model = ScriptedModel(
        [
            Step(text="Slow.", command=SLOW.format(s=30)),
            Step(when="STEER: survive this", text="FINAL: got the steer after the loss."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-lost", url)
        api = Api(stack)
        new_session(api, "st-lost", "st-lost", "run the slow thing")
        wait(lambda: tool_running(api, "st-lost"), 90, "the tool", lambda: api.debug("st-lost"))
        sid = api.post("/api/sessions/st-lost/steer", {"message": "STEER: survive this"}).json()["steer"][
            "id"
        ]
        wait(lambda: steer_of(api, "st-lost", 1, sid)["at"], 30, "the steer sent")
        time.sleep(0.5)  # written to the CLI, which takes it in only with the tool's result: still sending
        assert steer_of(api, "st-lost", 1, sid)["status"] == "sending"
        cluster.kubectl("delete", "pod", "st-lost-r1", "--wait=false")
        # The driver may see its CLI die first (the turn fails, the steer it held is reported queued) or the
        # operator the pod go first (it fails the turn and queues the steer): either way, the same outcome.
        t1 = wait(
            lambda: (
                (t := api.turn("st-lost", 1)) and "sandbox pod st-lost-r1 was deleted" in t["reason"] and t
            ),
            60,
            "the turn failed with the reason",
            lambda: api.debug("st-lost"),
        )
        assert t1["phase"] == "Failed"
        st = steer_of(api, "st-lost", 1, sid)
        assert st["status"] == "queued" and st["next_turn"] == "st-lost-2", st
        t2 = api.wait_turn("st-lost", 2, 120)
        assert t2["phase"] == "Completed" and "got the steer after the loss" in t2["summary"], api.debug(
            "st-lost"
        )
        assert len(seen(model, "STEER: survive this")) == 1
        assert model.requests[-1].contains("run the slow thing"), "the same conversation, in sandbox r2"
    finally:
        model.stop()


# --- withdraw ------------------------------------------------------------------------------------------
def test_withdraw_before_delivery_cancels_and_after_delivery_is_refused(
    cluster: Cluster, stack: Stack
) -> None:
    model = ScriptedModel(
        [
            Step(text="Streaming first:", words=25, word_delay=0.15, command=SLOW.format(s=3)),
            Step(when="tool_result", text="FINAL: done."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-wd", url)
        api = Api(stack)
        new_session(api, "st-withdraw", "st-wd", "stream, then run a tool")
        wait(lambda: streaming(model), 90, "the answer to stream", lambda: api.debug("st-withdraw"))
        # Held by the driver while text streams: still sending, so it can be taken back.
        a = api.post("/api/sessions/st-withdraw/steer", {"message": "STEER-A: never mind"}).json()["steer"]
        r = api.post(f"/api/sessions/st-withdraw/steers/{a['id']}/withdraw")
        assert r.status_code == 200, r.text
        assert r.json()["withdrawn"] is True and r.json()["steer"]["status"] == "cancelled"
        # Again: already withdrawn, still 200 and still cancelled.
        again = api.post(f"/api/sessions/st-withdraw/steers/{a['id']}/withdraw")
        assert again.status_code == 200 and again.json()["steer"]["status"] == "cancelled"
        # This one goes out with the tool call and is delivered with its result.
        b = api.post("/api/sessions/st-withdraw/steer", {"message": "STEER-B: and this"}).json()["steer"]
        t1 = api.wait_turn("st-withdraw", 1)
        assert t1["phase"] == "Completed", api.debug("st-withdraw")
        assert steer_of(api, "st-withdraw", 1, b["id"])["status"] == "delivered"
        late = api.post(f"/api/sessions/st-withdraw/steers/{b['id']}/withdraw")
        assert late.status_code == 409, late.text
        assert "too late" in late.json()["detail"] and "delivered" in late.json()["detail"]
        assert late.json()["withdrawn"] is False
        # Nothing changed, and the model saw exactly what was delivered.
        assert steer_of(api, "st-withdraw", 1, b["id"])["status"] == "delivered"
        assert steer_of(api, "st-withdraw", 1, a["id"])["status"] == "cancelled"
        assert seen(model, "STEER-A") == [] and seen(model, "STEER-B") == [2]
        assert api.turn("st-withdraw", 2) is None
        missing = api.post("/api/sessions/st-withdraw/steers/st-000000000000/withdraw")
        assert missing.status_code == 404 and "no steer" in missing.json()["detail"]
    finally:
        model.stop()


def test_concurrent_withdraws_racing_delivery_each_end_one_way(cluster: Cluster, stack: Stack) -> None:
    """50 steers (the most a turn takes) held while text streams; the tool call sends them all to the CLI
    at once while 50 withdraws arrive around that moment. The driver arbitrates each one: withdrawn or delivered, never both,
    and the model sees exactly the delivered ones.

    The test, not the clock, says when the tool call comes (the step's gate): the steers are all held by
    the driver first however slow the machine, and the withdraws are spread 3 s either side of it."""
    n, spread = STEERS_MAX, 0.12
    gate = threading.Event()
    model = ScriptedModel(
        [
            Step(text="Streaming:", words=5, word_delay=0.1, gate=gate, command=SLOW.format(s=3)),
            Step(when="tool_result", text="FINAL: done."),
            Step(when="RACE-", text="FINAL: late one.", repeat=True),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-race", url)
        api = Api(stack)
        new_session(api, "st-race", "st-race", "stream, then run a tool")
        wait(lambda: streaming(model), 90, "the answer to stream", lambda: api.debug("st-race"))
        with ThreadPoolExecutor(16) as pool:
            sids = list(
                pool.map(
                    lambda i: api.post("/api/sessions/st-race/steer", {"message": f"RACE-{i:03d}"}).json()[
                        "steer"
                    ]["id"],
                    range(n),
                )
            )
        # All on their way to the driver (held there: only text streams) before the tool call comes.
        wait(
            lambda: len([s for s in api.turn("st-race", 1)["steers"] if s["at"]]) == n,  # type: ignore[index]
            90,
            "every steer sent",
        )
        # The withdraws go out 120 ms apart; the tool call is let out halfway through them.
        answers: dict[str, httpx.Response] = {}
        client = httpx.Client(
            base_url=stack.api_url,
            headers={"Authorization": f"Bearer {stack.token}"},
            timeout=60,
            limits=httpx.Limits(max_connections=n),
        )
        start = time.monotonic() + 0.5

        def withdraw(i: int) -> None:
            time.sleep(max(0.0, start + i * spread - time.monotonic()))
            answers[sids[i]] = client.post(f"/api/sessions/st-race/steers/{sids[i]}/withdraw")

        threads = [threading.Thread(target=withdraw, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        time.sleep(max(0.0, start + n * spread / 2 - time.monotonic()))
        gate.set()
        for t in threads:
            t.join(90)
        client.close()
        t1 = api.wait_turn("st-race", 1, 120)
        assert t1["phase"] == "Completed", api.debug("st-race")
        states = {s["id"]: s for s in api.turn("st-race", 1)["steers"]}  # type: ignore[index]
        for i, sid in enumerate(sids):
            st, r = states[sid], answers[sid]
            assert st["status"] in ("cancelled", "delivered", "queued"), st
            if r.status_code == 200:
                assert st["status"] == "cancelled" and r.json()["withdrawn"] is True
            elif r.status_code == 409:
                assert st["status"] in ("delivered", "queued") and r.json()["withdrawn"] is False, (
                    st,
                    r.text,
                )
            elif r.status_code == 202:
                # The API's documented answer when the driver's verdict takes longer than it waits (a loaded
                # machine): "read the steer's status". That status is final and one way, checked below.
                assert r.json()["withdrawn"] is None and r.json()["steer"]["status"] == "sending", r.text
            else:
                raise AssertionError(f"withdraw {i}: {r.status_code} {r.text}")
            text = f"RACE-{i:03d}"
            if st["status"] == "cancelled":
                assert seen(model, text) == [], (text, st)
            elif st["status"] == "delivered":
                assert seen(model, text) == [2], (text, st)
        counts = {k: sum(1 for s in states.values() if s["status"] == k) for k in ("cancelled", "delivered")}
        queued = [s for s in states.values() if s["status"] == "queued"]
        print(f"race outcome: {counts}, queued {len(queued)}")
        assert counts["cancelled"] + counts["delivered"] + len(queued) == n
        assert counts["cancelled"] and counts["delivered"], f"no race happened (machine too slow?): {counts}"
        for s in queued:  # each started a turn of its own and the model saw it there, once
            t = api.wait_turn("st-race", int(s["next_turn"].rsplit("-", 1)[1]), 120)
            assert t["phase"] == "Completed"
            assert len(seen(model, t["message"])) == 1
    finally:
        model.stop()


# --- interrupt ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", ["text", "tool", "prompt"])
def test_claude_interrupt_stops_the_turn_and_the_next_message_continues(
    cluster: Cluster, stack: Stack, state: str
) -> None:
    first = {
        "text": Step(text="Going on and on:", words=80, word_delay=0.15),
        "tool": Step(text="Slow.", command=SLOW.format(s=20) + " && echo late > late.txt"),
        "prompt": Step(text="Writing.", command="echo hi > asked.txt"),
    }[state]
    model = ScriptedModel([first, Step(when="still with me", text="FINAL: yes, continuing.")])
    url = model.start()
    name = f"st-int-{state}"
    try:
        claude_env(cluster, name, url, approvals="ask" if state == "prompt" else None)
        api = Api(stack)
        new_session(api, name, name, f"first message of {name}")
        if state == "text":
            wait(lambda: streaming(model), 90, "the answer to stream", lambda: api.debug(name))
        elif state == "tool":
            wait(lambda: tool_running(api, name), 90, "the tool", lambda: api.debug(name))
        else:
            api.wait_event(name, lambda e: e["kind"] == "permission_request", 90)
        time.sleep(0.5)
        t0 = time.monotonic()
        r = api.post(f"/api/sessions/{name}/interrupt")
        assert r.status_code == 202, r.text
        iid = r.json()["interrupt"]["id"]
        t1 = api.wait_turn(name, 1, 30)
        assert t1["phase"] == "Interrupted" and t1["outcome"] == "interrupted", api.debug(name)
        assert t1["exit_status"] == 130
        assert time.monotonic() - t0 < 5, "confirmed by the driver, not killed at the deadline"
        [it] = t1["interrupts"]
        assert it["id"] == iid and it["status"] == "confirmed" and it["message"] is None
        s = wait(lambda: (x := api.session(name))["phase"] == "Idle" and x, 20, "idle")
        assert s["conversation"] and s["sandbox"]["pod"] == f"{name}-r1", "the sandbox is kept"
        assert not (workspace(stack, name) / "late.txt").exists()
        assert not (workspace(stack, name) / "asked.txt").exists()
        assert api.turn(name, 2) is None
        r = api.post(f"/api/sessions/{name}/messages", {"message": "are you still with me?"})
        assert r.status_code == 202 and r.json()["kind"] == "turn"
        t2 = api.wait_turn(name, 2)
        assert t2["phase"] == "Completed" and "continuing" in t2["summary"], api.debug(name)
        assert model.requests[-1].contains(f"first message of {name}"), "the same conversation"
    finally:
        model.stop()


def test_claude_interrupt_with_a_message_goes_on_in_the_same_turn(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Slow.", command=SLOW.format(s=20) + " && echo late > late.txt"),
            Step(when="STOP: write the failing test first", text="FINAL: writing the test first."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-intmsg", url)
        api = Api(stack)
        new_session(api, "st-intmsg", "st-intmsg", "fix the retry bug")
        wait(lambda: tool_running(api, "st-intmsg"), 90, "the tool", lambda: api.debug("st-intmsg"))
        time.sleep(0.5)
        r = api.post("/api/sessions/st-intmsg/interrupt", {"message": "STOP: write the failing test first"})
        assert r.status_code == 202, r.text
        iid = r.json()["interrupt"]["id"]
        t1 = api.wait_turn("st-intmsg", 1, 60)
        assert t1["phase"] == "Completed" and "writing the test first" in t1["summary"], api.debug(
            "st-intmsg"
        )
        [it] = t1["interrupts"]
        assert it["id"] == iid and it["status"] == "confirmed" and it["message_status"] == "delivered", it
        assert api.turn("st-intmsg", 2) is None, "the same turn went on"
        assert seen(model, "STOP: write the failing test first") == [2]
        assert model.requests[1].contains("fix the retry bug"), "the same conversation"
        assert not (workspace(stack, "st-intmsg") / "late.txt").exists()
    finally:
        model.stop()


def oneshot_env(cluster: Cluster, name: str) -> None:
    environment(
        cluster,
        name,
        harnessOptions={
            "command": [
                "sh",
                "-c",
                'case "$1" in *slow*) sleep 30; echo late > late.txt;; esac; echo "did: $1"',
                "antigravity",
            ]
        },
    )


def test_one_shot_refuses_a_steer_and_an_interrupt_message_becomes_the_next_turn(
    cluster: Cluster, stack: Stack
) -> None:
    oneshot_env(cluster, "st-oneshot")
    api = Api(stack)
    new_session(api, "st-ag", "st-oneshot", "a slow job", harness="antigravity")
    wait(lambda: api.session("st-ag")["phase"] == "Running", 60, "running", lambda: api.debug("st-ag"))
    time.sleep(1)
    r = api.post("/api/sessions/st-ag/steer", {"message": "also this"})
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith("antigravity cannot be steered: it runs one-shot")
    assert api.turn("st-ag", 1)["steers"] == []  # type: ignore[index]
    # send to a busy one-shot session: the message waits as the next turn (not a steer)
    r = api.post("/api/sessions/st-ag/messages", {"message": "then this"})
    assert r.status_code == 202 and r.json()["kind"] == "turn" and r.json()["turn"]["index"] == 2
    r = api.post("/api/sessions/st-ag/interrupt", {"message": "stop; do the quick thing"})
    assert r.status_code == 202, r.text
    iid = r.json()["interrupt"]["id"]
    t1 = api.wait_turn("st-ag", 1, 30)
    assert t1["phase"] == "Interrupted" and t1["exit_status"] == 130, api.debug("st-ag")
    [it] = t1["interrupts"]
    assert it["status"] == "confirmed" and it["message_status"] == "queued", it
    nxt = api.wait_turn("st-ag", int(it["next_turn"].rsplit("-", 1)[1]), 60)
    assert nxt["from_steer"] == iid and nxt["phase"] == "Completed"
    assert "did: stop; do the quick thing" in nxt["summary"]
    assert api.wait_turn("st-ag", 2, 60)["phase"] == "Completed"
    assert not (workspace(stack, "st-ag") / "late.txt").exists()


def test_an_interrupt_the_driver_never_confirms_kills_the_run(cluster: Cluster, stack: Stack) -> None:
    """The driver is frozen (SIGSTOP) and a forged confirmation arrives: hangar kills the run at the
    deadline (HANGAR_INTERRUPT_GRACE_SECONDS, 5 s in the test stack) and the turn says so."""
    model = ScriptedModel(
        [
            Step(text="Slow.", command=SLOW.format(s=30)),
            Step(when="after the kill", text="FINAL: back after the kill."),
        ]
    )
    url = model.start()
    pid = 0
    try:
        claude_env(cluster, "st-kill", url)
        api = Api(stack)
        new_session(api, "st-kill", "st-kill", "run the slow thing")
        wait(lambda: tool_running(api, "st-kill"), 90, "the tool", lambda: api.debug("st-kill"))
        pid = next(e["pid"] for e in api.events("st-kill") if e["kind"] == "driver_connected")
        os.kill(pid, signal.SIGSTOP)
        r = api.post("/api/sessions/st-kill/interrupt", {"message": "after the kill, go on"})
        assert r.status_code == 202

        async def forge() -> bytes:  # a turn_ended that is not signed with the run key
            port = int(stack.env()["HANGAR_GATEWAY_PORT"])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            frame = P.sign(
                P.new_run_key(),
                P.make_frame(
                    "st-kill-r1",
                    P.D2G,
                    P.EVENT,
                    {"name": "turn_ended", "payload": {"outcome": "interrupted"}},
                ),
            )
            writer.write(P.encode(frame))
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return data

        assert asyncio.run(forge()) == b""
        t0 = time.monotonic()
        t1 = api.wait_turn("st-kill", 1, 30)
        assert time.monotonic() - t0 > 2, "not confirmed by the forged frame"
        assert t1["phase"] == "Interrupted" and t1["exit_status"] == 130, api.debug("st-kill")
        assert "did not confirm the interrupt in time; hangar killed the run" in t1["reason"]
        # The message is queued for the next turn just after the kill is recorded.
        [it] = wait(
            lambda: [
                i for i in (api.turn("st-kill", 1) or {}).get("interrupts", []) if i.get("message_status")
            ],
            15,
            "the interrupt's message queued",
        )
        assert it["status"] == "killed" and it["message_status"] == "queued", it
        released = [e for e in api.events("st-kill") if e["kind"] == "sandbox_released"]
        assert released and released[0]["pod"] == "st-kill-r1", api.debug("st-kill")
        assert "interrupt not confirmed" in released[0]["reason"]
        # The run could not go on with the message: it starts the next turn, in a new sandbox, same conversation.
        t2 = api.wait_turn("st-kill", 2, 120)
        assert t2["phase"] == "Completed" and "back after the kill" in t2["summary"], api.debug("st-kill")
        assert t2["from_steer"] == it["id"]
        assert model.requests[-1].contains("run the slow thing")
        assert api.session("st-kill")["sandbox"]["pod"] == "st-kill-r2"
    finally:
        if pid:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        model.stop()


# --- kubectl --------------------------------------------------------------------------------------------
def test_kubectl_patched_steer_and_interrupt_are_delivered_like_rest(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Slow.", command=SLOW.format(s=4)),
            Step(when="KUBECTL-STEER", text="Another slow one.", command=SLOW.format(s=30)),
            Step(when="KUBECTL-INTERRUPT", text="FINAL: interrupted by kubectl, going on."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-kubectl", url)
        api = Api(stack)
        new_session(api, "st-kube", "st-kubectl", "do the slow things")
        wait(lambda: tool_running(api, "st-kube"), 90, "the tool", lambda: api.debug("st-kube"))
        patch = [{"op": "add", "path": "/spec/steers", "value": [{"id": "k1", "message": "KUBECTL-STEER"}]}]
        cluster.kubectl("patch", "turn", "st-kube-1", "--type=json", "-p", json.dumps(patch))
        wait(
            lambda: steer_of(api, "st-kube", 1, "k1")["status"] == "delivered",
            60,
            "the kubectl steer delivered",
            lambda: api.debug("st-kube"),
        )
        wait(lambda: len(model.requests) >= 2, 30, "the second tool")
        time.sleep(1)
        patch = [
            {
                "op": "add",
                "path": "/spec/interrupts",
                "value": [{"id": "k2", "message": "KUBECTL-INTERRUPT", "by": "gitops"}],
            }
        ]
        cluster.kubectl("patch", "turn", "st-kube-1", "--type=json", "-p", json.dumps(patch))
        t1 = api.wait_turn("st-kube", 1, 60)
        assert t1["phase"] == "Completed" and "interrupted by kubectl" in t1["summary"], api.debug("st-kube")
        [it] = t1["interrupts"]
        assert it["status"] == "confirmed" and it["message_status"] == "delivered" and it["by"] == "gitops"
        assert seen(model, "KUBECTL-STEER") == [2] and seen(model, "KUBECTL-INTERRUPT")
        msgs = progress(api, "st-kube")
        assert "steered: KUBECTL-STEER" in msgs and "interrupt requested: KUBECTL-INTERRUPT" in msgs
        # A class written with kubectl is recorded like one sent over REST.
        patch = [{"op": "add", "path": "/spec/steers/0/class", "value": "redirect"}]
        cluster.kubectl("patch", "turn", "st-kube-1", "--type=json", "-p", json.dumps(patch))
        api.wait_event(
            "st-kube", lambda e: e["kind"] == "progress" and e.get("event") == "steer.classified", 30
        )
        assert steer_of(api, "st-kube", 1, "k1")["class"] == "redirect"
    finally:
        model.stop()


# --- classification and bad input ------------------------------------------------------------------------
def test_classify_a_steer_and_bad_input_changes_nothing(
    cluster: Cluster, stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel(
        [
            Step(text="Slow.", command=SLOW.format(s=5)),
            Step(when="tool_result", text="FINAL: done."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-class", url)
        api = Api(stack)
        # Unknown and idle sessions.
        r = api.post("/api/sessions/nope/steer", {"message": "x"})
        assert r.status_code == 404 and r.json()["detail"] == "no session 'nope'"
        assert api.post("/api/sessions/nope/interrupt").status_code == 404
        assert api.post("/api/sessions/nope/steers/st-1/withdraw").status_code == 404
        r = api.post("/api/sessions", {"name": "st-idle", "environment": "st-class"})
        assert r.status_code == 201
        CREATED.append("st-idle")
        wait(lambda: api.session("st-idle")["phase"] == "Idle", 90, "idle", lambda: api.debug("st-idle"))
        r = api.post("/api/sessions/st-idle/steer", {"message": "anyone?"})
        assert r.status_code == 409 and "has no running turn to steer (it is Idle)" in r.json()["detail"]
        r = api.post("/api/sessions/st-idle/interrupt")
        assert r.status_code == 409 and "has no running turn to interrupt" in r.json()["detail"]
        assert api.session("st-idle")["turns"] == []
        # A running turn: bad bodies are refused before anything is written.
        new_session(api, "st-cls", "st-class", "do the slow thing")
        wait(lambda: tool_running(api, "st-cls"), 90, "the tool", lambda: api.debug("st-cls"))
        for bad in ({"message": ""}, {}, {"message": None}, {"message": "x" * 262145}):
            r = api.post("/api/sessions/st-cls/steer", bad)
            assert r.status_code == 422, (bad, r.text)
        assert api.post("/api/sessions/st-cls/interrupt", {"message": ""}).status_code == 422
        assert api.turn("st-cls", 1)["steers"] == [] and api.turn("st-cls", 1)["interrupts"] == []  # type: ignore[index]
        sid = api.post("/api/sessions/st-cls/steer", {"message": "fix: keep it small"}).json()["steer"]["id"]
        # REST steers are unclassified until someone says; a prefix over REST is just text.
        assert steer_of(api, "st-cls", 1, sid)["class"] == "unclassified"
        for bad in ({"class": "bug"}, {"class": "unclassified"}, {}, {"klass": "correction"}):
            r = api.post(f"/api/sessions/st-cls/steers/{sid}/class", bad)
            assert r.status_code == 422, (bad, r.text)
        r = api.post("/api/sessions/st-cls/steers/st-000000000000/class", {"class": "correction"})
        assert r.status_code == 404
        r = httpx.post(
            f"{stack.api_url}/api/sessions/st-cls/steers/{sid}/class",
            json={"class": "correction"},
            headers={"Authorization": "Bearer not-a-token"},
        )
        assert r.status_code == 401
        # A caller without the right (a jobs-scoped token, not an admin): 403. The same API, in process, with
        # a tokens file that has such a token.
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(json.dumps([{"token": "bobs-token", "subject": "bob", "role": "jobs"}]))
        monkeypatch.setenv("HANGAR_API_TOKENS_FILE", str(tokens))
        app = create_app(
            Settings(namespace=stack.namespace, database_url=stack.database_url), str(cluster.kubeconfig)
        )
        with TestClient(app) as bob:
            r = bob.post(
                f"/api/sessions/st-cls/steers/{sid}/class",
                json={"class": "correction"},
                headers={"Authorization": "Bearer bobs-token"},
            )
            assert r.status_code == 403 and r.json()["detail"].startswith("bob is not an admin"), r.text
            for path, body in (
                ("steer", {"message": "x"}),
                ("interrupt", None),
                (f"steers/{sid}/withdraw", None),
            ):
                r = bob.post(
                    f"/api/sessions/st-cls/{path}", json=body, headers={"Authorization": "Bearer bobs-token"}
                )
                assert r.status_code == 403, (path, r.text)
        assert steer_of(api, "st-cls", 1, sid)["class"] == "unclassified"
        assert steer_of(api, "st-cls", 1, sid)["withdraw"] is None
        assert len(api.turn("st-cls", 1)["steers"]) == 1 and api.turn("st-cls", 1)["interrupts"] == []  # type: ignore[index]
        r = api.post(f"/api/sessions/st-cls/steers/{sid}/class", {"class": "correction"})
        assert r.status_code == 200, r.text
        st = r.json()["steer"]
        assert st["class"] == "correction" and st["classified_by"] == "admin" and st["classified_at"]
        ev = api.wait_event(
            "st-cls", lambda e: e["kind"] == "progress" and e.get("event") == "steer.classified", 30
        )
        assert ev["steer"] == sid and ev["class"] == "correction" and ev["by"] == "admin"
        t1 = api.wait_turn("st-cls", 1)
        assert t1["phase"] == "Completed"
        assert steer_of(api, "st-cls", 1, sid)["status"] == "delivered"
        metrics = httpx.get(f"{stack.operator_url}/metrics").text
        assert 'hangar_steer_classifications_total{class="correction"}' in metrics
        assert 'hangar_interventions_total{class="unclassified",kind="steer"}' in metrics
    finally:
        model.stop()


# --- Codex --------------------------------------------------------------------------------------------
def test_codex_steer_preempts_streaming_text_and_waits_for_a_command(cluster: Cluster, stack: Stack) -> None:
    def has(text: str) -> Any:
        return lambda r: isinstance(r, Request) and text in r.user_text

    model = ScriptedModel(
        [
            Step(text="Thinking out loud:", words=40, word_delay=0.15),
            Step(when=has("STEER-1: be brief"), text="Brief. Now a command.", command=SLOW.format(s=4)),
            Step(when="tool_result", text="FINAL: done with both."),
            Step(when=has("STEER-2"), text="FINAL: done with both."),
        ]
    )
    model.start()
    try:
        codex_env(cluster, "st-codex", model)
        api = Api(stack)
        new_session(api, "st-cx", "st-codex", "tell me a long story", harness="codex", model="fake-model")
        try:
            wait(lambda: streaming(model), 90, "the answer to stream", lambda: api.debug("st-cx"))
        except AssertionError:
            codex_guard(api, "st-cx")
            raise
        time.sleep(0.5)
        s1 = api.post("/api/sessions/st-cx/steer", {"message": "STEER-1: be brief"}).json()["steer"]["id"]
        wait(lambda: tool_running(api, "st-cx"), 60, "the command", lambda: api.debug("st-cx"))
        s2 = api.post("/api/sessions/st-cx/steer", {"message": "STEER-2: also this"}).json()["steer"]["id"]
        t1 = api.wait_turn("st-cx", 1, 90)
        assert t1["phase"] == "Completed", api.debug("st-cx")
        assert steer_of(api, "st-cx", 1, s1)["status"] == "delivered"
        assert steer_of(api, "st-cx", 1, s2)["status"] == "delivered"
        # The first answer was cut short by the steer; the second came after the command's result.
        assert not model.requests[0].finished.is_set() or model.requests[0].disconnected
        [i1] = seen(model, "STEER-1")
        assert model.requests[i1 - 1].user_text
        i2 = seen(model, "STEER-2")[0]
        assert any(model.requests[j - 1].tool_results for j in range(i1 + 1, i2 + 1)), "after the command"
        assert api.turn("st-cx", 2) is None
    finally:
        model.stop()


def test_codex_interrupt_with_a_message_goes_on_in_the_same_turn(cluster: Cluster, stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Slow.", command=SLOW.format(s=20) + " && echo late > late.txt"),
            Step(when="STOP: write the failing test first", text="FINAL: writing the test first."),
        ]
    )
    model.start()
    try:
        codex_env(cluster, "st-codex-int", model)
        api = Api(stack)
        new_session(api, "st-cxint", "st-codex-int", "fix the retry bug", harness="codex", model="fake-model")
        try:
            wait(lambda: tool_running(api, "st-cxint"), 90, "the command", lambda: api.debug("st-cxint"))
        except AssertionError:
            codex_guard(api, "st-cxint")
            raise
        time.sleep(0.5)
        r = api.post("/api/sessions/st-cxint/interrupt", {"message": "STOP: write the failing test first"})
        assert r.status_code == 202, r.text
        t1 = api.wait_turn("st-cxint", 1, 60)
        assert t1["phase"] == "Completed" and "writing the test first" in t1["summary"], api.debug("st-cxint")
        [it] = t1["interrupts"]
        assert it["status"] == "confirmed" and it["message_status"] == "delivered", it
        assert api.turn("st-cxint", 2) is None, "the same turn went on"
        assert seen(model, "STOP: write the failing test first")
        assert model.requests[-1].contains("fix the retry bug"), "the same conversation (thread)"
        assert not (workspace(stack, "st-cxint") / "late.txt").exists()
    finally:
        model.stop()


# --- the CLI --------------------------------------------------------------------------------------------
def test_cli_steer_withdraw_classify_interrupt(cluster: Cluster, stack: Stack) -> None:
    import subprocess
    import sys

    def hangar(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HANGAR_URL": stack.api_url, "HANGAR_TOKEN": stack.token}
        return subprocess.run(
            [sys.executable, "-m", "hangar.cli.main", "session", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    model = ScriptedModel(
        [
            Step(text="Streaming:", words=40, word_delay=0.15, command=SLOW.format(s=20)),
            Step(when="CLI-STOP", text="FINAL: stopped as told."),
            Step(when="CLI-STEER-B", text="FINAL: B noted."),
        ]
    )
    url = model.start()
    try:
        claude_env(cluster, "st-cli", url)
        api = Api(stack)
        new_session(api, "st-cli", "st-cli", "stream then run")
        wait(lambda: streaming(model), 90, "the answer to stream", lambda: api.debug("st-cli"))
        r = hangar("steer", "st-cli", "CLI-STEER-A: take this back", "--class", "info")
        assert r.returncode == 0, r.stderr
        sid = r.stdout.split()[1]
        assert (
            f"steer {sid} sending (turn st-cli-1)" in r.stdout
            and f"steer {sid} classified new_info" in r.stdout
        )
        r = hangar("withdraw", "st-cli", sid)
        assert r.returncode == 0 and f"steer {sid} cancelled" in r.stdout, r.stdout + r.stderr
        r = hangar("steer", "st-cli", "CLI-STEER-B: keep this")
        assert r.returncode == 0, r.stderr
        sid_b = r.stdout.split()[1]
        # Held while text streams; handed to the CLI once the tool call comes: then it is too late.
        wait(lambda: tool_running(api, "st-cli"), 60, "the tool", lambda: api.debug("st-cli"))
        time.sleep(0.5)
        r = hangar("withdraw", "st-cli", sid_b)
        assert r.returncode == 1 and "error 409: too late to withdraw" in r.stderr, r.stdout + r.stderr
        r = hangar("classify", "st-cli", sid_b, "fix")
        assert r.returncode == 0 and f"steer {sid_b} classified correction" in r.stdout
        r = hangar("classify", "st-cli", sid_b, "bug")
        assert r.returncode == 2 and "unknown class 'bug'" in r.stderr
        r = hangar("interrupt", "st-cli", "CLI-STOP: stop and say so", "--wait")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "confirmed: the turn goes on with the message" in r.stdout
        t1 = api.wait_turn("st-cli", 1, 60)
        assert t1["phase"] == "Completed" and "stopped as told" in t1["summary"], api.debug("st-cli")
        assert seen(model, "CLI-STEER-A") == []
        b = steer_of(api, "st-cli", 1, sid_b)
        assert b["class"] == "correction" and b["status"] in ("delivered", "queued"), b
        if b["status"] == "queued":  # the interrupt cancelled it before the CLI took it in: the next turn
            api.wait_turn("st-cli", 2, 60)
        assert len(seen(model, "CLI-STEER-B")) == 1
        wait(lambda: api.session("st-cli")["phase"] == "Idle", 30, "idle")
        r = hangar("interrupt", "st-cli")
        assert r.returncode == 1 and "error 409: session 'st-cli' has no running turn" in r.stderr
    finally:
        model.stop()
