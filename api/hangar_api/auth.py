"""Who is calling: bearer tokens mapped to a subject and a role.

Tokens come from ``HANGAR_API_TOKENS_FILE`` (YAML/JSON list of {token, subject, role}; every entry names
its role, and the api refuses to start on one that doesn't) and/or ``HANGAR_ADMIN_TOKEN``. Roles: ``admin``
(everything), ``jobs`` (the job routes, for the jobs whose submitter is the token's subject; the session
routes are admin only), ``mcp`` (the MCP tools at ``/mcp``, on every session and job; refused by the REST
routes). Who may use which MCP tool: ``hangar_api/mcp/auth.py``
and docs/mcp.md.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPBearer

from hangar.config import Settings, SettingsError

Role = Literal["admin", "jobs", "mcp"]
ROLES: tuple[str, ...] = get_args(Role)


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
    def from_settings(cls, settings: Settings) -> Tokens:
        """The tokens file's entries and the admin token. Fails closed (:class:`SettingsError`): a file that
        is named but missing or unreadable, an entry without a token, a subject or a known role, a token
        given twice. The message names the entry (its place and subject), never the token."""
        entries: list[tuple[str, Caller]] = []
        if settings.api_tokens_file is not None:
            entries += _read_tokens_file(settings.api_tokens_file)
        if settings.admin_token is not None:
            entries.append((settings.admin_token.get_secret_value(), Caller(settings.admin_subject, "admin")))
        seen: dict[str, str] = {}
        for token, who in entries:
            if token in seen:
                raise SettingsError(
                    f"HANGAR_API_TOKENS_FILE: {who.subject}'s token is also {seen[token]}'s: give each its own"
                )
            seen[token] = who.subject
        return cls(entries)

    def lookup(self, token: str) -> Caller | None:
        digest = hashlib.sha256(token.encode()).digest()
        for known, caller in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return caller
        return None


def _read_tokens_file(path: Path) -> list[tuple[str, Caller]]:
    where = f"HANGAR_API_TOKENS_FILE ({path})"
    try:
        data: Any = yaml.safe_load(path.read_text())
    except OSError as err:
        raise SettingsError(f"{where}: can't read it: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise SettingsError(f"{where}: not YAML or JSON: {err}") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise SettingsError(f"{where}: must be a list of {{token, subject, role}}")
    out = []
    for i, e in enumerate(data, 1):
        subject = e.get("subject") if isinstance(e, dict) else None
        entry = f"{where}: entry {i}" + (f" (subject {subject!r})" if isinstance(subject, str) else "")
        if not isinstance(e, dict):
            raise SettingsError(f"{entry}: must be a mapping {{token, subject, role}}")
        if not isinstance(e.get("token"), str) or not e["token"]:
            raise SettingsError(f"{entry}: has no token")
        if not isinstance(subject, str) or not subject:
            raise SettingsError(f"{entry}: has no subject")
        role = e.get("role")
        if role is None:
            raise SettingsError(f"{entry}: has no role: give one of {', '.join(ROLES)}")
        if role not in ROLES:
            raise SettingsError(f"{entry}: unknown role {role!r}: the roles are {', '.join(ROLES)}")
        unknown = set(e) - {"token", "subject", "role"}
        if unknown:
            raise SettingsError(f"{entry}: unknown keys {', '.join(sorted(map(str, unknown)))}")
        out.append((e["token"], Caller(subject, role)))
    return out


BEARER = HTTPBearer(
    auto_error=False,
    description="A hangar API token (HANGAR_API_TOKENS_FILE or HANGAR_ADMIN_TOKEN): admin, jobs or mcp",
)


def caller(request: Request, _: Any = Security(BEARER)) -> Caller:
    """The caller the guard authenticated before the body was read (``hangar_api/guard.py``); the
    ``Security`` parameter declares the bearer scheme in the OpenAPI document."""
    found: Caller | None = request.scope.get("hangar.caller")
    if found is None:  # a route the guard does not cover: look the token up here, as it would
        scheme, _s, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
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
