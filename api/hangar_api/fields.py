"""The request-body field types the routes share. Strings that end up stored (in a resource, in etcd) are
limited in bytes of UTF-8, not characters: 262,144 emoji are ~1 MiB (docs/limits.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from hangar.models.limits import MESSAGE_MAX, MODEL_MAX, bounded

from .names import EnvironmentName

__all__ = ["MESSAGE_MAX", "MODEL_MAX", "EnvironmentName", "MessageText", "ModelId"]

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
