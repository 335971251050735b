"""What the REST routes share: the request's Kube and Database, the admin check, finding a session and its
turns, a page of events, the apiserver's reason for a refusal. Its own module so the route modules
(sessions, steering, approvals, jobs) import it and not each other."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response

from hangar.kube import ApiException, Kube
from hangar.store import Database

from . import names
from .auth import Caller, admin
from .errors import apiserver_reason


# Every dependency of a route is ``async def``, however little it does: FastAPI runs a plain ``def`` one on a
# worker thread, a thread hop each way per dependency and request (a session's create had five before its
# apiserver write: ~0.6 ms quiet, several ms under load). tests/unit/test_api_request_path.py holds it.
async def kube(request: Request) -> Kube:
    k: Kube = request.app.state.kube
    return k


async def db(request: Request) -> Database:
    d: Database = request.app.state.db
    return d


Admin = Annotated[Caller, Depends(admin)]
KubeDep = Annotated[Kube, Depends(kube)]
DbDep = Annotated[Database, Depends(db)]


async def get_session(k: Kube, ref: str) -> dict[str, Any]:
    names.check_path("session", ref)
    s = await k.get("sessions", ref)
    if s is None or s["metadata"].get("deletionTimestamp"):
        raise HTTPException(404, f"no session {names.shown(ref)}")
    return s


async def session_turns(k: Kube, ref: str) -> list[dict[str, Any]]:
    return await k.list("turns", label_selector=f"hangar.dev/session={ref}")


async def events_page(d: Database, scope: str, since: int, limit: int, response: Response) -> dict[str, Any]:
    """One page of a session's or job's activity; ``X-Hangar-Last-Seq`` says where to read on from."""
    events = await d.events(scope, since, limit)
    last = events[-1].seq if events else since
    response.headers["X-Hangar-Last-Seq"] = str(last)
    # The event's own keys win over its payload's (a driver's payload is the sandbox's to fill).
    page = [{**e.dump(), "seq": e.seq, "turn": e.turn, "kind": e.kind, "at": e.at} for e in events]
    return {"events": page, "last_seq": last}


def reason(e: ApiException) -> str:
    """The apiserver's own words for a refusal (a CEL rule's message, a schema error)."""
    return apiserver_reason(e)


# ``?since=``: a sequence number; the store's columns are 64-bit.
SEQ_MAX = 2**63 - 1
# A turn's index in a URL: more than any session runs, few enough digits to stay a valid name.
TURN_MAX = 10**6
