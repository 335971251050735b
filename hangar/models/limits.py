"""Byte budgets: what keeps every hangar resource far below etcd's object limit, whatever clients send.

Limits are in bytes of UTF-8, the unit etcd and the apiserver count (a limit in characters lets 262,144
emoji through as ~1 MB). The same numbers hold in REST, MCP and the CLI (their request models use
:data:`MessageText`) and in the CRDs (:func:`text` puts a CEL rule on the field), and ``docs/limits.md``
lists them.

A message body (a prompt, a steer, an interrupt's message, a follow-up) of at most :data:`INLINE_MAX` bytes
is kept in the resource. A longer one (up to :data:`MESSAGE_MAX`) is stored in the database under its
SHA-256 (``hangar.bodies``): the resource keeps a short preview in the message field and a :class:`BodyRef`
next to it, and the operator reads the body back when it hands the message to the driver.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, JsonValue

# The numbers live in hangar.limits (no pydantic: the CLI imports them and starts fast); the same names here.
from ..limits import ARTIFACTS_MAX as ARTIFACTS_MAX
from ..limits import INLINE_MAX as INLINE_MAX
from ..limits import INTERRUPTS_MAX as INTERRUPTS_MAX
from ..limits import MESSAGE_MAX as MESSAGE_MAX
from ..limits import MODEL_MAX as MODEL_MAX
from ..limits import OBJECT_BUDGET as OBJECT_BUDGET
from ..limits import PREVIEW_MAX as PREVIEW_MAX
from ..limits import REASON_MAX as REASON_MAX
from ..limits import RESULT_MAX as RESULT_MAX
from ..limits import STEERS_MAX as STEERS_MAX
from ..limits import SUMMARY_MAX as SUMMARY_MAX
from ..limits import TURN_REQUESTS_BYTES_MAX as TURN_REQUESTS_BYTES_MAX
from ..limits import clip as clip
from ..limits import utf8_len as utf8_len
from .base import Model


def _within(max_bytes: int) -> Any:
    def check(value: str | None) -> str | None:
        if value is not None and utf8_len(value) > max_bytes:
            raise ValueError(f"at most {max_bytes} bytes (UTF-8); this is {utf8_len(value)}")
        return value

    return check


def byte_rule(max_bytes: int) -> dict[str, JsonValue]:
    """The CEL rule that holds a string field to ``max_bytes`` bytes of UTF-8 on the apiserver."""
    return {"rule": f"bytes(self).size() <= {max_bytes}", "message": f"at most {max_bytes} bytes (UTF-8)"}


def text(max_bytes: int, *, min_length: int = 0, description: str | None = None) -> Any:
    """A string field of at most ``max_bytes`` bytes: checked here and, by a CEL rule, on the apiserver.

    ``maxLength`` (characters) is the same number: a character is at least one byte, and it bounds the
    rule's cost for the apiserver's CEL estimator."""
    return Field(
        min_length=min_length or None,
        max_length=max_bytes,
        description=description,
        json_schema_extra={"x-kubernetes-validations": [dict(byte_rule(max_bytes))]},
    )


InlineText = Annotated[str, text(INLINE_MAX, min_length=1), AfterValidator(_within(INLINE_MAX))]
# A message as a client sends it (REST, MCP, the CLI): stored inline or in the database by its size.
MessageText = Annotated[
    str, Field(min_length=1, max_length=MESSAGE_MAX), AfterValidator(_within(MESSAGE_MAX))
]

ModelName = Annotated[str, Field(min_length=1, max_length=MODEL_MAX), AfterValidator(_within(MODEL_MAX))]


def bounded(max_bytes: int) -> Any:
    """The validator half of :func:`text` for Annotated fields: ``Annotated[str, text(n), bounded(n)]``."""
    return AfterValidator(_within(max_bytes))


class BodyRef(Model):
    """A message body stored in the database (``hangar.bodies``): its digest and size."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=1, le=MESSAGE_MAX, description="bytes (UTF-8)")
