"""Who is calling: bearer tokens mapped to a subject and a role.

Tokens come from ``HANGAR_API_TOKENS_FILE`` (YAML/JSON list of {token, subject, role, expires?, revoked?};
every entry names its role, and the api refuses to start on one that doesn't) and/or ``HANGAR_ADMIN_TOKEN``.
Roles: ``admin`` (everything), ``jobs`` (the job routes, for the jobs whose submitter is the token's subject;
the session routes are admin only), ``mcp`` (the MCP tools at ``/mcp``, on every session and job; refused by
the REST routes). ``admin`` and ``jobs`` tokens are *login* tokens (a person's); an ``mcp`` token is the
mcp-only token ``hangar connect`` gives an MCP client, and what only a person may do (release a job) refuses
it. An entry past its ``expires`` or marked ``revoked`` is refused (401) with why. docs/jobs.md, "Tokens".
Besides the file's, the api knows the mcp-only tokens it minted itself (``hangar connect``,
``hangar_api/connect.py``): the database's, read again every few seconds (:meth:`Tokens.set_minted`).
Who may use which MCP tool: ``hangar_api/mcp/auth.py`` and docs/mcp.md.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime
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

    @property
    def kind(self) -> Literal["login", "mcp"]:
        """A person's login token (admin, jobs) or an MCP client's mcp-only token (``hangar connect``)."""
        return "mcp" if self.role == "mcp" else "login"


@dataclass(frozen=True)
class Validity:
    expires: datetime | None = None
    revoked: bool = False

    def refusal(self, now: datetime) -> str | None:
        if self.revoked:
            return "revoked token"
        if self.expires is not None and now >= self.expires:
            return f"expired token (it expired at {self.expires.isoformat()})"
        return None


class Tokens:
    def __init__(
        self, entries: list[tuple[str, Caller]], validity: dict[str, Validity] | None = None
    ) -> None:
        self._by_digest = {hashlib.sha256(t.encode()).digest(): c for t, c in entries}
        self._validity = {hashlib.sha256(t.encode()).digest(): v for t, v in (validity or {}).items()}
        self._minted: dict[bytes, tuple[Caller, Validity]] = {}

    def set_minted(self, minted: dict[bytes, tuple[Caller, Validity]]) -> None:
        """The minted tokens as the database has them now (by SHA-256), replacing those known before: a
        revoked or expired one is refused by its :class:`Validity`. A file's token of the same digest wins."""
        self._minted = {d: v for d, v in minted.items() if d not in self._by_digest}

    @classmethod
    def from_settings(cls, settings: Settings) -> Tokens:
        """The tokens file's entries and the admin token. Fails closed (:class:`SettingsError`): a file that
        is named but missing or unreadable, an entry without a token, a subject or a known role, a token
        given twice. The message names the entry (its place and subject), never the token."""
        entries: list[tuple[str, Caller]] = []
        validity: dict[str, Validity] = {}
        if settings.api_tokens_file is not None:
            for token, who, valid in _read_tokens_file(settings.api_tokens_file):
                entries.append((token, who))
                validity[token] = valid
        if settings.admin_token is not None:
            entries.append((settings.admin_token.get_secret_value(), Caller(settings.admin_subject, "admin")))
        seen: dict[str, str] = {}
        for token, who in entries:
            if token in seen:
                raise SettingsError(
                    f"HANGAR_API_TOKENS_FILE: {who.subject}'s token is also {seen[token]}'s: give each its own"
                )
            seen[token] = who.subject
        return cls(entries, validity)

    def lookup(self, token: str) -> Caller | None:
        """The token's caller; None for an unknown, expired or revoked one (fail closed)."""
        found, refusal = self.check(token)
        return found if refusal is None else None

    def check(self, token: str) -> tuple[Caller | None, str | None]:
        """The caller, and why the token is refused (None: it is good)."""
        digest = hashlib.sha256(token.encode()).digest()
        for known, caller in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                valid = self._validity.get(known)
                return caller, (valid.refusal(datetime.now(UTC)) if valid else None)
        minted = self._minted.get(digest)  # keyed by a digest, so a dict lookup leaks no timing of the token
        if minted is not None:
            return minted[0], minted[1].refusal(datetime.now(UTC))
        return None, "unknown token"


def _read_tokens_file(path: Path) -> list[tuple[str, Caller, Validity]]:
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
        unknown = set(e) - {"token", "subject", "role", "expires", "revoked"}
        if unknown:
            raise SettingsError(f"{entry}: unknown keys {', '.join(sorted(map(str, unknown)))}")
        out.append((e["token"], Caller(subject, role), _validity(entry, e)))
    return out


def _validity(entry: str, e: dict[str, Any]) -> Validity:
    expires = e.get("expires")
    when: datetime | None = None
    if isinstance(expires, datetime):
        when = expires
    elif isinstance(expires, str):
        try:
            when = datetime.fromisoformat(expires.replace("Z", "+00:00"))
        except ValueError:
            raise SettingsError(
                f"{entry}: expires must be an ISO 8601 time, e.g. 2027-01-31T00:00:00Z"
            ) from None
    elif expires is not None:
        raise SettingsError(f"{entry}: expires must be an ISO 8601 time, e.g. 2027-01-31T00:00:00Z")
    if when is not None and when.tzinfo is None:
        raise SettingsError(f"{entry}: expires needs a time zone (Z or +00:00)")
    revoked = e.get("revoked", False)
    if not isinstance(revoked, bool):
        raise SettingsError(f"{entry}: revoked must be true or false")
    return Validity(when, revoked)


BEARER = HTTPBearer(
    auto_error=False,
    description="A hangar API token (HANGAR_API_TOKENS_FILE or HANGAR_ADMIN_TOKEN): admin, jobs or mcp",
)


async def caller(request: Request, _: Any = Security(BEARER)) -> Caller:
    """The caller the guard authenticated before the body was read (``hangar_api/guard.py``); the
    ``Security`` parameter declares the bearer scheme in the OpenAPI document. ``async``, as every route
    dependency (``hangar_api/deps.py``): run on the loop, not on a worker thread."""
    found: Caller | None = request.scope.get("hangar.caller")
    if found is None:  # a route the guard does not cover: look the token up here, as it would
        scheme, _s, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        tokens: Tokens = request.app.state.tokens
        found, refusal = tokens.check(token.strip())
        if found is None or refusal is not None:
            raise HTTPException(401, refusal or "unknown token", headers={"WWW-Authenticate": "Bearer"})
    return found


async def admin(who: Caller = Depends(caller)) -> Caller:
    if not who.admin:
        raise HTTPException(403, f"{who.subject} is not an admin: the session routes are admin only")
    return who


MCP_ONLY = (
    "{who} has an mcp-only token (hangar connect): it works on /mcp only; the REST routes take a person's "
    "login token (admin or jobs)"
)


async def jobs_caller(who: Caller = Depends(caller)) -> Caller:
    """The job routes: admins, and ``jobs`` tokens (each for its own jobs: see :func:`owns`)."""
    if who.role not in ("admin", "jobs"):
        raise HTTPException(
            403, f"{who.subject} has a {who.role} token: the job routes take a jobs or admin token"
        )
    return who


def owns(who: Caller, submitter: str) -> bool:
    """May ``who`` see and act on a job submitted by ``submitter``? Admins: any; jobs tokens: their own."""
    return who.admin or (who.role == "jobs" and who.subject == submitter)
