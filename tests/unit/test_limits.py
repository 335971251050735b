"""Byte budgets (issue 11): the largest objects the limits allow stay far below etcd's, limits count bytes,
bodies beyond the inline size live in the database, and kopf's diff-base holds no message body."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from pydantic import TypeAdapter, ValidationError

from hangar.bodies import Body, BodyMissing, resolve, stow
from hangar.models import Job, Session, Turn
from hangar.models.limits import (
    INLINE_MAX,
    INTERRUPTS_MAX,
    MESSAGE_MAX,
    MODEL_MAX,
    OBJECT_BUDGET,
    PREVIEW_MAX,
    STEERS_MAX,
    SUMMARY_MAX,
    MessageText,
    utf8_len,
)
from hangar.store import Database, open_database
from hangar_operator.main import configure

REF = {"sha256": "a" * 64, "size": MESSAGE_MAX}
EMOJI = "\U0001f600"  # 4 bytes of UTF-8, one character


def full(n: int) -> str:
    """A string of exactly ``n`` bytes made of 4-byte characters: the worst case for a character limit."""
    return EMOJI * (n // 4) + "x" * (n % 4)


def largest_turn() -> dict[str, Any]:
    steer = {"id": "st-" + "a" * 61, "message": full(INLINE_MAX), "messageRef": REF, "by": "x" * 253}
    ireq = {"id": "in-" + "a" * 61, "message": full(INLINE_MAX), "messageRef": REF, "by": "x" * 253}
    spec = {
        "session": "s" * 40,
        "index": 1,
        "message": full(INLINE_MAX),
        "messageRef": REF,
        "steers": [steer] * STEERS_MAX,
        "interrupts": [ireq] * INTERRUPTS_MAX,
    }
    status = {
        "summary": full(SUMMARY_MAX),
        "steers": [{"id": steer["id"], "status": "delivered", "reason": "r" * 300}] * STEERS_MAX,
        "interrupts": [{"id": ireq["id"], "status": "confirmed", "reason": "r" * 300}] * INTERRUPTS_MAX,
    }
    return {"metadata": {"name": "s" * 40 + "-1"}, "spec": spec, "status": status}


def test_the_largest_turn_session_and_job_the_limits_allow_stay_within_the_budget() -> None:
    turn = Turn.model_validate(largest_turn())
    session = Session.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {
                "environment": "e" * 253,
                "prompt": full(INLINE_MAX),
                "promptRef": REF,
                "model": full(MODEL_MAX),
                "stopReason": full(2000),
            },
        }
    )
    job = Job.model_validate(
        {
            "metadata": {"name": "j"},
            "spec": {
                "submitter": "x" * 253,
                "environment": "e",
                "prompt": full(INLINE_MAX),
                "promptRef": REF,
                "model": full(MODEL_MAX),
            },
        }
    )
    for obj in (turn, session, job):
        size = len(json.dumps(obj.dump(), ensure_ascii=False).encode())
        assert size < OBJECT_BUDGET, (type(obj).__name__, size)
    assert OBJECT_BUDGET * 2 < 1572864  # etcd's request limit, with room for kopf and the apiserver


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"message": full(INLINE_MAX + 4)}, "message"),
        ({"message": "m", "steers": [{"id": "s1", "message": full(INLINE_MAX + 4)}]}, "steers"),
        (
            {"message": "m", "steers": [{"id": f"s{i}", "message": "m"} for i in range(STEERS_MAX + 1)]},
            "steers",
        ),
        ({"message": "m", "interrupts": [{"id": "i", "message": full(INLINE_MAX + 4)}]}, "interrupts"),
    ],
)
def test_limits_count_bytes_not_characters(spec: dict[str, Any], field: str) -> None:
    # INLINE_MAX + 4 bytes of emoji is far fewer characters than INLINE_MAX: a character limit let it by.
    assert len(full(INLINE_MAX + 4)) < INLINE_MAX
    with pytest.raises(ValidationError) as e:
        Turn.model_validate({"metadata": {}, "spec": {"index": 1, **spec}})
    assert field in str(e.value)
    with pytest.raises(ValidationError, match=f"at most {MESSAGE_MAX} bytes"):
        TypeAdapter(MessageText).validate_python(full(MESSAGE_MAX + 4))
    assert TypeAdapter(MessageText).validate_python(full(MESSAGE_MAX)) == full(MESSAGE_MAX)


def test_the_crds_hold_the_same_byte_limits_in_cel() -> None:
    from hangar.crdgen import crd_for

    spec = crd_for(Turn)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    msg = spec["properties"]["message"]
    assert msg["maxLength"] == INLINE_MAX
    assert msg["x-kubernetes-validations"][0]["rule"] == f"bytes(self).size() <= {INLINE_MAX}"
    assert spec["properties"]["steers"]["maxItems"] == STEERS_MAX
    assert spec["properties"]["interrupts"]["maxItems"] == INTERRUPTS_MAX
    ref = spec["properties"]["messageRef"]["properties"]
    assert ref["size"]["maximum"] == MESSAGE_MAX


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'h.db'}"
    else:
        url = os.environ.get("HANGAR_TEST_POSTGRES_URL", "")
        if not url:
            pytest.skip("HANGAR_TEST_POSTGRES_URL is not set (tools/test.sh starts a server)")
    d = await open_database(url)
    yield d
    await d.close()


async def test_a_long_body_is_stored_by_digest_and_read_back_whole(db: Database) -> None:
    short = await stow(db, full(INLINE_MAX))
    assert short.ref is None and short.inline == full(INLINE_MAX)
    assert await resolve(db, short) == full(INLINE_MAX)
    text = "START " + full(MESSAGE_MAX - 10) + " END"
    long = await stow(db, text)
    assert long.ref is not None and long.ref.size == utf8_len(text) == MESSAGE_MAX
    assert long.inline.startswith("START ") and utf8_len(long.inline) < PREVIEW_MAX + 100
    assert long.fields("prompt") == {"prompt": long.inline, "promptRef": long.ref.dump()}
    assert await stow(db, text) == long  # stored once by content: a second send is the same reference
    # What a resource holds is all a reader needs to get the body back.
    again = Body.of(long.fields())
    assert again is not None and await resolve(db, again) == text
    gone = Body("preview", long.ref.model_copy(update={"sha256": "b" * 64}))
    with pytest.raises(BodyMissing, match="not in hangar's database"):
        await resolve(db, gone)
    with pytest.raises(ValueError, match=f"at most {MESSAGE_MAX} bytes"):
        await stow(db, full(MESSAGE_MAX + 4))


def test_kopfs_diff_base_holds_no_message_body_and_no_annotations() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    storage = settings.persistence.diffbase_storage
    body = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {
            "name": "s1",
            "labels": {"app": "x"},
            "annotations": {"big": "a" * 200_000},
        },
        "spec": {"environment": "dev", "prompt": full(INLINE_MAX), "promptRef": REF, "harness": "claude"},
    }
    essence = storage.build(body=kopf.Body(body))
    assert essence == {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"environment": "dev", "harness": "claude"},
    }
    patch = kopf.Patch()
    storage.store(body=kopf.Body(body), patch=patch, essence=essence)
    assert len(json.dumps(dict(patch))) < 1000
    turn = largest_turn()
    essence = storage.build(body=kopf.Body(turn))
    assert len(json.dumps(essence)) < 200, essence


# --- no event can block a run ------------------------------------------------------------------------------
async def test_an_event_the_apiserver_refuses_is_recorded_failed_and_acknowledged(tmp_path: Path) -> None:
    from tests.unit.operator_rig import make_rig

    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    run = rig.run_id("s1")
    # The apiserver refuses the turn's end (as it did for a turn near etcd's limit): the event is recorded
    # as failed with the reason and acknowledged, not retried forever.
    rig.kube.fail_next("patch_status", "turns", 413, name=turn)
    await rig.event("s1", "turn_ended", turn=turn, outcome="completed")
    assert await rig.ctx.db.driver_acked(run) == 1
    [failed] = [e for e in await rig.ctx.db.events("session/s1") if e.kind == "event_failed"]
    assert failed.payload["event"] == "turn_ended" and "413" in failed.payload["reason"]
    # The events after it flow: the next one is applied.
    await rig.event("s1", "turn_ended", turn=turn, outcome="completed")
    assert rig.status("turns", turn)["phase"] == "Completed"
    assert await rig.ctx.db.driver_acked(run) == 2


async def test_a_passing_failure_is_not_acknowledged_so_the_driver_sends_it_again(tmp_path: Path) -> None:
    from hangar.kube import ApiException
    from tests.unit.operator_rig import make_rig

    rig = await make_rig(tmp_path)
    rig.env()
    turn = await rig.running("s1")
    run = rig.run_id("s1")
    rig.kube.fail_next("patch_status", "turns", 503, name=turn)
    with pytest.raises(ApiException):
        await rig.c.router.on_event(run, 1, "turn_ended", {"turn": turn, "outcome": "completed"})
    assert await rig.ctx.db.driver_acked(run) == 0
    await rig.c.router.on_event(run, 1, "turn_ended", {"turn": turn, "outcome": "completed"})
    assert rig.status("turns", turn)["phase"] == "Completed"
    assert await rig.ctx.db.driver_acked(run) == 1


async def test_an_interrupt_stops_the_turn_when_its_record_cannot_be_written(tmp_path: Path) -> None:
    import asyncio

    from hangar.kube import ApiException
    from tests.unit.operator_rig import make_rig

    rig = await make_rig(tmp_path)  # interrupt grace: 0.2 s
    rig.env()
    turn = await rig.running("s1")
    run = rig.run_id("s1")
    await rig.kube.patch("turns", turn, {"spec": {"interrupts": [{"id": "i1"}]}})
    rig.kube.fail_next("patch_status", "turns", 422, name=turn)  # the "sent" record is refused
    with pytest.raises(ApiException):
        async with rig.ctx.lock("default", "s1"):
            await rig.c.steering.reconcile("default", "s1", turn)
    assert any(c.startswith("interrupt") for c in rig.commands(run)), "the interrupt went to the driver"
    assert "interrupts" not in rig.status("turns", turn)
    for _ in range(100):  # the driver never confirms: the deadline kills the run
        if rig.status("turns", turn).get("phase") == "Interrupted":
            break
        await asyncio.sleep(0.05)
    t = rig.status("turns", turn)
    assert (t["phase"], t["exitStatus"]) == ("Interrupted", 130), t
    assert "killed" in t["reason"]


async def test_a_refused_hello_is_audited_but_never_written_into_a_sessions_activity(tmp_path: Path) -> None:
    from tests.unit.operator_rig import make_rig

    rig = await make_rig(tmp_path)
    rig.env()
    await rig.running("s1")
    run = rig.run_id("s1")
    before = await rig.ctx.db.events("session/s1")
    await rig.c.router.on_rejected(run, "bad signature: forged hello")
    assert await rig.ctx.db.events("session/s1") == before
    [entry] = await rig.ctx.db.audit_entries("driver.rejected")
    assert entry["target"] == run and "forged" in entry["reason"]


# --- a turn's room for steers and interrupts ------------------------------------------------------------
def _turn(steers: int = 0, interrupts: int = 0, each: int = 10, with_message: bool = True) -> dict[str, Any]:
    ref = {"sha256": "c" * 64, "size": each} if each > INLINE_MAX else None
    msg = {"message": "m" * min(each, INLINE_MAX), **({"messageRef": ref} if ref else {})}
    return {
        "metadata": {"name": "s1-1"},
        "spec": {
            "message": "m",
            "steers": [{"id": f"s{i}", **msg} for i in range(steers)],
            "interrupts": [{"id": f"i{i}", **(msg if with_message else {})} for i in range(interrupts)],
        },
    }


STORED = {"message": "preview", "messageRef": {"sha256": "d" * 64, "size": MESSAGE_MAX}}


@pytest.mark.parametrize(
    ("turn", "field", "item", "status", "says"),
    [
        (_turn(), "steers", {"message": "hi"}, None, ""),
        (_turn(steers=STEERS_MAX - 1), "steers", {"message": "hi"}, None, ""),
        (_turn(steers=STEERS_MAX), "steers", {"message": "hi"}, 409, f"steers per turn: {STEERS_MAX}"),
        # Bodies count wherever they live: three stored ones and a fourth fill the budget exactly.
        (_turn(steers=3, each=MESSAGE_MAX), "steers", STORED, None, ""),
        (_turn(steers=4, each=MESSAGE_MAX), "steers", {"message": "x"}, 413, "budget of 1048576 bytes"),
        (_turn(steers=2, interrupts=2, each=MESSAGE_MAX), "interrupts", STORED, 413, "new message"),
        # An interrupt without a message always finds room, in the slot kept for it and past the budget.
        (_turn(steers=4, each=MESSAGE_MAX), "interrupts", {}, None, ""),
        (_turn(interrupts=INTERRUPTS_MAX - 1), "interrupts", {}, None, ""),
        (_turn(interrupts=INTERRUPTS_MAX - 1), "interrupts", {"message": "go on"}, 409, "without a message"),
        (_turn(interrupts=INTERRUPTS_MAX, with_message=False), "interrupts", {}, 409, "per turn"),
    ],
)
def test_a_turn_has_room_for_so_many_steers_and_interrupts_and_so_many_bytes(
    turn: dict[str, Any], field: str, item: dict[str, Any], status: int | None, says: str
) -> None:
    from hangar.bodies import turn_room

    full = turn_room(turn, field, item)
    if status is None:
        assert full is None
    else:
        assert full is not None and full[0] == status and says in full[1], full
        assert "s1-1" in full[1]


# --- the operator hands the driver the whole body -----------------------------------------------------
async def test_the_operator_sends_the_stored_body_and_fails_a_turn_whose_body_is_gone(tmp_path: Path) -> None:
    from tests.unit.operator_rig import make_rig

    rig = await make_rig(tmp_path)
    rig.env()
    text = "PROMPT " + "p" * (2 * INLINE_MAX) + " END"
    body = await stow(rig.ctx.db, text)
    await rig.session("s1", **body.fields("prompt"))
    await rig.reconcile("s1")
    await rig.connect("s1")
    run = rig.run_id("s1")
    cmd = rig.ctx.gateway._runs[run].pending["start-s1-1"]
    assert cmd["message"] == text, "the driver gets the body, not the preview"
    t = rig.get("turns", "s1-1")["spec"]
    assert body.ref is not None and t["messageRef"] == body.ref.dump()
    # A queued steer that starts the next turn carries the same reference.
    steer = {"id": "st1", **(await stow(rig.ctx.db, "STEER " + "s" * (2 * INLINE_MAX))).fields()}
    await rig.event("s1", "turn_ended", turn="s1-1", outcome="completed")
    await rig.kube.patch("turns", "s1-1", {"spec": {"steers": [steer]}})
    async with rig.ctx.lock("default", "s1"):
        await rig.c.steering.reconcile("default", "s1", "s1-1")
    nxt = rig.status("turns", "s1-1")["steers"][0]["nextTurn"]
    assert rig.get("turns", nxt)["spec"]["messageRef"] == steer["messageRef"]
    # A reference to a body the database does not hold (written by hand) fails the turn with the reason.
    gone = {"message": "preview", "messageRef": {"sha256": "e" * 64, "size": 9000}}
    await rig.session("s2", prompt=gone["message"], promptRef=gone["messageRef"])
    await rig.reconcile("s2")
    await rig.connect("s2")
    t2 = rig.status("turns", "s2-1")
    assert t2["phase"] == "Failed" and "not in hangar's database" in t2["reason"], t2


async def test_stored_bodies_nothing_names_are_swept_and_named_or_recent_ones_kept(tmp_path: Path) -> None:
    from hangar.kube import ApiException
    from hangar_operator.body_sweeper import BodySweeper
    from tests.unit.operator_rig import make_rig

    rig = await make_rig(tmp_path)
    rig.env()
    db = rig.ctx.db

    async def stored(tag: str) -> Body:
        return await stow(db, tag + " " + "b" * (2 * INLINE_MAX))

    prompt, steer, orphan = await stored("prompt"), await stored("steer"), await stored("orphan")
    await rig.session("s1", **prompt.fields("prompt"))
    await rig.reconcile("s1")
    await rig.kube.patch("turns", "s1-1", {"spec": {"steers": [{"id": "st1", **steer.fields()}]}})
    # Within the grace time nothing goes, named or not (the api stores a body just before the resource).
    assert await BodySweeper(rig.ctx, grace=3600).sweep() == 0
    assert await BodySweeper(rig.ctx, grace=0).sweep() == 1
    assert await db.get_body(orphan.ref.sha256 if orphan.ref else "") is None
    for kept in (prompt, steer):  # the session's prompt, the turn's message and its steer
        assert kept.ref is not None and await db.get_body(kept.ref.sha256) is not None
    # Storing a body again renews it: a sweep between that and the resource's write does not take it.
    again = await stored("orphan")
    assert await BodySweeper(rig.ctx, grace=60).sweep() == 0
    assert again.ref is not None and await db.get_body(again.ref.sha256) is not None
    # A listing that fails deletes nothing.
    rig.kube.fail_next("list", "turns", 500)
    with pytest.raises(ApiException):
        await BodySweeper(rig.ctx, grace=0).sweep()
    assert await db.get_body(again.ref.sha256) is not None


# --- the CLI holds the same limit ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["session", "steer", "s1", "-"],
        ["session", "new", "s1", "-", "-e", "dev"],
        ["session", "interrupt", "s1", "-"],
        ["job", "new", "-", "-e", "dev"],
        ["job", "follow-up", "j1", "-"],
    ],
)
def test_the_cli_reads_a_message_from_stdin_and_holds_it_to_the_limit_in_bytes(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    from hangar.cli.main import build_parser

    # More than one command-line argument can hold (128 KiB), within the limit: read from stdin, whole.
    text = full(MESSAGE_MAX)
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    a = build_parser().parse_args(argv)
    assert (getattr(a, "message", None) or getattr(a, "prompt", None)) == text
    monkeypatch.setattr("sys.stdin", io.StringIO(full(MESSAGE_MAX + 4)))
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert f"at most {MESSAGE_MAX} bytes (UTF-8)" in capsys.readouterr().err
