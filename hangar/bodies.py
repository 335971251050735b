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

from .models.limits import INLINE_MAX, MESSAGE_MAX, PREVIEW_MAX, BodyRef, utf8_len
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
