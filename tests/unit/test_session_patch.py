"""``GET /api/sessions/{ref}/patch`` (and :func:`hangar_api.patches.session_work_patch`, which MCP's
``hangar://sessions/<name>/patch`` calls): a session's work against its base, a clear 409 when its
Environment names no repository (no base), 404 before any turn has ended; the newest patch wins."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hangar.models import API_VERSION
from hangar.store import open_database
from hangar.work import work_scope

from .api_rig import ALICE, ApiRig, api_rig


def seed(
    rig: ApiRig, kind: str, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None
) -> None:
    kinds = {"environments": "Environment", "sessions": "Session"}
    meta: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
    rig.kube.seed(kind, {"apiVersion": API_VERSION, "kind": kinds[kind], "metadata": meta, "spec": spec})


def keep(rig: ApiRig, session: str, patch: str, head: str, source: str = "turn") -> None:
    """What the operator writes when a session's driver sends its work (operator/work_patches.py)."""

    async def write() -> None:
        db = await open_database(rig.database_url)
        try:
            payload = {"session": session, "source": source, "base": "b" * 40, "head": head, "patch": patch}
            await db.append_event(work_scope(f"session/{session}"), "patch", payload, f"{session}-1")
        finally:
            await db.close()

    asyncio.run(write())


def test_a_sessions_patch_is_against_its_repositorys_base_or_refused_with_why(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        seed(rig, "environments", "plain", {"image": "i"})
        seed(rig, "environments", "repo", {"image": "i", "repository": {"url": "https://git.example/a/b"}})
        seed(rig, "sessions", "s-plain", {"environment": "plain", "harness": "claude"})
        seed(rig, "sessions", "s-repo", {"environment": "repo", "harness": "claude"})
        seed(rig, "sessions", "s-gone-env", {"environment": "deleted", "harness": "claude"})
        r = rig.get("/api/sessions/s-plain/patch")
        assert r.status_code == 409 and r.json()["detail"] == (
            "session 's-plain' has no base to diff its work against: its Environment 'plain' names no "
            "repository, so its workspace is not a checkout (give the Environment a repository)"
        )
        assert rig.get("/api/sessions/s-gone-env/patch").status_code == 409
        r = rig.get("/api/sessions/s-repo/patch")
        assert r.status_code == 404 and r.json()["detail"].startswith("session 's-repo' has no patch yet")
        assert rig.get("/api/sessions/nope/patch").status_code == 404
        keep(rig, "s-repo", "diff --git a/x b/x\n", "1" * 40)
        keep(rig, "s-repo", "diff --git a/y b/y\n", "2" * 40)
        r = rig.get("/api/sessions/s-repo/patch")
        assert r.status_code == 200 and r.text == "diff --git a/y b/y\n", "the newest"
        assert r.headers["content-type"].startswith("text/x-diff")
        assert r.headers["x-hangar-head"] == "2" * 40 and r.headers["x-hangar-source"] == "turn"
        assert rig.get("/api/sessions/s-repo/patch", token=ALICE).status_code == 403, "admin only"


def test_a_job_attempts_patch_needs_no_repository_check(tmp_path: Path) -> None:
    """An attempt's patch is its verification's or delivery's: served as the job's is."""
    with api_rig(tmp_path) as rig:
        seed(rig, "sessions", "j-a1", {"environment": "gone", "harness": "claude"}, {"hangar.dev/job": "j"})
        keep(rig, "j-a1", "diff --git a/z b/z\n", "3" * 40, source="delivery")
        r = rig.get("/api/sessions/j-a1/patch")
        assert r.status_code == 200 and r.headers["x-hangar-source"] == "delivery", r.text
