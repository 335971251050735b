"""Tokens the api mints (``hangar connect``: an mcp-only token for an MCP client), kept in the database so
every api replica knows them. Only each token's SHA-256 is stored: the token itself is shown once, to whoever
minted it, and can't be read back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .db import Database

_COLUMNS = "id, digest, subject, role, name, created_by, created_at, expires_at, revoked_at"


@dataclass(frozen=True)
class MintedToken:
    id: str
    digest: str  # hex SHA-256 of the token
    subject: str
    role: str
    name: str
    created_by: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None

    def view(self) -> dict[str, Any]:
        """What may be shown about it: everything but the digest."""
        return {
            "id": self.id,
            "subject": self.subject,
            "role": self.role,
            "name": self.name,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
        }


async def add(db: Database, t: MintedToken) -> None:
    await db.backend.execute(
        f"INSERT INTO minted_tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (t.id, t.digest, t.subject, t.role, t.name, t.created_by, t.created_at, t.expires_at, t.revoked_at),
    )


async def every(db: Database) -> list[MintedToken]:
    rows = await db.backend.fetch(f"SELECT {_COLUMNS} FROM minted_tokens ORDER BY created_at, id")
    return [MintedToken(*r) for r in rows]


async def revoke(db: Database, token_id: str, at: str) -> MintedToken | None:
    """Marks it revoked (once: a second revocation keeps the first time). None: there is no such token."""
    await db.backend.execute(
        "UPDATE minted_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (at, token_id)
    )
    rows = await db.backend.fetch(f"SELECT {_COLUMNS} FROM minted_tokens WHERE id = ?", (token_id,))
    return MintedToken(*rows[0]) if rows else None
