"""Where a sandbox's work is kept as a patch (``hangar.work``): a job attempt's, from its verification and,
exactly as pushed, its delivery; a plain session's, from the ``work_patch`` its driver sends after each turn
that ends in a checkout. ``GET …/patch`` and MCP's patch resource read the newest."""

from __future__ import annotations

from typing import Any

from hangar.kube import Obj
from hangar.models import labels as L
from hangar.work import work_scope

from .context import Context


async def keep_patch(
    ctx: Context, ns: str, session: str, turn: str | None, p: dict[str, Any], source: str
) -> None:
    """The attempt's work as a patch against the base, where ``GET …/patch`` reads it (``hangar.work``): the
    latest one taken, from its verification or (exact, as pushed) its delivery."""
    payload = {
        "session": session,
        "source": source,
        "base": p.get("base"),
        "head": p.get("head"),
        "patch": p.get("patch"),
        "truncated": bool(p.get("patch_truncated")),
        "diff_lines": p.get("diff_lines"),
    }
    await ctx.db.append_event(work_scope(ctx.scope("session", ns, session)), "patch", payload, turn)


async def session_work(ctx: Context, ns: str, session: str, turn: str, p: dict[str, Any]) -> None:
    """A ``work_patch`` event: kept for a plain session. A job attempt's work is what its verification and
    delivery took (the job's patch is that, never a turn's view in between), so its turns' are dropped."""
    s_obj: Obj | None = await ctx.kube_in(ns).get("sessions", session)
    if s_obj is None or ((s_obj["metadata"].get("labels") or {}).get(L.JOB)):
        return
    if isinstance(p.get("patch"), str):
        await keep_patch(ctx, ns, session, turn, p, "turn")
