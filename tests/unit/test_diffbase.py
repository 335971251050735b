"""kopf's last-handled essence: a Session's in the operator's memory (no write of it), other kinds' in
kopf's annotation as before."""

from __future__ import annotations

import kopf

from hangar_operator.cache import Cache
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


def _session(name: str, uid: str, rv: int) -> dict[str, object]:
    meta = {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv)}
    return {"apiVersion": "hangar.dev/v1alpha1", "kind": "Session", "metadata": meta}


def _remembered(storage: DiffBase, uid: str) -> None:
    body = _obj("Session", uid)
    storage.store(body=body, patch=kopf.Patch(), essence=storage.build(body=body))


async def test_a_session_the_cache_drops_is_forgotten_however_it_went() -> None:
    """Its DELETED event, a relist that no longer has it (deleted while the watch was down: no event), and a
    namesake with a new uid each drop kopf's essence of it; a session still there keeps its own."""
    storage = _storage()
    cache = Cache()
    cache.observers.append(storage.observe)
    for i, uid in enumerate(("gone", "missed", "old", "kept")):
        _remembered(storage, uid)
        cache.put("sessions", _session(f"s{i}", uid, 10 + i))
    cache.seen("sessions", {"type": "DELETED", "object": _session("s0", "gone", 20)})
    assert set(storage.sessions) == {"missed", "old", "kept"}

    cache.put("sessions", _session("s2", "new", 21))  # deleted and made again under the same name

    async def lister(plural: str) -> list[dict[str, object]]:
        return [_session("s2", "new", 21), _session("s3", "kept", 13)] if plural == "sessions" else []

    await cache.prime(lister)  # s1 is gone from the listing
    assert set(storage.sessions) == {"kept"}
    cache.put("environments", {"metadata": {"name": "e", "namespace": "ns", "uid": "kept"}})
    cache.drop("environments", "ns", "e")  # another kind's uid is not a session's
    assert set(storage.sessions) == {"kept"}
