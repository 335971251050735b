"""Approval forms a client declined, remembered across ``wait_for_turn`` calls: a client that said "not me"
to an approval is not asked about it again (someone else may answer it; it stays pending).

"A client" is the caller's token subject and the ``clientInfo.name`` it gives (two editors on one token are
two clients; a client that gives no name is its token). The record lives in the database's ``seen_ids``
(kind ``mcp-declined``), so every API replica knows it, and it is dropped after a day (an approval is
decided or expires long before).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from hangar.store import Database

from ..auth import Caller

KIND = "mcp-declined"
KEEP_SECONDS = 24 * 3600


def client_key(who: Caller, ctx: Context[Any, Any]) -> str:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return f"{who.subject}/{name}" if name else who.subject


def _item(client: str, approval: str) -> str:
    return f"{approval}\0{client}"


async def remember(db: Database, client: str, approval: str) -> None:
    await db.accept_id(KIND, _item(client, approval), KEEP_SECONDS)


async def declined(db: Database, client: str, approvals: list[str]) -> set[str]:
    """Which of ``approvals`` this client declined (in this call or an earlier one)."""
    if not approvals:
        return set()
    items = {_item(client, a): a for a in approvals}
    marks = ",".join("?" for _ in items)
    rows = await db.backend.fetch(
        f"SELECT id FROM seen_ids WHERE kind = ? AND id IN ({marks})",  # only placeholders are formatted in
        (KIND, *items),
    )
    return {items[str(r[0])] for r in rows if str(r[0]) in items}
