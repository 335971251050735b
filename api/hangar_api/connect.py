"""``hangar connect``: mint an **mcp-only** token for an MCP client (what an IDE is given), list them, revoke
one. ``POST /api/tokens``, ``GET /api/tokens``, ``DELETE /api/tokens/{id}``.

Only an admin's login token mints: an ``mcp`` token reaches every session and job through the MCP tools
(``mcp.auth.acting``), so letting a ``jobs`` token mint one would widen that person's reach. The token is
``hgm_`` and 43 random characters, shown once; the database keeps its SHA-256 (``hangar.store.minted``), its
subject (the admin who minted it: every audit entry names them), an expiry (1 to 365 days, 30 by default) and
when it was revoked. Every api replica reads the minted tokens again every ``REFRESH_SECONDS``, and at once
when it meets an ``hgm_`` token it doesn't know, so a token works everywhere as soon as it is made and a
revocation holds everywhere within ``REFRESH_SECONDS``. docs/jobs.md, "Tokens".
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from pydantic import BaseModel, Field

from hangar.store import minted as M

from .auth import Caller, caller
from .deps import DbDep
from .fields import RequestBody, WholeNumber
from .minted_tokens import PREFIX, refresh
from .routing import Route

router = APIRouter(prefix="/api/tokens", tags=["tokens"], route_class=Route)

DAYS_DEFAULT, DAYS_MAX = 30, 365
TOKEN_ID = r"^tok-[0-9a-f]{10}$"
MINTS_ONLY_ADMIN = (
    "{who} has a {role} token: only an admin's login token may mint an mcp-only token (hangar connect), "
    "since it reaches every session and job over MCP"
)


class NewToken(RequestBody):
    name: str = Field(default="", max_length=100, description="What it is for, e.g. carol's laptop IDE")
    expires_in_days: WholeNumber = Field(default=DAYS_DEFAULT, ge=1, le=DAYS_MAX)


class TokenView(BaseModel):
    id: str
    subject: str = Field(description="Who acts with it: the admin who minted it")
    role: str = Field(description="Always mcp: the token works on /mcp only")
    name: str
    created_by: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None


class MintedAnswer(TokenView):
    token: str = Field(description="The token itself: shown in this answer only")


class TokenList(BaseModel):
    tokens: list[TokenView]


async def _login_admin(who: Caller = Depends(caller)) -> Caller:
    if not who.admin:
        raise HTTPException(403, MINTS_ONLY_ADMIN.format(who=who.subject, role=who.role))
    return who


LoginAdmin = Annotated[Caller, Depends(_login_admin)]
TokenId = Annotated[str, Path(pattern=TOKEN_ID, description="A minted token's id, tok-<10 hex>")]


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


@router.post("", status_code=201, response_model=MintedAnswer)
async def mint(body: NewToken, who: LoginAdmin, d: DbDep, request: Request) -> dict[str, Any]:
    """Mint an mcp-only token (``hangar connect``): it works on ``/mcp`` only, is refused by the REST routes
    and by approve_job/reject_job, and expires after ``expires_in_days``. The token is in this answer only."""
    token = PREFIX + secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    row = M.MintedToken(
        id=f"tok-{secrets.token_hex(5)}",
        digest=hashlib.sha256(token.encode()).hexdigest(),
        subject=who.subject,
        role="mcp",
        name=body.name,
        created_by=who.subject,
        created_at=_iso(now),
        expires_at=_iso(now + timedelta(days=body.expires_in_days)),
        revoked_at=None,
    )
    await M.add(d, row)
    await d.audit(who.subject, "token.mint", row.id, role="mcp", name=body.name, expires_at=row.expires_at)
    await refresh(request.app.state)  # this replica knows it at once
    return {**row.view(), "token": token}


@router.get("", response_model=TokenList)
async def list_tokens(_: LoginAdmin, d: DbDep) -> dict[str, Any]:
    """The minted tokens (never the tokens themselves), oldest first."""
    return {"tokens": [t.view() for t in await M.every(d)]}


@router.delete("/{token_id}", response_model=TokenView)
async def revoke(token_id: TokenId, who: LoginAdmin, d: DbDep, request: Request) -> dict[str, Any]:
    """Revoke a minted token: refused (401 ``revoked token``) at once here, within ``REFRESH_SECONDS`` on the
    other replicas."""
    row = await M.revoke(d, token_id, _iso(datetime.now(UTC)))
    if row is None:
        raise HTTPException(404, f"no token {token_id!r}")
    await d.audit(who.subject, "token.revoke", token_id)
    await refresh(request.app.state)
    return row.view()
