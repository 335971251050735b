"""Tower's signed events (spec 002): every row of the refusal table and the ways a delivery goes wrong.

The fixture's events were signed by openssl (tests/fixtures/governance/make.sh), not by hangar's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangar.governance import events, signature, webhook

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "governance" / "tower_events.json"
SECRET = b"whsec-test-secret"
NOW = 1_800_000_000.0
STOP = {
    "id": "ev-1",
    "kind": "run.stop",
    "at": "2026-10-27T15:02:11.000Z",
    "run": {"session": "ses-77", "run": "run-5d1", "stopped_by": "lee@acme.test", "reason": "wrong repo"},
    "corr": {"source": "hangar", "job": "job-9", "session": "ses-77", "turn": 3},
}


class Seen:
    """The database's accept-once, in memory: enough for the pipeline's logic (the store has its own tests)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    async def accept(self, item: str) -> bool:
        if item in self.ids:
            return False
        self.ids.add(item)
        return True


def signed(body: bytes, t: float = NOW, secrets: tuple[bytes, ...] = (SECRET,), event_id: str | None = None):
    headers = {"X-AW-Signature": signature.header(list(secrets), int(t), body)}
    if event_id is not None:
        headers["X-AW-Event-Id"] = event_id
    return headers


async def deliver(headers: dict[str, str], body: bytes, seen: Seen | None = None, secrets=(SECRET,)):
    return await webhook.receive(headers, body, list(secrets), NOW, (seen or Seen()).accept)


def dumps(obj: object) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize("i", range(3))
async def test_events_signed_by_an_independent_implementation_verify(i: int) -> None:
    fx = json.loads(FIXTURE.read_text())
    ev = fx["events"][i]
    body = ev["body"].encode()
    headers = {"x-aw-signature": ev["signature"], "x-aw-event-id": ev["event_id"]}
    v = await webhook.receive(headers, body, [fx["secret"].encode()], ev["t"] + 10, Seen().accept)
    assert v.accepted, v
    assert v.event is not None and v.event.id == ev["event_id"]
    # One byte changed anywhere and it no longer verifies.
    tampered = body.replace(b"A-9", b"A-8") if b"A-9" in body else body.replace(b"wrong", b"right")
    v = await webhook.receive(headers, tampered, [fx["secret"].encode()], ev["t"], Seen().accept)
    assert (v.status, v.reason) == (401, "signature does not match")


async def test_a_good_delivery_is_accepted_once_then_a_duplicate() -> None:
    body, seen = dumps(STOP), Seen()
    first = await deliver(signed(body, event_id="ev-1"), body, seen)
    assert first.accepted and first.event is not None
    assert (
        first.event.session == "ses-77" and first.event.run and first.event.run.stopped_by == "lee@acme.test"
    )
    again = await deliver(signed(body, event_id="ev-1"), body, seen)
    assert (again.status, again.body) == (200, {"ignored": "duplicate event"}) and not again.accepted


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing signature"),
        ({"X-AW-Signature": ""}, "missing signature"),
        ({"X-AW-Signature": "garbage"}, "malformed signature header"),
        ({"X-AW-Signature": "t=abc,v1=00"}, "malformed signature timestamp"),
        ({"X-AW-Signature": "t=-5,v1=00"}, "malformed signature timestamp"),
        ({"X-AW-Signature": "t=1800000000,t=1800000000,v1=00"}, "malformed signature timestamp"),
        ({"X-AW-Signature": "v1=00"}, "signature has no timestamp"),
        ({"X-AW-Signature": "t=1800000000"}, "signature has no v1 MAC"),
        ({"X-AW-Signature": "t=1800000000,v1=" + "0" * 64}, "signature does not match"),
        ({"X-AW-Signature": "t=1800000000," + ",".join(["v1=00"] * 9)}, "too many signatures"),
        ({"X-AW-Signature": "t=1," + "v1=" + "a" * 5000}, "signature header too long"),
        ({"Authorization": "Bearer the-admin-token"}, "missing signature"),
    ],
)
async def test_signature_refusals_answer_401_with_the_reason(headers: dict[str, str], reason: str) -> None:
    body = dumps(STOP)
    v = await deliver({**headers, "X-AW-Event-Id": "ev-1"}, body)
    assert (v.status, v.reason) == (401, reason)
    assert v.event is None


async def test_wrong_secret_and_tampered_body_are_401() -> None:
    body = dumps(STOP)
    v = await deliver(signed(body, secrets=(b"another-secret",), event_id="ev-1"), body)
    assert (v.status, v.reason) == (401, "signature does not match")
    v = await deliver(signed(body, event_id="ev-1"), body + b" ")
    assert (v.status, v.reason) == (401, "signature does not match")
    # Re-serialised JSON (same meaning, other bytes) is another body: the MAC covers the exact bytes.
    v = await deliver(signed(body, event_id="ev-1"), json.dumps(STOP, indent=1).encode())
    assert v.status == 401


