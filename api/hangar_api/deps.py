"""What the REST routes share: the request's Kube and Database, the admin check, finding a session and its
turns, a page of events, the apiserver's reason for a refusal. Its own module so the route modules
(sessions, steering, approvals, jobs) import it and not each other."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response

from hangar.kube import ApiException, Kube
from hangar.models.base import NAME_MAX, NAME_PATTERN
from hangar.store import Database

from .auth import Caller, admin


def kube(request: Request) -> Kube:
    k: Kube = request.app.state.kube
    return k


def db(request: Request) -> Database:
    d: Database = request.app.state.db
    return d


Admin = Annotated[Caller, Depends(admin)]
KubeDep = Annotated[Kube, Depends(kube)]
DbDep = Annotated[Database, Depends(db)]


async def get_session(k: Kube, ref: str) -> dict[str, Any]:
    if not re.fullmatch(NAME_PATTERN, ref) or len(ref) > NAME_MAX:
        raise HTTPException(404, f"no session {ref!r}")
    s = await k.get("sessions", ref)
    if s is None or s["metadata"].get("deletionTimestamp"):
        raise HTTPException(404, f"no session {ref!r}")
    return s


async def session_turns(k: Kube, ref: str) -> list[dict[str, Any]]:
    return await k.list("turns", label_selector=f"hangar.dev/session={ref}")


async def events_page(d: Database, scope: str, since: int, limit: int, response: Response) -> dict[str, Any]:
    """One page of a session's or job's activity; ``X-Hangar-Last-Seq`` says where to read on from."""
    events = await d.events(scope, since, limit)
    last = events[-1].seq if events else since
    response.headers["X-Hangar-Last-Seq"] = str(last)
    return {"events": [e.dump() for e in events], "last_seq": last}


def reason(e: ApiException) -> str:
    """The apiserver's own words for a refusal (a CEL rule's message, a schema error)."""
    try:
        return str(json.loads(e.body or b"{}").get("message", e.reason))
    except Exception:
        return str(e.reason)
