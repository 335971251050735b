"""The mcp-only tokens the api minted (``hangar connect``, ``hangar_api/connect.py``) as this replica knows
them: read from the database every ``REFRESH_SECONDS`` into the app's :class:`~hangar_api.auth.Tokens`, and
at once when a request brings an ``hgm_`` token this replica doesn't know (minted on another one a moment ago).
A revocation holds everywhere within ``REFRESH_SECONDS``, at once on the replica that made it."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import datetime
from typing import Any

from hangar.store import minted as M

from .auth import Caller, Tokens, Validity

log = logging.getLogger("hangar.api")

PREFIX = "hgm_"
REFRESH_SECONDS = 2.0  # how stale a replica's view of the minted tokens may be (a revocation's delay)
MISS_REFRESH_SECONDS = 0.5  # an unknown hgm_ token reads the database again at most this often
STALE_SECONDS = 10.0  # unread for this long (the database away), the minted tokens are refused: fail closed


def known(tokens: Tokens, rows: list[M.MintedToken]) -> dict[bytes, tuple[Caller, Validity]]:
    """The rows as :meth:`Tokens.set_minted` takes them. A row whose role isn't ``mcp`` is skipped: this route
    mints nothing else, so such a row is not one hangar wrote (fail closed)."""
    out: dict[bytes, tuple[Caller, Validity]] = {}
    for r in rows:
        if r.role != "mcp":
            continue
        try:
            expires = datetime.fromisoformat(r.expires_at.replace("Z", "+00:00")) if r.expires_at else None
            digest = bytes.fromhex(r.digest)
        except ValueError:
            log.warning("minted token %s is malformed in the database: refused", r.id)
            continue
        out[digest] = (Caller(r.subject, "mcp"), Validity(expires, r.revoked_at is not None))
    return out


async def refresh(state: Any) -> None:
    """Read the minted tokens again into the app's :class:`Tokens`."""
    tokens: Tokens = state.tokens
    started = time.monotonic()  # what the read can have seen: tokens minted before it began
    tokens.set_minted(known(tokens, await M.every(state.db)))
    state.minted_read_at = started


async def refresh_on_miss(state: Any, token: str) -> None:
    """An ``hgm_`` token this replica doesn't know may have been minted on another one a moment ago."""
    if not token.startswith(PREFIX) or getattr(state, "db", None) is None:
        return
    arrived = time.monotonic()
    lock: asyncio.Lock = state.minted_miss_lock  # made with the database, in the app's lifespan
    async with lock:  # misses at once share one read
        read_at: float = getattr(state, "minted_read_at", 0.0)
        if read_at > arrived:
            return  # read after this request came: what it knows is current
        # A read just before may have missed a token minted a moment ago: wait out the window rather than
        # refuse (so a token works on every replica at its first request), reading at most twice a second.
        wait = MISS_REFRESH_SECONDS - (time.monotonic() - read_at)
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            await refresh(state)
        except Exception:  # the token stays unknown: refused, as it should be without the database
            log.exception("could not read the minted tokens")


async def keep_fresh(state: Any) -> None:
    """The replica's loop: read the minted tokens every ``REFRESH_SECONDS`` until cancelled."""
    while True:
        try:
            await refresh(state)
        except Exception:
            log.exception("could not read the minted tokens")
            if time.monotonic() - getattr(state, "minted_read_at", 0.0) > STALE_SECONDS:
                # A revocation elsewhere can't be seen: refuse them all until the database answers again.
                state.tokens.set_minted({})
        await asyncio.sleep(REFRESH_SECONDS)


def is_release_route(path: str) -> bool:
    """``POST /api/jobs/{id}/approve|reject``: an mcp-only token reaches it to be told the release rule's own
    refusal (``release_rules.MCP_TOKEN``), the text MCP's approve_job answers too."""
    return re.fullmatch(r"/api/jobs/[^/]+/(approve|reject)", path) is not None
