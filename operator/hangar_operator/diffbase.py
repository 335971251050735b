"""Where kopf keeps the last-handled essence it diffs each object against.

Sessions: in this process's memory, not in an annotation. kopf wrote the essence into the Session after
its first handler ran: one more apiserver write (and a watch event to every watcher) right while a new
session's sandbox was being made, which slowed the pod's scheduling and start beside it. The Session
reconcile is level-based, and its create, update and resume handler is one function, so a process that
starts without the essence (a restart, a new leader) only calls it once more for each session, as a
resume did. The entry goes when the operator's cache drops the session (``observe``, a cache observer): on
its DELETED event, or when the sweeper's relist no longer finds it (a deletion while the watch was down,
which no event reports), or when a namesake with another uid replaces it. Other kinds keep kopf's
annotation."""

from __future__ import annotations

from typing import Any

import kopf

from hangar.kube import Obj
from hangar.models import GROUP

SESSION_API = f"{GROUP}/"


class DiffBase(kopf.AnnotationsDiffBaseStorage):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.sessions: dict[str, kopf.BodyEssence] = {}  # the session's uid → its last-handled essence

    @staticmethod
    def _session_uid(body: kopf.Body) -> str | None:
        if body.get("kind") == "Session" and str(body.get("apiVersion") or "").startswith(SESSION_API):
            return body.metadata.uid or None
        return None

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        uid = self._session_uid(body)
        if uid is None:
            return super().fetch(body=body)
        return self.sessions.get(uid)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        uid = self._session_uid(body)
        if uid is None:
            super().store(body=body, patch=patch, essence=essence)
        else:
            self.sessions[uid] = essence

    def forget(self, uid: str | None) -> None:
        if uid:
            self.sessions.pop(uid, None)

    def observe(self, plural: str, old: Obj | None, new: Obj | None) -> None:
        """A cache observer (``Cache.observers``): a session gone, or replaced by a namesake, is forgotten."""
        if plural != "sessions" or old is None:
            return
        uid = (old.get("metadata") or {}).get("uid")
        if new is None or (new.get("metadata") or {}).get("uid") != uid:
            self.forget(uid)
