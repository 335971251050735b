"""``POST /api/governance/events``'s checks, in the spec's order, apart from HTTP and Kubernetes.

signature (401) → freshness (401) → the body is an event (400) → the header's id is the body's (400) →
replay (200 ``{"ignored": "duplicate event"}``). Each refusal carries its reason for the audit log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import events, signature

# Accepted ids are remembered this long (spec 002: a replay within 48 hours is a duplicate).
KEEP_IDS_SECONDS = 48 * 3600
DUPLICATE = {"ignored": "duplicate event"}


@dataclass(frozen=True)
class Verdict:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    event: events.Event | None = None
    # Why a request was refused (audited as governance.event_rejected); empty when accepted.
    reason: str = ""

    @property
    def accepted(self) -> bool:
        return self.event is not None and self.status == 200 and not self.body


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # Header names match in any case (HTTP says so; the spec repeats it).
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def refused(status: int, reason: str) -> Verdict:
    return Verdict(status, {"detail": reason}, reason=reason)


async def receive(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[bytes],
    now: float,
    accept_id: Callable[[str], Awaitable[bool]],
) -> Verdict:
    """The verdict on one delivery. ``accept_id`` records an id once (False: seen within 48 hours)."""
    try:
        signature.verify(_header(headers, signature.SIGNATURE_HEADER), body, secrets, now)
    except signature.SignatureRefused as e:
        return refused(401, e.reason)
    try:
        event = events.parse(body)
    except events.EventRefused as e:
        return refused(400, e.reason)
    claimed = _header(headers, signature.EVENT_ID_HEADER)
    if claimed is None:
        return refused(400, "missing X-AW-Event-Id")
    if claimed.strip() != event.id:
        return refused(400, f"X-AW-Event-Id {claimed.strip()[:200]!r} is not the body's id {event.id!r}")
    if not await accept_id(event.id):
        return Verdict(200, dict(DUPLICATE), event, reason="duplicate event")
    return Verdict(200, {}, event)
