"""The api's end of the operator's live channel (``hangar_operator.live_work``): a command for a session's
sandbox, and the driver's answers as they come. The api never talks to a sandbox itself.

The operator publishes the channel's address and bearer token in the database (``endpoints``, ``live``);
they are read on every call, so an operator restart (a new port, a new token) needs nothing of the api.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from hangar.store import Database

ENDPOINT = "live"
_KIND = {400: "invalid", 404: "not found", 409: "refused"}


class LiveError(Exception):
    """The channel refused or failed: ``text`` is the tool error (``<kind>: <reason>``)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.text = f"{kind}: {reason}"


async def frames(
    db: Database, session: str, op: str, body: dict[str, Any]
) -> AsyncGenerator[dict[str, Any], None]:
    """The driver's live frames for one command (see ``hangar_driver.workbench``) until its result, or
    until the caller stops (a watch)."""
    found = await db.endpoint(ENDPOINT)
    if found is None:
        raise LiveError(
            "unavailable", "the operator's live channel is not published (is the operator running?)"
        )
    address, token = found
    try:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as http,
            http.stream(
                "POST",
                f"http://{address}/live",
                json={"session": session, "op": op, "body": body},
                headers={"Authorization": f"Bearer {token}"},
            ) as r,
        ):
            if r.status_code != 200:
                raw = await r.aread()
                try:
                    detail = str(json.loads(raw)["detail"])
                except (ValueError, KeyError, TypeError):
                    detail = f"the operator answered {r.status_code}"
                raise LiveError(_KIND.get(r.status_code, "unavailable"), detail)
            async for line in r.aiter_lines():
                if line.strip():
                    yield dict(json.loads(line))
    except httpx.HTTPError as e:
        raise LiveError("unavailable", f"the operator's live channel failed: {type(e).__name__}") from None
