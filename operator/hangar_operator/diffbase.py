"""Where kopf keeps the last-handled essence it diffs each object against.

Sessions: in this process's memory, not in an annotation. kopf wrote the essence into the Session after
its first handler ran: one more apiserver write (and a watch event to every watcher) right while a new
session's sandbox was being made, which slowed the pod's scheduling and start beside it. The Session
reconcile is level-based, and its create, update and resume handler is one function, so a process that
starts without the essence (a restart, a new leader) only calls it once more for each session, as a
resume did. The entry goes when the operator's cache drops the session (``observe``, a cache observer): on
its DELETED event, or when the sweeper's relist no longer finds it (a deletion while the watch was down,
which no event reports), or when a namesake with another uid replaces it. Other kinds keep kopf's
annotation.

Every kind's essence is built (``build``) on every watch event without deep-copying what it leaves out, and
cleared of kopf's progress (``Progress.clear``) without a copy when there is nothing to clear.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import kopf

from hangar.kube import Obj
from hangar.models import GROUP

SESSION_API = f"{GROUP}/"


class _Lean(Mapping[str, Any]):
    """A body whose copy (``dict(lean)``) leaves out its ``metadata`` and ``status``, which kopf's ``build``
    deep-copies and then deletes; kopf then picks labels, annotations and any extra fields out of it by key,
    which still finds them. A pod's managed fields and status were most of the copy, on every pod event.
    Attributes (``meta``, ``metadata``: kopf's storage key conventions read them) are the body's."""

    def __init__(self, body: kopf.Body) -> None:
        self.body = body

    def __getattr__(self, name: str) -> Any:
        return getattr(self.body, name)

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k in self.body if k not in ("metadata", "status"))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class DiffBase(kopf.AnnotationsDiffBaseStorage):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.sessions: dict[str, kopf.BodyEssence] = {}  # the session's uid → its last-handled essence

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        """kopf's essence, the same, without first copying the whole body (profiled: a tenth of the
        operator's CPU while sessions started, mostly pods' bodies)."""
        return super().build(body=cast(kopf.Body, _Lean(body)), extra_fields=extra_fields)

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


class Progress(kopf.AnnotationsProgressStorage):
    """kopf's handler progress in annotations. kopf clears each event's old and new essence of its progress
    annotations and empty stanzas on a deep copy of each; both are copies already (``DiffBase.build``, a
    decoded annotation, or the in-memory essence, which nothing changes), so one is copied only when there is
    something to take out of it."""

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        meta: Mapping[str, Any] = essence.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        # What kopf's clear takes out: its progress annotations, and the stanzas it finds empty.
        empty: list[str] = [k for k in ("metadata", "status") if k in essence and not essence[k]]
        empty += [k for k in ("annotations", "labels") if k in meta and not meta[k]]
        if empty or any(key.startswith(f"{self.prefix}/") for key in annotations):
            return super().clear(essence=essence)
        return essence
