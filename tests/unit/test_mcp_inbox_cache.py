"""``hangar://inbox`` read from the API's watch-fed caches says what it says read from the apiserver, for every
kind of item and every kind of token, and lists nothing while the caches can answer; a cache that can't
(not listed, its watch broken) is passed by for a listing of that resource."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hangar.kube import Obj
from hangar.models import API_VERSION
from hangar.testing.fake_kube import FakeKube
from hangar_api.auth import Caller
from hangar_api.mcp import inbox
from hangar_api.mcp.common import Hub
from hangar_api.watch_cache import ApiCache

PLURALS = ("jobs", "sessions", "approvals", "turns")
CALLERS = [Caller("root", "admin"), Caller("alice", "jobs"), Caller("bob", "jobs"), Caller("cli", "mcp")]


class ListingKube(FakeKube):
    """The fake apiserver, counting its listings."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[str] = []

    async def list(self, plural: str, label_selector: str | None = None) -> list[Obj]:
        self.listed.append(plural)
        return await super().list(plural, label_selector)


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None, **meta: Any) -> Obj:
    body: Obj = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}
    if status is not None:
        body["status"] = status
    return body


def job(name: str, submitter: str, status: dict[str, Any]) -> Obj:
    return obj("Job", name, {"submitter": submitter, "prompt": "p", "environment": "dev"}, status)


def session(name: str, job: str | None = None) -> Obj:
    labels = {"hangar.dev/job": job} if job else {}
    return obj("Session", name, {"environment": "dev"}, {"phase": "Idle"}, labels=labels)


def turn(sess: str, index: int, status: dict[str, Any]) -> Obj:
    spec = {"session": sess, "index": index, "message": "m"}
    return obj("Turn", f"{sess}-{index}", spec, status, labels={"hangar.dev/session": sess})


def approval(name: str, sess: str, status: dict[str, Any] | None, decision: str | None = None) -> Obj:
    spec: dict[str, Any] = {"session": sess, "turn": f"{sess}-1", "requestId": name, "tool": "Bash"}
    spec |= {"command": f"echo {name}", "argsHash": "h", "policy": "ask"}
    if decision:
        spec |= {"decision": decision, "decidedBy": "root"}
    return obj("Approval", name, spec, status, labels={"hangar.dev/session": sess})


def seeded() -> ListingKube:
    k = ListingKube()
    for body in [
        job(
            "j-asks",
            "alice",
            {"state": "needs_input", "question": "which?", "finishedAt": "2026-12-02T06:00:03Z"},
        ),
        job("j-failed", "alice", {"state": "failed", "reason": "Broke", "message": "it broke"}),
        job(
            "j-pr",
            "bob",
            {
                "state": "done",
                "delivery": {"attempt": 1, "stage": "done", "prUrl": "https://github.com/o/r/pull/7"},
            },
        ),
        job("j-done", "bob", {"state": "done"}),
        job("j-runs", "alice", {"state": "running"}),
    ]:
        k.seed("jobs", body)
    for body in [session("s-asks"), session("s-old-q"), session("s-busy"), session("j-asks-a1", "j-asks")]:
        k.seed("sessions", body)
    for body in [
        turn("s-asks", 1, {"phase": "Completed"}),
        turn(
            "s-asks", 2, {"phase": "NeedsInput", "question": "go on?", "finishedAt": "2026-12-02T06:00:01Z"}
        ),
        turn("s-old-q", 1, {"phase": "NeedsInput", "question": "stale"}),
        turn("s-old-q", 2, {"phase": "Running"}),
        turn("s-busy", 1, {"phase": "NeedsInput"}),
        turn("j-asks-a1", 1, {"phase": "NeedsInput", "question": "the job's"}),
    ]:
        k.seed("turns", body)
    pending = {"phase": "Pending", "requestedAt": "2026-12-02T06:00:02Z"}
    for body in [
        approval("ap-s", "s-busy", pending),
        approval("ap-j", "j-asks-a1", pending),
        approval("ap-done", "s-busy", {"phase": "Allowed"}, decision="allow"),
        approval("ap-decided", "s-asks", pending, decision="deny"),
        approval("ap-by-hand", "s-asks", None),
    ]:
        k.seed("approvals", body)
    return k


