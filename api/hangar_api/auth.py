"""Who is calling: bearer tokens mapped to a subject and a role.

Tokens come from ``HANGAR_API_TOKENS_FILE`` (YAML/JSON list of {token, subject, role}) and/or
``HANGAR_ADMIN_TOKEN``. Roles: ``admin`` (everything), ``jobs`` (the job routes, for the jobs whose
submitter is the token's subject; the session routes are admin only), ``mcp`` (the MCP tools at ``/mcp``,
on every session and job; refused by the REST routes). Who may use which MCP tool: ``hangar_api/mcp/auth.py``
and docs/mcp.md.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from fastapi import Depends, HTTPException, Request

Role = Literal["admin", "jobs", "mcp"]


@dataclass(frozen=True)
class Caller:
    subject: str
    role: Role

    @property
    def admin(self) -> bool:
        return self.role == "admin"


class Tokens:
    def __init__(self, entries: list[tuple[str, Caller]]) -> None:
        self._by_digest = {hashlib.sha256(t.encode()).digest(): c for t, c in entries}

    @classmethod
    def from_env(cls) -> Tokens:
        entries: list[tuple[str, Caller]] = []
        path = os.environ.get("HANGAR_API_TOKENS_FILE")
        if path and Path(path).exists():
            for e in yaml.safe_load(Path(path).read_text()) or []:
                entries.append((str(e["token"]), Caller(str(e["subject"]), e.get("role", "admin"))))
        admin = os.environ.get("HANGAR_ADMIN_TOKEN")
        if admin:
            entries.append((admin, Caller(os.environ.get("HANGAR_ADMIN_SUBJECT", "admin"), "admin")))
        return cls(entries)

    def lookup(self, token: str) -> Caller | None:
        digest = hashlib.sha256(token.encode()).digest()
        for known, caller in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return caller
        return None


def caller(request: Request) -> Caller:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    tokens: Tokens = request.app.state.tokens
    found = tokens.lookup(token.strip())
    if found is None:
        raise HTTPException(401, "unknown token", headers={"WWW-Authenticate": "Bearer"})
    return found


def admin(who: Caller = Depends(caller)) -> Caller:
    if not who.admin:
        raise HTTPException(403, f"{who.subject} is not an admin: the session routes are admin only")
    return who


def jobs_caller(who: Caller = Depends(caller)) -> Caller:
    """The job routes: admins, and ``jobs`` tokens (each for its own jobs: see :func:`owns`)."""
    if who.role not in ("admin", "jobs"):
        raise HTTPException(
            403, f"{who.subject} has a {who.role} token: the job routes take a jobs or admin token"
        )
    return who


def owns(who: Caller, submitter: str) -> bool:
    """May ``who`` see and act on a job submitted by ``submitter``? Admins: any; jobs tokens: their own."""
    return who.admin or (who.role == "jobs" and who.subject == submitter)
