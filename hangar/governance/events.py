"""The events Tower pushes (spec 002): their shape, checked before anything acts on them.

An approval event is a hint: hangar re-reads the decision from Tower and acts on that answer only, so of its
payload only ``approval.id`` (and ``decided_by``, for display) is read. A ``run.stop`` names the run by
``run.session`` or ``corr.session``, else ``run.job`` or ``corr.job``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

APPROVAL_KINDS = ("approval.created", "approval.decided")
KINDS = (*APPROVAL_KINDS, "run.stop")
MAX_BODY = 64 * 1024

Id = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
Text = Annotated[str, StringConstraints(max_length=2000)]


class EventRefused(Exception):
    """The body is not an event hangar can read: answered 400."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Part(BaseModel):
    # Tower may add fields; hangar reads the ones it names and ignores the rest.
    model_config = ConfigDict(extra="ignore")


class ApprovalRef(_Part):
    id: Id
    decided_by: Text | None = None


class Corr(_Part):
    source: Text | None = None
    session: Id | None = None
    job: Id | None = None
    turn: int | Text | None = None


class RunRef(_Part):
    session: Id | None = None
    job: Id | None = None
    run: Id | None = None
    stopped_by: Text | None = None
    reason: Text | None = None


class Event(_Part):
    id: Id
    kind: Literal["approval.created", "approval.decided", "run.stop"]
    at: Text | None = None
    approval: ApprovalRef | None = None
    run: RunRef | None = None
    corr: Corr = Field(default_factory=Corr)

    @property
    def session(self) -> str | None:
        return (self.run.session if self.run else None) or self.corr.session

    @property
    def job(self) -> str | None:
        return (self.run.job if self.run else None) or self.corr.job


def _no_constants(value: str) -> Any:
    raise ValueError(f"{value} is not JSON")


def parse(body: bytes) -> Event:
    """The event in ``body``; :class:`EventRefused` with the reason when it is not one."""
    try:
        raw = json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError) as e:
        raise EventRefused(f"body is not JSON: {str(e)[:200]}") from None
    if not isinstance(raw, dict):
        raise EventRefused("body is not a JSON object")
    kind = raw.get("kind")
    if kind not in KINDS:
        shown = str(kind)[:60] if isinstance(kind, str) else type(kind).__name__
        raise EventRefused(f"unknown event kind {shown!r}: hangar reads {', '.join(KINDS)}")
    try:
        event = Event.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise EventRefused(f"{where}: {first['msg']}") from None
    if event.kind in APPROVAL_KINDS and event.approval is None:
        raise EventRefused(f"{event.kind} carries no approval")
    if event.kind == "run.stop" and not (event.session or event.job):
        raise EventRefused("run.stop names no session or job (run.session, corr.session, run.job, corr.job)")
    return event
