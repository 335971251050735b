"""Message bodies kept out of resources: a body longer than ``INLINE_MAX`` bytes lives in the database
under its SHA-256, and the resource holds a preview and a ``BodyRef`` (``hangar.models.limits``).

The api stores a body when it writes the message into a resource (:func:`stow`); the operator reads it back
when it hands the message to the driver (:func:`resolve`). Both open the same database. A body is stored
by content, so a queued steer that starts the next turn carries the same reference without a second copy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .models.limits import (
    INLINE_MAX,
    INTERRUPTS_MAX,
    MESSAGE_MAX,
    PREVIEW_MAX,
    STEERS_MAX,
    TURN_REQUESTS_BYTES_MAX,
    BodyRef,
    utf8_len,
)
from .store import Database


class BodyMissing(LookupError):
    """A resource names a body the database does not hold (or holds altered)."""


@dataclass(frozen=True)
class Body:
    """A message as a resource holds it: the body itself, or a preview and the stored body's reference."""

    inline: str
    ref: BodyRef | None = None

    @property
    def size(self) -> int:
        return self.ref.size if self.ref else utf8_len(self.inline)

    def fields(self, name: str = "message") -> dict[str, Any]:
        """The resource fields: ``{name: …}`` and, for a stored body, ``{name + "Ref": {sha256, size}}``."""
        out: dict[str, Any] = {name: self.inline}
        if self.ref is not None:
            out[f"{name}Ref"] = self.ref.dump()
        return out

    @classmethod
    def of(cls, spec: dict[str, Any], name: str = "message") -> Body | None:
        """The body a resource's (or a request's) fields hold, or None when it has none."""
        inline = spec.get(name)
        if not isinstance(inline, str) or not inline:
            return None
        ref = spec.get(f"{name}Ref")
        return cls(inline, BodyRef.model_validate(ref) if isinstance(ref, dict) else None)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def preview(text: str, ref: BodyRef) -> str:
    """The start of a stored body, cut on a character boundary, and where the rest is."""
    head = text.encode("utf-8", "surrogatepass")[:PREVIEW_MAX].decode("utf-8", "ignore")
    return f"{head}… [{ref.size} bytes, stored as sha256:{ref.sha256[:12]}]"


async def stow(db: Database, text: str) -> Body:
    """The body as a resource is to hold it: inline when it is short, else stored and referenced."""
    size = utf8_len(text)
    if size > MESSAGE_MAX:
        raise ValueError(f"a message is at most {MESSAGE_MAX} bytes (UTF-8); this one is {size}")
    if size <= INLINE_MAX:
        return Body(text)
    ref = BodyRef(sha256=digest(text), size=size)
    await db.put_body(ref.sha256, text, size)
    return Body(preview(text, ref), ref)


async def resolve_or_none(db: Database, body: Body) -> str | None:
    """:func:`resolve`, or None when the stored body is gone."""
    try:
        return await resolve(db, body)
    except BodyMissing:
        return None


async def resolve(db: Database, body: Body) -> str:
    """The whole message: the inline text, or the stored body its reference names (checked)."""
    if body.ref is None:
        return body.inline
    text = await db.get_body(body.ref.sha256)
    if text is None or digest(text) != body.ref.sha256:
        raise BodyMissing(
            f"the message body sha256:{body.ref.sha256} is not in hangar's database: send the message again"
        )
    return text


def turn_room(turn: dict[str, Any], field: str, item: dict[str, Any]) -> tuple[int, str] | None:
    """Whether the Turn has room for one more request ``item`` in ``spec.<field>`` (``steers`` or
    ``interrupts``): None, or the HTTP status and the reason to refuse it with. 409 when the turn holds as
    many as it takes, 413 when the bodies of its steers and interrupts would pass the turn's byte budget.
    The last interrupt slot is kept for one without a message, so a turn can always be stopped."""
    spec = turn.get("spec") or {}
    name = (turn.get("metadata") or {}).get("name", "")
    body = Body.of(item)
    count = len(spec.get(field) or [])
    most = STEERS_MAX if field == "steers" else INTERRUPTS_MAX - (1 if body else 0)
    if count >= most:
        what = "steers" if field == "steers" else "interrupts with a message"
        return (
            409,
            f"turn {name!r} holds {count} {what}, the most one turn takes ({what} per turn: {most}): "
            "interrupt it (without a message) or wait for it to end, then send this as a new message; "
            "it starts a new turn",
        )
    if body is None:
        return None
    used = sum(b.size for f in ("steers", "interrupts") for x in spec.get(f) or [] if (b := Body.of(x)))
    if used + body.size > TURN_REQUESTS_BYTES_MAX:
        return (
            413,
            f"turn {name!r} holds {used} bytes of steers and interrupt messages; this one ({body.size} bytes) "
            f"would pass the turn's budget of {TURN_REQUESTS_BYTES_MAX} bytes: interrupt the turn or wait for "
            "it to end, then send this as a new message; it starts a new turn",
        )
    return None
