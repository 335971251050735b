"""Tower's webhook signature: ``X-AW-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>``.

The MAC covers the exact bytes received. More than one ``v1=`` may be sent (Tower signs with the old and the
new secret while one rotates), and hangar may hold more than one secret for the same reason: any pair that
matches is enough. Comparison is constant-time; ``t`` must be within ``TOLERANCE`` seconds of hangar's
clock, either way.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

TOLERANCE = 300
SIGNATURE_HEADER = "x-aw-signature"
EVENT_ID_HEADER = "x-aw-event-id"
# A header longer than this is not a signature: refused before any parsing or MAC work.
MAX_HEADER = 4096
MAX_SIGNATURES = 8


class SignatureRefused(Exception):
    """The request is not signed by Tower with a secret hangar holds, or not now: answered 401."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Signature:
    timestamp: int
    macs: tuple[str, ...]


def parse(header: str | None) -> Signature:
    if not header:
        raise SignatureRefused("missing signature")
    if len(header) > MAX_HEADER:
        raise SignatureRefused("signature header too long")
    t: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureRefused("malformed signature header")
        if key == "t":
            if t is not None or not value.isascii() or not value.isdigit() or len(value) > 12:
                raise SignatureRefused("malformed signature timestamp")
            t = int(value)
        elif key == "v1":
            macs.append(value.lower())
        # Other schemes (v0, a future v2) are not ours to check: they neither help nor hurt.
    if t is None:
        raise SignatureRefused("signature has no timestamp")
    if not macs:
        raise SignatureRefused("signature has no v1 MAC")
    if len(macs) > MAX_SIGNATURES:
        raise SignatureRefused("too many signatures")
    return Signature(t, tuple(macs))


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The hex MAC Tower sends as ``v1`` (also what hangar's Tower simulator signs with)."""
    return hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def header(secrets: Sequence[bytes], timestamp: int, body: bytes) -> str:
    return ",".join([f"t={timestamp}", *(f"v1={sign(s, timestamp, body)}" for s in secrets)])


def verify(header_value: str | None, body: bytes, secrets: Sequence[bytes], now: float) -> Signature:
    """Checks the signature, then its freshness; raises :class:`SignatureRefused` with the reason."""
    sig = parse(header_value)
    if not secrets:
        raise SignatureRefused("no webhook secret is configured")
    matched = False
    for secret in secrets:
        want = sign(secret, sig.timestamp, body)
        for mac in sig.macs:
            # Every pair is compared (no early exit) so timing says nothing about which one matched.
            matched |= hmac.compare_digest(want, mac)
    if not matched:
        raise SignatureRefused("signature does not match")
    skew = sig.timestamp - now
    if skew > TOLERANCE:
        raise SignatureRefused(f"signature timestamp is {skew:.0f}s in the future (limit {TOLERANCE}s)")
    if -skew > TOLERANCE:
        raise SignatureRefused(f"signature timestamp is {-skew:.0f}s old (limit {TOLERANCE}s)")
    return sig
