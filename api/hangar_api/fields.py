"""The request-body field types the routes share. Strings that end up stored (in a resource, in etcd) are
limited in bytes of UTF-8, not characters: 262,144 emoji are ~1 MiB (docs/limits.md)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from hangar.models.limits import MESSAGE_MAX, MODEL_MAX, bounded

from .names import EnvironmentName

__all__ = [
    "MESSAGE_MAX",
    "MODEL_MAX",
    "EnvironmentName",
    "MessageText",
    "ModelId",
    "RequestBody",
    "WholeNumber",
]

MessageText = Annotated[
    str,
    Field(min_length=1, max_length=MESSAGE_MAX, description=f"At most {MESSAGE_MAX} bytes in UTF-8"),
    bounded(MESSAGE_MAX),
]
ModelId = Annotated[
    str,
    Field(
        min_length=1, max_length=MODEL_MAX, description=f"The model id, at most {MODEL_MAX} bytes in UTF-8"
    ),
    bounded(MODEL_MAX),
]


class RequestBody(BaseModel):
    """A REST request body: exactly its schema. A field it does not have is refused, naming it (a misspelt
    ``mesage`` is not dropped in silence), and a value of another JSON type is not coerced (``"tainted": 0``,
    ``"attempts": "2"``): the document's ``additionalProperties: false`` and types are what is checked."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _integral(value: Any) -> Any:
    # JSON Schema's "integer" is any number with no fraction: 2.0 is one, "2" and true are not (those stay
    # for strict validation to refuse).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WholeNumber = Annotated[int, BeforeValidator(_integral)]
"""A request body's integer, as JSON Schema reads one (``2`` or ``2.0``; not ``"2"``, ``2.5`` nor ``true``)."""
