"""What every MCP tool shares: the app's kube client and database, the REST layer's refusals turned into
tool errors, and resolving a ``ref`` (a job id or a session name) the caller may use."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import HTTPException
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from hangar.kube import Kube, Obj
from hangar.models.base import NAME_MAX, NAME_PATTERN
from hangar.store import Database

from .. import deps, job_attempts
from ..auth import Caller
from .auth import acting, may_use_sessions

_KIND = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not found",
    409: "refused",
    422: "invalid",
}


@dataclass
class Hub:
    """The running app's state (set by its lifespan): the tools read it per call."""

    state: Any

    @property
    def kube(self) -> Kube:
        k: Kube = self.state.kube
        return k

    @property
    def db(self) -> Database:
        d: Database = self.state.db
        return d

    @property
    def turns(self) -> Any:
        return self.state.turns


def tool_error(e: HTTPException) -> ToolError:
    return ToolError(f"{_KIND.get(e.status_code, 'error')}: {e.detail}")


def invalid_text(e: ValidationError) -> str:
    """``invalid: <field>: <why>; …``: which input, and the rule it broke (the pattern, the bound)."""
    parts = []
    for err in e.errors(include_url=False):
        where = ".".join(str(x) for x in err.get("loc", ())) or "input"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid: " + "; ".join(parts)


@contextmanager
def refusals() -> Iterator[None]:
    """A REST refusal (404, 409, 422, …) becomes the tool's error (``isError``) with the same reason; so
    does a REST body that doesn't validate (the tool's own schema lets less through, but fail closed)."""
    try:
        yield
    except HTTPException as e:
        raise tool_error(e) from None
    except ValidationError as e:
        raise ToolError(invalid_text(e)) from None


@dataclass
class Target:
    """What a ``ref`` names: a session, or a job with its attempt sessions."""

    kind: Literal["session", "job"]
    name: str
    obj: Obj

    @property
    def where(self) -> str:
        return f"{self.kind} {self.name!r}"


def sessions_only(who: Caller, what: str) -> None:
    if not may_use_sessions(who):
        raise ToolError(
            f"forbidden: {who.subject} has a {who.role} token: {what} is for admin and mcp tokens; "
            "use the job tools (get_job, follow_up_job) on your jobs"
        )


async def get_session(hub: Hub, who: Caller, name: str) -> Obj:
    sessions_only(who, "a session")
    with refusals():
        return await deps.get_session(hub.kube, name)


async def get_job(hub: Hub, who: Caller, job_id: str) -> Obj:
    """The job to read (the get_job tool, the job resources, a subscription): its repository's policy
    approvers may too. What acts on a job finds it through :func:`resolve` or the REST functions."""
    with refusals():
        return await job_attempts.get_job(hub.kube, acting(who), job_id, read=True)


async def resolve(hub: Hub, who: Caller, ref: str) -> Target:
    """A job id first (if the caller may see that job), else a session name (admin and mcp tokens). A jobs
    token is told "no job" for anything but its own jobs, as over REST."""
    if who.role == "jobs":
        with refusals():  # to act on: its submitter's only, never widened for an approver
            return Target("job", ref, await job_attempts.get_job(hub.kube, who, ref))
    if re.fullmatch(NAME_PATTERN, ref) and len(ref) <= NAME_MAX:
        j = await hub.kube.get("jobs", ref)
        if j is not None and not j["metadata"].get("deletionTimestamp"):
            return Target("job", ref, j)
        s = await hub.kube.get("sessions", ref)
        if s is not None and not s["metadata"].get("deletionTimestamp"):
            return Target("session", ref, s)
    raise ToolError(f"not found: no job or session {ref!r}")
