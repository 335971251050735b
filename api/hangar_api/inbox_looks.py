"""What ``hangar://inbox`` reads of a Turn and of a Job, kept small: the API's watch-fed caches hold these
(``watch_cache.py``), and a read the caches can't answer projects the apiserver's listing the same way, so
the inbox is computed by one rule either way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hangar.kube import Obj
from hangar.models import Job, TurnStatus

from .views import stamp


@dataclass(frozen=True, slots=True)
class TurnLook:
    name: str
    session: str
    index: int
    policy: str | None  # what the approval routes read (``ApiCache.turn``)
    needs_input: bool
    question: str | None
    since: str | None  # when it ended, else when it was created


def turn_look(obj: Obj) -> TurnLook:
    # The status alone is validated: a Turn's spec can be large (its message), and only two fields are read.
    st = TurnStatus.model_validate(obj.get("status") or {})
    spec = obj.get("spec") or {}
    meta = obj["metadata"]
    return TurnLook(
        name=str(meta["name"]),
        session=str(spec.get("session") or ""),
        index=int(spec.get("index", 0)),
        policy=st.policy,
        needs_input=st.phase == "NeedsInput",
        question=st.question,
        since=stamp(st.finished_at) or meta.get("creationTimestamp"),
    )


@dataclass(frozen=True, slots=True)
class JobLook:
    name: str
    deleted: bool
    submitter: str
    state: str | None
    question: str | None
    reason: str | None
    message: str | None
    pull_request: str | None  # the PR it delivered
    since: str | None  # when it finished, else when it was created


def job_look(obj: Obj) -> JobLook:
    job = Job.model_validate(obj)
    st, meta = job.status, obj["metadata"]
    return JobLook(
        name=str(meta["name"]),
        deleted=bool(meta.get("deletionTimestamp")),
        submitter=str(job.spec.submitter or ""),
        state=st.state,
        question=st.question,
        reason=st.reason,
        message=st.message,
        pull_request=pull_request(st.delivery.dump() if st.delivery else None),
        since=stamp(st.finished_at) or meta.get("creationTimestamp"),
    )


def pull_request(delivery: Any) -> str | None:
    """The PR a job delivered, wherever its delivery record keeps the link."""
    if not isinstance(delivery, dict):
        return None
    for key in ("pr_url", "prUrl", "pull_request", "pr"):
        value = delivery.get(key)
        if isinstance(value, dict):
            value = value.get("url") or value.get("html_url")
        if isinstance(value, str) and value:
            return value
    url = delivery.get("url")
    return url if isinstance(url, str) and "/pull" in url else None