@pytest.mark.parametrize(("skew", "status"), [(-301, 401), (-300, 200), (0, 200), (300, 200), (301, 401)])
async def test_freshness_is_300_seconds_either_way(skew: int, status: int) -> None:
    body = dumps(STOP)
    v = await deliver(signed(body, t=NOW + skew, event_id="ev-1"), body)
    assert v.status == status
    if status == 401:
        assert ("old" if skew < 0 else "in the future") in v.reason and "301s" in v.reason


async def test_rotation_either_secret_and_either_mac_is_enough() -> None:
    body, old, new = dumps(STOP), b"old-secret", b"new-secret"
    both = signed(body, secrets=(old, new), event_id="ev-1")
    assert (await deliver(both, body, secrets=(new,))).accepted
    assert (await deliver(both, body, secrets=(old,))).accepted
    only_new = signed(body, secrets=(new,), event_id="ev-1")
    assert (await deliver(only_new, body, secrets=(old, new))).accepted
    assert (await deliver(only_new, body, secrets=(old,))).status == 401


@pytest.mark.parametrize("case", ["lower", "upper", "mixed"])
async def test_header_names_match_in_any_case(case: str) -> None:
    body = dumps(STOP)
    h = signed(body, event_id="ev-1")
    change = {"lower": str.lower, "upper": str.upper, "mixed": lambda s: s.swapcase()}[case]
    v = await deliver({change(k): val for k, val in h.items()}, body)
    assert v.accepted


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "body is not JSON"),
        (b"\xff\xfe", "body is not JSON"),
        (b"[]", "body is not a JSON object"),
        (b'{"id": "ev-1", "kind": "run.stop", "x": NaN}', "body is not JSON"),
        (dumps({**STOP, "kind": "run.start"}), "unknown event kind 'run.start'"),
        (dumps({**STOP, "kind": 7}), "unknown event kind 'int'"),
        (dumps({k: v for k, v in STOP.items() if k != "id"}), "id: Field required"),
        (dumps({**STOP, "id": ""}), "id: String should have at least 1 character"),
        (dumps({**STOP, "id": "ev 1"}), "id: String should match pattern"),
        (dumps({"id": "ev-1", "kind": "approval.decided"}), "approval.decided carries no approval"),
        (dumps({"id": "ev-1", "kind": "approval.created", "approval": {}}), "approval.id: Field required"),
        (dumps({"id": "ev-1", "kind": "run.stop", "run": {"run": "r"}}), "run.stop names no session or job"),
    ],
)
async def test_a_body_that_is_not_an_event_is_400(body: bytes, reason: str) -> None:
    v = await deliver(signed(body, event_id="ev-1"), body)
    assert v.status == 400 and v.reason.startswith(reason), v.reason


async def test_the_event_id_header_must_name_the_bodys_id() -> None:
    body = dumps(STOP)
    v = await deliver(signed(body, event_id="ev-2"), body)
    assert v.status == 400 and "is not the body's id 'ev-1'" in v.reason
    v = await deliver(signed(body), body)
    assert (v.status, v.reason) == (400, "missing X-AW-Event-Id")


async def test_a_refused_delivery_does_not_use_up_its_id() -> None:
    body, seen = dumps(STOP), Seen()
    assert (await deliver(signed(body, event_id="ev-2"), body, seen)).status == 400
    assert (await deliver(signed(body, t=NOW - 999, event_id="ev-1"), body, seen)).status == 401
    assert (await deliver(signed(body, event_id="ev-1"), body, seen)).accepted


def test_run_stop_names_its_session_from_run_or_corr_else_the_job() -> None:
    e = events.parse(dumps({"id": "e", "kind": "run.stop", "corr": {"session": "s1", "job": "j"}}))
    assert (e.session, e.job) == ("s1", "j")
    e = events.parse(
        dumps({"id": "e", "kind": "run.stop", "run": {"session": "s2"}, "corr": {"session": "s1"}})
    )
    assert e.session == "s2"
    e = events.parse(dumps({"id": "e", "kind": "run.stop", "run": {"job": "j2"}}))
    assert (e.session, e.job) == (None, "j2")


def test_unknown_fields_from_tower_are_ignored() -> None:
    e = events.parse(dumps({**STOP, "extra": {"x": 1}, "run": {**STOP["run"], "new": True}}))
    assert e.run is not None and e.run.reason == "wrong repo"
