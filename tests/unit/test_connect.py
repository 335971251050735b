"""``hangar connect``'s tokens, through the api in-process (``api_rig``): who may mint one, what an mcp-only
token may do on REST (nothing but be told why), expiry and revocation; and the one widening of a job's
readers, its repository's policy approvers (to read, never to act)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hangar.models import API_VERSION
from hangar.store import minted as M
from hangar.store import open_database
from hangar_api.auth import MCP_ONLY, Caller, Tokens, Validity
from hangar_api.connect import MINTS_ONLY_ADMIN
from hangar_api.minted_tokens import REFRESH_SECONDS, STALE_SECONDS, is_release_route, keep_fresh, refresh
from hangar_api.release_rules import MCP_TOKEN

from .api_rig import ALICE, BOB, MCP, ApiRig, api_rig


def mint(rig: ApiRig, **body: Any) -> dict[str, Any]:
    r = rig.post("/api/tokens", body)
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_only_an_admin_mints_and_the_token_is_shown_once(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        for token, subject, role in ((ALICE, "alice", "jobs"), (MCP, "bot", "mcp")):
            r = rig.post("/api/tokens", {"name": "x"}, token=token)
            assert r.status_code == 403, r.text
            want = MCP_ONLY if role == "mcp" else MINTS_ONLY_ADMIN
            assert r.json()["detail"] == want.format(who=subject, role=role)
        t = mint(rig, name="carol laptop", expires_in_days=7)
        assert t["token"].startswith("hgm_") and len(t["token"]) > 40
        assert t["role"] == "mcp" and t["subject"] == "root" and t["name"] == "carol laptop"
        assert t["id"].startswith("tok-") and t["revoked_at"] is None
        expires = datetime.fromisoformat(t["expires_at"].replace("Z", "+00:00"))
        assert timedelta(days=6, hours=23) < expires - datetime.now(UTC) <= timedelta(days=7)
        listed = rig.get("/api/tokens").json()["tokens"]
        assert [x["id"] for x in listed if x["id"] == t["id"]] == [t["id"]]
        assert all("token" not in x and "digest" not in x for x in listed), "never shown again"
        for bad in ({"expires_in_days": 0}, {"expires_in_days": 366}, {"role": "admin"}, {"name": "n" * 101}):
            assert rig.post("/api/tokens", bad).status_code == 422, bad
        assert [e["target"] for e in rig.audit("token.mint")] == [t["id"]]


def test_an_mcp_only_token_is_refused_by_rest_with_why(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        rig.env("gated")
        seed_job(rig, "j1", "alice", "gated")
        token = mint(rig)["token"]
        why = MCP_ONLY.format(who="root")
        for method, path in (
            ("GET", "/api/jobs"),
            ("GET", "/api/jobs/j1"),
            ("POST", "/api/jobs"),
            ("GET", "/api/sessions"),
            ("GET", "/api/tokens"),
            ("POST", "/api/tokens"),
        ):
            r = rig.client.request(method, path, headers={"Authorization": f"Bearer {token}"}, json={})
            assert r.status_code == 403 and r.json()["detail"] == why, (method, path, r.text)
        # The release routes answer it with the release rule's text, as MCP's approve_job does.
        for verb in ("approve", "reject"):
            r = rig.post(f"/api/jobs/j1/{verb}", {}, token=token)
            assert r.status_code == 403 and r.json()["detail"] == MCP_TOKEN.format(who="root"), r.text
        assert rig.get("/api/jobs/j1").json()["release"] is None, "nothing was decided"


def test_a_revoked_token_is_refused_at_once(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        t = mint(rig)
        headers = {"Authorization": f"Bearer {t['token']}"}
        assert rig.client.get("/api/jobs", headers=headers).status_code == 403  # known: an mcp-only token
        r = rig.delete(f"/api/tokens/{t['id']}", token=ALICE)
        assert r.status_code == 403
        r = rig.delete(f"/api/tokens/{t['id']}")
        assert r.status_code == 200 and r.json()["revoked_at"], r.text
        r = rig.client.get("/api/jobs", headers=headers)
        assert r.status_code == 401 and r.json()["detail"] == "revoked token"
        assert rig.delete("/api/tokens/tok-0000000000").status_code == 404
        assert rig.delete("/api/tokens/not-an-id").status_code in (404, 422)


def test_minted_tokens_refuse_when_expired_and_never_shadow_the_files() -> None:
    file_token = "file-admin"
    tokens = Tokens([(file_token, Caller("root", "admin"))])
    past = datetime.now(UTC) - timedelta(seconds=1)

    def digest(t: str) -> bytes:
        return hashlib.sha256(t.encode()).digest()

    tokens.set_minted(
        {
            digest("hgm_live"): (Caller("root", "mcp"), Validity(datetime.now(UTC) + timedelta(days=1))),
            digest("hgm_old"): (Caller("root", "mcp"), Validity(past)),
            digest(file_token): (Caller("root", "mcp"), Validity()),  # can't turn an admin token into mcp
        }
    )
    assert tokens.check("hgm_live") == (Caller("root", "mcp"), None)
    caller, why = tokens.check("hgm_old")
    assert caller == Caller("root", "mcp") and why is not None and why.startswith("expired token")
    assert tokens.lookup("hgm_old") is None
    assert tokens.lookup(file_token) == Caller("root", "admin")
    tokens.set_minted({})  # revoked and removed on another replica: forgotten here at the next read
    assert tokens.check("hgm_live") == (None, "unknown token")


def test_the_release_routes_are_the_only_rest_an_mcp_token_reaches() -> None:
    assert is_release_route("/api/jobs/j1/approve") and is_release_route("/api/jobs/j1/reject")
    for path in (
        "/api/jobs/j1",
        "/api/jobs/j1/approve/x",
        "/api/jobs/j1/approvals",
        "/api/sessions/s/approve",
    ):
        assert not is_release_route(path), path


def seed_job(rig: ApiRig, name: str, submitter: str, env: str) -> None:
    rig.kube.seed(
        "jobs",
        {
            "apiVersion": API_VERSION,
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"submitter": submitter, "prompt": "p", "environment": env},
            "status": {"state": "awaiting_approval"},
        },
    )


def repo_env(rig: ApiRig, name: str, policy: dict[str, Any]) -> None:
    rig.kube.seed(
        "environments",
        {
            "apiVersion": API_VERSION,
            "kind": "Environment",
            "metadata": {"name": name},
            "spec": {"image": "i", "repository": {"url": "https://git.example/acme/app", "policy": policy}},
        },
    )


def test_a_policy_approver_reads_the_jobs_they_may_release_and_nothing_more(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        repo_env(rig, "gated", {"requireApproval": True, "approvers": ["bob"]})
        repo_env(rig, "named-only", {"requireApproval": False, "approvers": ["bob"]})
        repo_env(rig, "others", {"requireApproval": True, "approvers": ["carol"]})
        seed_job(rig, "gated-1", "alice", "gated")
        seed_job(rig, "named-1", "alice", "named-only")
        seed_job(rig, "others-1", "alice", "others")
        r = rig.get("/api/jobs/gated-1", token=BOB)
        assert r.status_code == 200 and r.json()["id"] == "gated-1", r.text
        # Not a job bob may release: told nothing, as for a job that doesn't exist.
        for job in ("named-1", "others-1"):
            r = rig.get(f"/api/jobs/{job}", token=BOB)
            assert r.status_code == 404 and r.json()["detail"] == f"no job {job!r}", r.text
        # Reading only: bob can't act on alice's job, nor list it among his.
        for method, path, body in (
            ("POST", "/api/jobs/gated-1/cancel", None),
            ("POST", "/api/jobs/gated-1/follow_up", {"message": "go"}),
            ("POST", "/api/jobs/gated-1/steer", {"message": "go"}),
            ("GET", "/api/jobs/gated-1/approvals", None),
            ("GET", "/api/jobs/gated-1/events", None),
            ("GET", "/api/jobs/gated-1/patch", None),
        ):
            r = rig.client.request(method, path, headers={"Authorization": f"Bearer {BOB}"}, json=body)
            assert r.status_code == 404 and r.json()["detail"] == "no job 'gated-1'", (path, r.text)
        assert rig.get("/api/jobs", token=BOB).json()["jobs"] == []
        # What he may do is release it.
        r = rig.post("/api/jobs/gated-1/approve", {"reason": "fine"}, token=BOB)
        assert r.status_code == 200 and r.json()["release"]["by"] == "bob", r.text
        assert rig.get("/api/jobs/gated-1", token=BOB).status_code == 200


def test_a_token_minted_on_one_replica_works_on_another_and_its_revocation_reaches_it(tmp_path: Path) -> None:
    """Two api replicas on one database: a token one mints is known to the other at its first request; a
    revocation on the first is refused by the other once it reads the tokens again (every REFRESH_SECONDS)."""
    with api_rig(tmp_path) as a, api_rig(tmp_path) as b:
        t = mint(a)
        headers = {"Authorization": f"Bearer {t['token']}"}
        r = b.client.get("/api/jobs", headers=headers)
        assert r.status_code == 403 and r.json()["detail"] == MCP_ONLY.format(who="root"), "b knows it"
        assert a.delete(f"/api/tokens/{t['id']}").status_code == 200
        deadline = time.monotonic() + 30 * REFRESH_SECONDS
        while (r := b.client.get("/api/jobs", headers=headers)).status_code != 401:
            assert time.monotonic() < deadline, "the revocation never reached the other replica"
            time.sleep(0.2)
        assert r.json()["detail"] == "revoked token"


async def test_minted_tokens_are_refused_when_the_database_stays_away(tmp_path: Path) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 't.db'}")
    state = SimpleNamespace(tokens=Tokens([]), db=db)
    good = hashlib.sha256(b"hgm_good").hexdigest()
    for tid, digest in (("tok-000000000a", good), ("tok-000000000b", "not hex")):
        await M.add(
            db, M.MintedToken(tid, digest, "root", "mcp", "", "root", "2026-12-01T10:00:00Z", None, None)
        )
    await refresh(state)  # the malformed row is skipped, the good one known
    assert state.tokens.check("hgm_good") == (Caller("root", "mcp"), None)
    await db.close()  # the database goes away
    state.minted_read_at = time.monotonic() - STALE_SECONDS - 1
    task = asyncio.create_task(keep_fresh(state))
    try:
        deadline = time.monotonic() + 30
        while state.tokens.check("hgm_good")[0] is not None:
            assert time.monotonic() < deadline, "a minted token outlived the database's answers"
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    assert state.tokens.check("hgm_good") == (None, "unknown token")
