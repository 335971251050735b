"""kopf's last-handled essence: a Session's in the operator's memory (no write of it), other kinds' in
kopf's annotation as before."""

from __future__ import annotations

import kopf

from hangar_operator.diffbase import DiffBase
from hangar_operator.main import configure


def _storage() -> DiffBase:
    settings = kopf.OperatorSettings()
    configure(settings)
    storage = settings.persistence.diffbase_storage
    assert isinstance(storage, DiffBase)
    storage.sessions.clear()
    return storage


def _obj(kind: str, uid: str, api: str = "hangar.dev/v1alpha1") -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": "x", "uid": uid, "labels": {"a": "b"}},
            "spec": {"environment": "dev"},
        }
    )


def test_a_sessions_essence_is_kept_in_memory_and_nothing_is_patched() -> None:
    storage = _storage()
    body = _obj("Session", "u1")
    assert storage.fetch(body=body) is None  # first seen: kopf calls the create handler
    essence = storage.build(body=body)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=essence)
    assert dict(patch) == {}  # no bookkeeping write on the Session
    assert storage.fetch(body=body) == essence
    assert storage.fetch(body=_obj("Session", "u2")) is None  # another session (or a namesake) is new
    storage.forget("u1")
    assert storage.fetch(body=body) is None
    storage.forget(None)  # a DELETED event without a uid changes nothing


def test_other_kinds_keep_kopfs_annotation() -> None:
    storage = _storage()
    for body in (_obj("Turn", "t1"), _obj("Job", "j1"), _obj("Session", "s1", api="other.example/v1")):
        essence = storage.build(body=body)
        patch = kopf.Patch()
        storage.store(body=body, patch=patch, essence=essence)
        annotations = dict(patch).get("metadata", {}).get("annotations", {})
        assert "kopf.hangar.dev/last-handled-configuration" in annotations, body
        assert storage.sessions == {}
