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

from .base import Model

INLINE_MAX = 4096  # bytes of a message body kept inside a resource
MESSAGE_MAX = 262144  # bytes of one message body (stored in the database beyond INLINE_MAX)
PREVIEW_MAX = 512  # bytes of the preview a resource keeps of a body stored in the database
STEERS_MAX = 50  # steers one turn takes
INTERRUPTS_MAX = 20  # interrupt requests one turn takes
TURN_REQUESTS_BYTES_MAX = 1048576  # bytes of all steer and interrupt bodies of one turn, wherever they live
MODEL_MAX = 256  # bytes of a model name
REASON_MAX = 2000  # bytes of a stop reason
RESULT_MAX = 65536  # bytes of a turn's structured result (JSON) kept in its status
ARTIFACTS_MAX = 100  # artifacts recorded in a turn's status
SUMMARY_MAX = 16384  # bytes of a turn's summary kept in its status (the full answer is in the activity)
# What a whole object may reach by these limits; tests/unit/test_limits.py builds the largest Turn, Session
# and Job the limits allow and checks each stays under it (etcd refuses objects over 1.5 MiB).
OBJECT_BUDGET = 524288


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def clip(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` bytes of UTF-8 on a character boundary (for what the agent
    or the driver reports, which hangar records rather than refuses)."""
    raw = text.encode("utf-8", "surrogatepass")
    return text if len(raw) <= max_bytes else raw[:max_bytes].decode("utf-8", "ignore")


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
