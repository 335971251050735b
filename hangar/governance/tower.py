"""hangar's client of Tower's decisions API.

Tower is told about a governed call with ``POST /v1/approvals`` and answers with its receipt (``A-9``); the
decision is read with ``GET /v1/decisions/{id}`` (spec 002: an approval event is only a hint to re-read
it); ``POST /v1/approvals/{id}/withdraw`` takes a call back (its turn was stopped). Every request carries
``Authorization: Bearer <HANGAR_GOVERNANCE_CREDENTIAL>``. docs/governance.md describes the bodies.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field

DecisionStatus = Literal["pending", "allowed", "denied", "withdrawn"]


class TowerUnavailable(Exception):
    """Tower did not answer, or answered something that is not a decision: the caller retries later."""


class Call(BaseModel):
    """What hangar files with Tower for one governed tool call."""

    tool: str
    command: str
    args_hash: str
    taint: dict[str, Any] = Field(default_factory=dict)
    namespace: str
    session: str
    job: str | None = None
    turn: str
    run: str
    approval: str  # hangar's Approval name: Tower echoes it in corr
    started_by: str = ""
    policy: str
    why: str = ""


class Receipt(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=200)
    status: DecisionStatus = "pending"


class Decision(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=200)
    status: DecisionStatus
    decided_by: str | None = None
    reason: str | None = None
    decided_at: str | None = None


class TowerClient:
    def __init__(self, base_url: str, credential: str, timeout: float = 10.0) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {credential}"},
            timeout=timeout,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def _json(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        try:
            r = await self._http.request(method, path, json=body, headers=headers)
        except httpx.HTTPError as e:
            raise TowerUnavailable(f"{method} {path}: {type(e).__name__}: {e}") from None
        if r.status_code >= 300:
            raise TowerUnavailable(f"{method} {path}: Tower answered {r.status_code}: {r.text[:300]}")
        try:
            return r.json()
        except ValueError:
            raise TowerUnavailable(f"{method} {path}: Tower's answer is not JSON") from None

    async def file(self, call: Call, idempotency_key: str) -> Receipt:
        """Files the call. ``idempotency_key`` (the Approval's uid) makes a repeat of the request (after a
        restart between Tower's answer and hangar recording it) answer the same receipt, never a second filing."""
        headers = {"Idempotency-Key": idempotency_key}
        try:
            return Receipt.model_validate(
                await self._json("POST", "/v1/approvals", call.model_dump(), headers=headers)
            )
        except ValueError as e:
            raise TowerUnavailable(f"Tower's receipt is not one: {e}") from None

    async def decision(self, approval_id: str) -> Decision:
        try:
            return Decision.model_validate(
                await self._json("GET", f"/v1/decisions/{quote(approval_id, safe='')}")
            )
        except ValueError as e:
            raise TowerUnavailable(f"Tower's decision is not one: {e}") from None

    async def withdraw(self, approval_id: str, reason: str) -> None:
        await self._json("POST", f"/v1/approvals/{quote(approval_id, safe='')}/withdraw", {"reason": reason})
