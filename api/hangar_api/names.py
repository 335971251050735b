"""The one check of every name a request refers to: sessions, jobs, turns, approvals, steers and
environments are DNS labels, checked before any apiserver call.

Why before: a name goes into the apiserver's URL path, so ``.`` reads the whole list, ``default/`` reaches
another path and ``%`` breaks the client. A name in a URL path that is not a valid name answers 404 (nothing
of that name can exist); one in a body answers 422 with the reason (the pydantic types below, built from the
same patterns).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import HTTPException, Path
from pydantic import Field

from hangar.models.base import NAME_MAX, NAME_PATTERN
from hangar.models.job import JOB_NAME_MAX

# RFC 1123 label: what an Environment, an Approval or any object hangar names itself is called.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MAX = 63
# Steer and interrupt ids (st-<hex>, in-<hex>).
ITEM_ID = r"^[a-z0-9][-a-z0-9]{0,63}$"

# kind -> (pattern, longest)
KINDS: dict[str, tuple[str, int]] = {
    "session": (NAME_PATTERN, NAME_MAX),
    "job": (NAME_PATTERN, JOB_NAME_MAX),
    "approval": (DNS_LABEL, DNS_LABEL_MAX),
    "environment": (DNS_LABEL, DNS_LABEL_MAX),
    "steer": (ITEM_ID, 64),
}
EXAMPLES = {"environment": ["default"], "session": ["demo"], "job": ["demo-job"]}
_COMPILED = {kind: (re.compile(p), n) for kind, (p, n) in KINDS.items()}
SHOWN_MAX = 64


def shown(value: str) -> str:
    """A name as an answer may quote it: a short prefix, never the whole of a long input."""
    text = value if len(value) <= SHOWN_MAX else value[:SHOWN_MAX] + "…"
    return repr(text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace"))


def valid(kind: str, value: str) -> bool:
    pattern, longest = _COMPILED[kind]
    return len(value) <= longest and pattern.fullmatch(value) is not None


def why_not(kind: str, value: str) -> str:
    """Why ``value`` is not a ``kind`` name, in words."""
    pattern, longest = KINDS[kind]
    return (
        f"{kind} name {shown(value)} is not valid: at most {longest} characters, lowercase letters, digits "
        f"and '-' ({pattern})"
    )


def check_path(kind: str, value: str, missing: str | None = None) -> str:
    """``value``, a name from a URL path; 404 (``missing``, or "no <kind> <name>") when it can't be one."""
    if not valid(kind, value):
        raise HTTPException(404, missing or f"no {kind} {shown(value)}")
    return value


def check_body(kind: str, value: str) -> str:
    """``value``, a name from a request body or query; 422 with the reason when it can't be one."""
    if not valid(kind, value):
        raise HTTPException(422, why_not(kind, value))
    return value


def body_field(kind: str, description: str = "") -> Any:
    """The pydantic ``Field`` of a ``kind`` name in a request body (422 on anything else)."""
    pattern, longest = KINDS[kind]
    return Field(
        min_length=1,
        max_length=longest,
        pattern=pattern,
        description=description,
        examples=EXAMPLES.get(kind),
    )


EnvironmentName = Annotated[str, body_field("environment", "An Environment's name (a DNS label)")]


# Path parameters: described, with an example (the fuzzer's examples phase and /docs use them); no pattern
# here, so a name that can't be one is the route's 404, not a validation 422.
SessionRef = Annotated[str, Path(description="A session's name", examples=["demo"])]
JobId = Annotated[str, Path(description="A job's id (its name)", examples=["demo-job"])]
ApprovalId = Annotated[str, Path(description="An approval's id (ap-<12 hex>)", examples=["ap-0123456789ab"])]
SteerId = Annotated[
    str, Path(description="A steer's or interrupt's id (st-…, in-…)", examples=["st-0123456789ab"])
]