async def prime(cache: ApiCache, k: FakeKube, plurals: tuple[str, ...] = PLURALS) -> None:
    """The caches listed (as their streams would at start) and watching."""
    for plural in plurals:
        cache.feed(plural).listed(*await k.list_at(plural))
        cache.feed(plural).cache.watching = True


async def test_the_cached_inbox_is_the_listed_one_for_every_token(tmp_path: Path) -> None:
    k = seeded()
    listed = {who: await inbox.read(Hub(SimpleNamespace(kube=k)), who) for who in CALLERS}
    assert sorted(set(k.listed)) == sorted(PLURALS)
    admin = listed[CALLERS[0]]
    assert [(i["kind"], i["ref"]) for i in admin["items"]] == [
        ("question", "s-asks"),  # the session's latest turn asks; s-old-q's question was answered
        ("approval", "j-asks"),  # an attempt's approval is the job's
        ("approval", "s-busy"),
        ("question", "j-asks"),
        # No finish time: since its creation (the seeding's, the same second or later than the above).
        ("failed_job", "j-failed"),
        ("review", "j-pr"),
        ("question", "s-busy"),
    ], admin
    assert admin["counts"] == {"question": 3, "approval": 2, "failed_job": 1, "review": 1}
    assert listed[CALLERS[3]] == admin, "an mcp token sees every session and job, as an admin's does"
    assert {i["ref"] for i in listed[CALLERS[1]]["items"]} == {"j-asks", "j-failed"}
    assert [i["ref"] for i in listed[CALLERS[2]]["items"]] == ["j-pr"]

    cache = ApiCache(k)
    await prime(cache, k)
    k.listed.clear()
    state = SimpleNamespace(kube=k, api_cache=cache)
    for who in CALLERS:
        assert await inbox.read(Hub(state), who) == listed[who], who
    assert k.listed == [], "the inbox listed what its caches hold"


@pytest.mark.parametrize("broken", PLURALS)
async def test_a_cache_that_cannot_say_is_listed_and_the_rest_are_read(tmp_path: Path, broken: str) -> None:
    k = seeded()
    cache = ApiCache(k)
    await prime(cache, k)
    cache.feed(broken).cache.watching = False  # its watch broke: what it holds may be stale
    k.set_status("turns", "s-busy-1", {"phase": "Completed"})
    k.set_status("approvals", "ap-s", {"phase": "Expired"})
    k.set_status("jobs", "j-failed", {"state": "running"})
    k.listed.clear()
    box = await inbox.read(Hub(SimpleNamespace(kube=k, api_cache=cache)), Caller("root", "admin"))
    assert k.listed == [broken]
    refs = {(i["kind"], i["ref"]) for i in box["items"]}
    # What changed shows only where it was listed; the held caches are as their (paused) streams left them.
    assert (("question", "s-busy") in refs) == (broken != "turns")
    assert (("approval", "s-busy") in refs) == (broken != "approvals")
    assert (("failed_job", "j-failed") in refs) == (broken != "jobs")


async def test_a_change_the_stream_applies_is_in_the_next_read(tmp_path: Path) -> None:
    k = seeded()
    cache = ApiCache(k)
    await prime(cache, k)
    hub = Hub(SimpleNamespace(kube=k, api_cache=cache))
    answered = k.set_status("turns", "s-asks-2", {"phase": "Completed"})
    cache.feed("turns").event("MODIFIED", answered)
    cache.feed("sessions").event("DELETED", k.peek("sessions", "s-busy") or {})
    box = await inbox.read(hub, Caller("root", "admin"))
    # s-asks was answered; s-busy is gone (its approval stays, as a listing shows it: its Approval is there).
    assert {(i["kind"], i["ref"]) for i in box["items"]} == {
        ("approval", "s-busy"),
        ("approval", "j-asks"),
        ("question", "j-asks"),
        ("failed_job", "j-failed"),
        ("review", "j-pr"),
    }
    assert k.listed == []
