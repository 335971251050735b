"""Idle sessions give their sandbox back: after ``HANGAR_IDLE_SUSPEND_SECONDS`` (or the Environment's
``idleSuspendSeconds``; 0 = never) without a turn, a session is checkpointed and suspended with reason
``idle``, through the same steps as a suspension for Tower (suspension.py: checkpoint, release). Nothing
waits on anyone: the next message (REST, the CLI, MCP) makes a turn, and that turn resumes the session from
its workspace volume — the person sees a slower first answer, never an error. A suspended session holds no
slot, so ten idle sessions no longer keep every new one Pending.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from hangar.kube import Obj
from hangar.models import Session, Turn
from hangar.models.environment import EnvironmentSpec
from hangar.models.session import Suspension

from .. import metrics
from ..context import Context
from ..lifecycle import SESSION, move
from ..status import patch_status


def idle_limit(settings_seconds: int, env: EnvironmentSpec) -> int:
    """Seconds without a turn before a session is suspended; 0 = never. The Environment's own value wins."""
    return env.idle_suspend_seconds if env.idle_suspend_seconds is not None else settings_seconds


class IdleSuspension:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # Told (namespace, session, Unix time) when an idle session's suspension will be due: a wake-up.
        self.on_not_due: Callable[[str, str, float], None] | None = None

    async def idle_since(self, ns: str, s: Session) -> datetime | None:
        """When the session's sandbox last did something for a person: its last turn's end, else its start."""
        st = s.status
        if st.last_turn:
            t_obj = await self.ctx.kube_in(ns).get("turns", st.last_turn)
            if t_obj is not None:
                finished = Turn.model_validate(t_obj).status.finished_at
                if finished is not None:
                    return max(finished, st.sandbox.started_at or finished)
        return st.sandbox.started_at

    async def maybe_suspend(self, ns: str, s_obj: Obj, env: EnvironmentSpec, queued: bool) -> bool:
        """Starts an idle suspension when it is due (``Idle → Suspending``); True if it did. Caller holds the
        session's lock and hands the session to suspension.py's steps next."""
        s = Session.model_validate(s_obj)
        st = s.status
        limit = idle_limit(self.ctx.settings.idle_suspend_after, env)
        if limit <= 0 or queued or st.phase != "Idle" or st.current_turn or not st.sandbox.connected:
            return False
        since = await self.idle_since(ns, s)
        now = datetime.now(UTC)
        if since is None or (now - since).total_seconds() < limit:
            if since is not None and self.on_not_due is not None:
                self.on_not_due(ns, s.name, since.timestamp() + limit)
            return False
        sus = Suspension(reason="idle", since=now)
        await patch_status(
            self.ctx.kube_in(ns),
            "sessions",
            s_obj,
            {
                "phase": move(SESSION, st.phase, "suspend"),
                "reason": "Suspending",
                "message": f"suspending: idle for {limit}s; the next message resumes it",
                "suspended": sus.dump(),
            },
        )
        metrics.SUSPENSIONS.labels(reason="idle").inc()
        await self.ctx.activity(ns, s.name, "suspending", {"reason": "idle", "idle_seconds": limit})
        return True
