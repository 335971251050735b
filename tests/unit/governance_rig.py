"""The operator rig with Tower: a real TowerSimulator on loopback, governance settings, and what a test of
governed calls needs (a governed risky call, the webhook's decision, a command's body)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hangar.testing.tower import TowerSimulator
from hangar_api.governance import _decide
from hangar_operator.approvals import approval_name
from tests.unit.operator_rig import Rig, make_rig

CREDENTIAL = "rig-tower-credential"


async def governed_rig(tmp_path: Path, tower: TowerSimulator, mode: str = "enforce", **settings: Any) -> Rig:
    rig = await make_rig(
        tmp_path,
        governance=mode,
        governance_webhook_secret="tower-webhook",
        governance_url=tower.url,
        governance_credential=CREDENTIAL,
        **settings,
    )
    rig.c.tower_calls.first_backoff = 0.05
    rig.c.suspensions.pause_grace = 0.05
    return rig


def tower_sim() -> TowerSimulator:
    t = TowerSimulator(credential=CREDENTIAL)
    t.start()
    return t


async def until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    for _ in range(int(timeout / 0.05)):
        got = check()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def risky_call(
    rig: Rig, session: str, request_id: str = "r1", command: str = "git push --force origin main", **spec: Any
) -> str:
    """A session under ``governed`` whose running turn asks for a call the deny-risky rules flag."""
    rig.env()
    turn = await rig.running(session, approvals=spec.pop("approvals", "governed"), **spec)
    await rig.event(
        session,
        "permission_request",
        turn=turn,
        request_id=request_id,
        tool="Bash",
        input={"command": command},
        command=command,
    )
    return approval_name(rig.run_id(session), request_id)


async def filed(rig: Rig, name: str) -> str:
    """Tower's receipt, once the background filing recorded it."""
    receipt: str = await until(lambda: rig.status("approvals", name).get("receipt"), f"{name} filed")
    return receipt


async def tower_decides(
    rig: Rig, name: str, status: str, by: str = "lee@acme.test", reason: str = ""
) -> None:
    """What the webhook does with Tower's re-read decision: spec.decision, then the operator's reconcile."""
    assert await _decide(rig.kube, rig.get("approvals", name), status, by, reason or None)
    await rig.c.approvals.reconcile("default", name)


def command(rig: Rig, run: str, cid: str) -> dict[str, Any]:
    """The body of a command queued for ``run``'s driver."""
    body: dict[str, Any] = rig.ctx.gateway._runs[run].pending[cid]
    return body
