"""kopf's last-handled essence: a Session's in the operator's memory (no write of it), other kinds' in
kopf's annotation as before."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf

from hangar_operator.cache import Cache
from hangar_operator.diffbase import DiffBase, Progress
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


def test_the_essence_is_kopfs_own_without_copying_what_it_drops() -> None:
    """``build`` skips copying metadata and status; the essence is still exactly kopf's, for any kind, with the
    ignored fields, kopf's own annotations and extra (status) fields handled as kopf handles them."""
    storage = _storage()
    kopfs = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.hangar.dev", key="last-handled-configuration", ignored_fields=storage.ignored_fields
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "uid": "u",
            "labels": {"hangar.dev/session": "s"},
            "annotations": {
                "kopf.hangar.dev/last-handled-configuration": "{}",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "note": "kept",
            },
            "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
            "resourceVersion": "7",
        },
        "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    session = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": "s", "uid": "u2"},
        "spec": {"environment": "dev", "steers": [{"id": "a"}], "interrupts": 1},
        "status": {"phase": "Idle", "sandbox": {"connected": True}},
    }
    bare: dict[str, Any] = {"kind": "Thing", "metadata": {"name": "t"}}  # no spec, labels or status
    for raw in (pod, session, bare):
        for extra in (None, ["status.phase"], ["status.missing.field", "metadata.name"]):
            body = kopf.Body(cast(kopf.RawBody, raw))
            essence = storage.build(body=body, extra_fields=extra)
            assert essence == kopfs.build(body=body, extra_fields=extra)
            assert "status" not in essence or extra  # only the extra fields of it
    essence = storage.build(body=kopf.Body(cast(kopf.RawBody, pod)))
    assert "annotations" not in essence["metadata"]  # hangar's operator ignores them (main.DIFFBASE_IGNORED)
    plain = DiffBase(prefix="kopf.hangar.dev")  # without them ignored: kopf's own and last-applied dropped
    assert plain.build(body=kopf.Body(cast(kopf.RawBody, pod)))["metadata"]["annotations"] == {"note": "kept"}
    essence["spec"]["containers"][0]["env"].append({"name": "B"})  # a copy: the body is not touched
    essence["metadata"]["labels"]["x"] = "y"
    assert pod["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]  # type: ignore[index]
    assert pod["metadata"]["labels"] == {"hangar.dev/session": "s"}  # type: ignore[index]


class _NoCopy:
    def __deepcopy__(self, memo: object) -> _NoCopy:
        raise AssertionError("status and metadata were deep-copied")


def test_building_an_essence_copies_neither_status_nor_managed_fields() -> None:
    storage = _storage()
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [_NoCopy()]},
        "spec": {"x": 1},
        "status": {"big": _NoCopy()},
    }
    essence = storage.build(body=kopf.Body(cast(kopf.RawBody, raw)))
    assert essence == {"metadata": {"labels": {"a": "b"}}, "spec": {"x": 1}}


def test_clearing_progress_matches_kopf_and_copies_only_when_it_takes_something_out() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    ours = settings.persistence.progress_storage
    assert isinstance(ours, Progress)
    kopfs = kopf.AnnotationsProgressStorage(prefix="kopf.hangar.dev")
    essences: list[dict[str, Any]] = [
        {"spec": {"a": [1, {"b": 2}]}, "metadata": {"labels": {"x": "y"}}},
        {"spec": {}},
        {"spec": {"a": 1}, "metadata": {}},
        {"spec": {"a": 1}, "metadata": {"labels": {}}},
        {"spec": {"a": 1}, "metadata": {"annotations": {}, "labels": {"l": "v"}}},
        {"spec": {"a": 1}, "status": {}},
        {"spec": {"a": 1}, "status": {"phase": "Idle"}},
        {"metadata": {"annotations": {"kopf.hangar.dev/session_changed": "{}", "note": "n"}}},
        {"metadata": {"annotations": {"kopf.hangar.dev/session_changed": "{}"}}},
        {"metadata": {"annotations": {"other.dev/x": "1"}}},
    ]
    for raw in essences:
        before = copy.deepcopy(raw)
        essence = cast(kopf.BodyEssence, raw)
        cleared = ours.clear(essence=essence)
        assert cleared == kopfs.clear(essence=cast(kopf.BodyEssence, copy.deepcopy(raw)))
        assert raw == before  # the caller's essence is never changed
        assert (cleared is essence) == (cleared == before)  # copied only when something was taken out
