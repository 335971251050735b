"""The work of a session or a job as one patch against its base branch (``git apply`` takes it).

The operator records each patch a sandbox's driver takes (when an attempt's work is verified, and exactly as
pushed when it is delivered) in the session's work scope; :func:`latest_patch` reads the newest. The REST
routes (``GET /api/sessions/{ref}/patch``, ``GET /api/jobs/{id}/patch``) and MCP's
``hangar://sessions/<name>/patch`` resource all answer with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hangar.store import Database


def work_scope(session_scope: str) -> str:
    """Where a session's patches are kept: beside, not inside, its activity (a patch can be a megabyte)."""
    return f"work/{session_scope}"


@dataclass(frozen=True)
class Patch:
    session: str
    patch: str
    base: str | None
    head: str | None
    source: str  # turn | verification | delivery
    truncated: bool
    diff_lines: int | None
    at: str

    def summary(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "base": self.base,
            "head": self.head,
            "source": self.source,
            "truncated": self.truncated,
            "diff_lines": self.diff_lines,
            "at": self.at,
        }


async def latest_patch(db: Database, session_scope: str, session: str) -> Patch | None:
    events = await db.last_events(work_scope(session_scope), 1)
    if not events:
        return None
    p = events[-1].payload
    return Patch(
        session=session,
        patch=str(p.get("patch") or ""),
        base=p.get("base"),
        head=p.get("head"),
        source=str(p.get("source") or ""),
        truncated=bool(p.get("truncated")),
        diff_lines=p.get("diff_lines") if isinstance(p.get("diff_lines"), int) else None,
        at=events[-1].at,
    )
