"""An in-process fake of ``hangar.kube.Kube`` for the unit tier: the same methods, in memory.

It behaves like the kube-apiserver in what hangar relies on, and ``tests/e2e/test_fake_kube_contract.py``
runs one scripted sequence against both to keep it honest:

- server-set metadata: ``uid``, ``creationTimestamp``, ``namespace``, ``resourceVersion`` (one counter for
  the whole store, bumped on every write that changes something; a no-op write bumps nothing) and, for
  hangar's kinds, ``generation`` (bumped when anything but ``metadata``/``status`` changes);
- the status subresource of every hangar kind: ``create``/``patch`` ignore ``status``, ``patch_status``
  changes only ``status``; a stale ``resourceVersion`` precondition is 409;
- merge patch (RFC 7386) and JSON Patch (RFC 6902, a failed ``test`` is 422);
- deletion with finalizers (``deletionTimestamp``, gone when the last finalizer is removed) and owner
  reference garbage collection (synchronous here; the real one is eventually consistent);
- label selectors, watches (ADDED for what exists when a watch starts without a resource version, then
  every change; with one, every change after it).

For tests: ``writes`` records every write call (successful or not), ``fail_next`` injects an error into
the next matching call, ``seed``/``set_status``/``peek`` act on the store as the rest of the world would
(a kubelet, a driver, an earlier operator) without being recorded as writes.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from hangar.kube import ApiException, JsonPatch, Kube, Obj, Objs
from hangar.models import API_VERSION, KINDS, Resource

from .kube_patch import api_error, json_patch, label_matcher, merge_patch
from .kube_schema import prune_and_default

__all__ = ["ApiException", "FakeKube", "Write"]

MODELS: dict[str, type[Resource]] = {k.info.plural: k for k in KINDS}
CORE_KINDS = {"pods": "Pod", "secrets": "Secret", "persistentvolumeclaims": "PersistentVolumeClaim"}
CORE_KINDS["events"] = "Event"
# Core kinds whose status the apiserver sets itself on create (the rest have none).
CORE_INITIAL_STATUS: dict[str, Obj] = {
    "pods": {"phase": "Pending"},
    "persistentvolumeclaims": {"phase": "Pending"},
}
# Metadata a client can't set: the apiserver keeps its own value whatever a write says.
SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "resourceVersion",
)


@dataclass
class Write:
    """One write call as the caller made it: ``resource`` is a plural (hangar kinds) or a core kind;
    ``body`` what was sent (the status for ``patch_status``); ``error`` the status it failed with."""

    verb: str
    resource: str
    name: str
    namespace: str
    body: Any = None
    resource_version: str | None = None
    error: int | None = None


Writes = list[Write]  # spelt here: inside FakeKube, ``list`` is the method


@dataclass
class _Fault:
    verb: str
    resource: str
    status: int
    name: str | None
    times: int


@dataclass
class _Watcher:
    resource: str
    namespace: str
    queue: asyncio.Queue[Obj]


@dataclass
class _Store:
    """What every namespace view of one fake shares: the objects, the history and the test records."""

    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    history: list[tuple[int, str, str, Obj]] = field(default_factory=list)
    watchers: list[_Watcher] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    faults: list[_Fault] = field(default_factory=list)
    validate: bool = True
    graceful_pods: bool = False


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


def _spec_part(obj: Obj) -> Obj:
    """What a change of bumps ``generation``: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class FakeKube(Kube):
    """``Kube`` in memory. A subclass only so it type-checks where a ``Kube`` is expected: it overrides
    every public method and has no connection (``api``, ``custom``, ``core`` are not set)."""

    def __init__(
        self,
        namespace: str = "default",
        *,
        validate: bool = True,
        graceful_pods: bool = False,
        _store: _Store | None = None,
    ):
        """``validate``: check hangar objects against the pydantic models (422 if not). ``graceful_pods``:
        deleting a pod bound to a node (``spec.nodeName``) with a grace period leaves it terminating
        (``deletionTimestamp``) until ``finish_pod`` says its kubelet is done, as on a real node; else
        pods go at once, as with the local pod runner."""
        self.namespace = namespace
        self._s = _store or _Store(validate=validate, graceful_pods=graceful_pods)

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, namespace: str | None = None) -> FakeKube:
        return cls(namespace or "default")

    def scoped(self, namespace: str) -> FakeKube:
        if namespace == self.namespace:
            return self
        return FakeKube(namespace, _store=self._s)

    async def close(self) -> None:
        return None

    # for tests ----------------------------------------------------------------------------------------
    @property
    def writes(self) -> Writes:
        return self._s.writes

    def fail_next(
        self, verb: str, resource: str, status: int, *, name: str | None = None, times: int = 1
    ) -> None:
        """The next ``times`` calls of ``verb`` (a method name: ``patch_status``, ``create_core``, …) on
        ``resource`` (and ``name``, if given) raise ``ApiException(status)`` as the apiserver would have:
        the fake's ``get`` of a 404 returns None, its ``create_core`` of a 409 False, like ``Kube``'s."""
        self._s.faults.append(_Fault(verb, resource, status, name, times))

    def seed(self, resource: str, body: Obj) -> Obj:
        """Stores an object as is, ``status`` included (the state a test starts from); not a write."""
        obj = self._stamp(resource, copy.deepcopy(body))
        key = self._key(resource, _meta(obj)["name"])
        if key in self._s.objects:
            raise api_error(409, f"{resource} {key[2]!r} already exists", "AlreadyExists")
        self._store_obj(key, obj, "ADDED")
        return copy.deepcopy(obj)

    def set_status(self, resource: str, name: str, status: Obj) -> Obj:
        """Merge-patches an object's status as another writer would (a kubelet, a driver); not a write."""
        key = self._key(resource, name)
        old = self._existing(key)
        new = copy.deepcopy(old)
        new["status"] = merge_patch(old.get("status"), status)
        return self._commit(key, old, new)

    def finish_pod(self, name: str) -> None:
        """The kubelet is done with a terminating pod: it goes (``graceful_pods``)."""
        key = self._key("pods", name)
        pod = self._existing(key)
        if not pod["metadata"].get("deletionTimestamp"):
            raise ValueError(f"pod {name} is not terminating")
        if not pod["metadata"].get("finalizers"):
            self._remove(key, copy.deepcopy(pod))

    def peek(self, resource: str, name: str) -> Obj | None:
        obj = self._s.objects.get(self._key(resource, name))
        return copy.deepcopy(obj) if obj is not None else None

    def names(self, resource: str) -> list[str]:
        return sorted(n for (r, ns, n) in self._s.objects if r == resource and ns == self.namespace)

    # hangar resources ---------------------------------------------------------------------------------
    async def get(self, plural: str, name: str) -> Obj | None:
        try:
            return self._read("get", self._custom(plural), name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def list(self, plural: str, label_selector: str | None = None) -> Objs:
        return self._list("list", self._custom(plural), label_selector)

    async def create(self, plural: str, body: Obj) -> Obj:
        return self._create("create", self._custom(plural), body)

    async def patch(self, plural: str, name: str, body: Obj | JsonPatch) -> Obj:
        resource = self._custom(plural)
        with self._recording("patch", resource, name, body):
            key = self._key(resource, name)
            old = self._existing(key)
            new = json_patch(old, body) if isinstance(body, list) else merge_patch(old, body)
            if not isinstance(new, dict):
                raise api_error(422, "the patched object is not a JSON object")
            rv = _meta(new).get("resourceVersion")
            if rv is not None and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(resource, name)
            for k in ("name", "namespace"):
                if _meta(new).get(k) != old["metadata"].get(k):
                    raise api_error(400, f"metadata.{k} can't be changed by a patch")
            for k in ("apiVersion", "kind"):
                if new.get(k) != old.get(k):
                    raise api_error(400, f"{k} can't be changed by a patch")
            # The status subresource: a write to the object keeps the status it had.
            new.pop("status", None)
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            return self._commit(key, old, new)

    async def patch_status(
        self, plural: str, name: str, status: Obj, resource_version: str | None = None
    ) -> Obj:
        resource = self._custom(plural)
        with self._recording("patch_status", resource, name, status, resource_version):
            key = self._key(resource, name)
            old = self._existing(key)
            if resource_version is not None and resource_version != old["metadata"]["resourceVersion"]:
                raise self._conflict(resource, name)
            new = copy.deepcopy(old)
            patched = merge_patch(old.get("status"), status)
            if patched:
                new["status"] = patched
            else:
                new.pop("status", None)
            return self._commit(key, old, new)

    async def delete(self, plural: str, name: str) -> bool:
        try:
            self._delete("delete", self._custom(plural), name, None)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    # core objects -------------------------------------------------------------------------------------
    async def get_core(self, kind: str, name: str) -> Obj | None:
        try:
            return self._read("get_core", self._core(kind), name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def create_core(self, kind: str, body: Obj) -> bool:
        try:
            self._create("create_core", self._core(kind), body)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    async def delete_core(self, kind: str, name: str, grace_period_seconds: int | None = None) -> bool:
        try:
            self._delete("delete_core", self._core(kind), name, grace_period_seconds)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    async def list_core(self, kind: str, label_selector: str | None = None) -> Objs:
        return self._list("list_core", self._core(kind), label_selector)

    async def watch(self, plural: str, resource_version: str | None = None) -> AsyncIterator[Obj]:
        resource = self._custom(plural)
        while True:
            try:
                self._fault("watch", resource, None)
            except ApiException as e:
                # Like Kube.watch: an expired resource version re-lists, anything else is the caller's.
                if e.status != 410:
                    raise
                resource_version = None
            # Taken in one step with subscribing, so no change falls between the two.
            w = _Watcher(resource, self.namespace, asyncio.Queue())
            if resource_version is None:
                first = [{"type": "ADDED", "object": o} for o in self._matching(resource, None)]
            else:
                since = int(resource_version)
                first = [
                    copy.deepcopy(ev)
                    for rv, r, ns, ev in self._s.history
                    if rv > since and r == resource and ns == self.namespace
                ]
            self._s.watchers.append(w)
            try:
                for ev in first:
                    yield {**ev, "raw_object": ev["object"]}
                while True:
                    ev = await w.queue.get()
                    yield {**ev, "raw_object": ev["object"]}
            finally:
                self._s.watchers.remove(w)

    # the apiserver ------------------------------------------------------------------------------------
    def _custom(self, plural: str) -> str:
        if plural not in MODELS:
            raise api_error(404, f"the server could not find the requested resource ({plural})")
        return plural

    def _core(self, kind: str) -> str:
        if kind not in CORE_KINDS:
            raise KeyError(kind)  # as Kube: only the kinds it maps
        return kind

    def _key(self, resource: str, name: str) -> tuple[str, str, str]:
        return (resource, self.namespace, name)

    def _fault(self, verb: str, resource: str, name: str | None) -> None:
        for f in self._s.faults:
            if f.verb == verb and f.resource == resource and (f.name is None or f.name == name):
                f.times -= 1
                if f.times <= 0:
                    self._s.faults.remove(f)
                raise api_error(f.status, f"injected by fail_next({verb!r}, {resource!r})")

    def _existing(self, key: tuple[str, str, str]) -> Obj:
        obj = self._s.objects.get(key)
        if obj is None:
            raise api_error(404, f'{key[0]} "{key[2]}" not found', "NotFound")
        return obj

    def _conflict(self, resource: str, name: str) -> ApiException:
        return api_error(
            409,
            f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
        )

    def _read(self, verb: str, resource: str, name: str) -> Obj:
        self._fault(verb, resource, name)
        return copy.deepcopy(self._existing(self._key(resource, name)))

    def _matching(self, resource: str, label_selector: str | None) -> Objs:
        match = label_matcher(label_selector)
        return [
            copy.deepcopy(obj)
            for (r, ns, _), obj in sorted(self._s.objects.items())
            if r == resource and ns == self.namespace and match(obj["metadata"].get("labels") or {})
        ]

    def _list(self, verb: str, resource: str, label_selector: str | None) -> Objs:
        self._fault(verb, resource, None)
        return self._matching(resource, label_selector)

    def _recording(
        self, verb: str, resource: str, name: str, body: Any, resource_version: str | None = None
    ) -> _Recording:
        return _Recording(
            self, Write(verb, resource, name, self.namespace, copy.deepcopy(body), resource_version)
        )

    def _stamp(self, resource: str, obj: Obj) -> Obj:
        """The metadata the apiserver sets on create."""
        meta = _meta(obj)
        for k in SERVER_METADATA:
            meta.pop(k, None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise api_error(422, "metadata.name: Required value: name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if meta.setdefault("namespace", self.namespace) != self.namespace:
            raise api_error(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if resource in MODELS:
            kind = MODELS[resource].info.kind
            if obj.get("kind") != kind or obj.get("apiVersion") != API_VERSION:
                raise api_error(
                    400, f"the body of a {resource} must have kind {kind} and apiVersion {API_VERSION}"
                )
            meta["generation"] = 1
            obj = prune_and_default(resource, obj)
        else:
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", CORE_KINDS[resource])
        if resource == "secrets":
            obj.setdefault("type", "Opaque")
        if resource == "secrets" and "stringData" in obj:
            data = dict(obj.get("data") or {})
            for k, v in obj.pop("stringData").items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
        self._validate(resource, obj)
        return obj

    def _create(self, verb: str, resource: str, body: Obj) -> Obj:
        name = str((body.get("metadata") or {}).get("name") or "")
        with self._recording(verb, resource, name, body):
            obj = copy.deepcopy(body)
            # The status subresource (hangar's kinds) or the apiserver's own initial status (core kinds).
            obj.pop("status", None)
            if resource in CORE_INITIAL_STATUS:
                obj["status"] = copy.deepcopy(CORE_INITIAL_STATUS[resource])
            obj = self._stamp(resource, obj)
            key = self._key(resource, obj["metadata"]["name"])
            if key in self._s.objects:
                raise api_error(409, f'{resource} "{key[2]}" already exists', "AlreadyExists")
            self._store_obj(key, obj, "ADDED")
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in self._live_uids(key[1]) for r in refs):
                # Every owner is gone already: the garbage collector takes it (here at once).
                self._begin_delete(key, None)
            return copy.deepcopy(obj)

    def _validate(self, resource: str, obj: Obj) -> None:
        model = MODELS.get(resource)
        if model is None or not self._s.validate:
            return
        try:
            model.model_validate(obj)
        except ValidationError as e:
            raise api_error(
                422, f'{model.info.kind}.{API_VERSION} "{obj["metadata"].get("name")}" is invalid: {e}'
            ) from None

    def _commit(self, key: tuple[str, str, str], old: Obj, new: Obj) -> Obj:
        """An update: nothing when nothing changed (like the apiserver), else a new resource version."""
        if key[0] in MODELS:
            new = prune_and_default(key[0], new)
        meta = _meta(new)
        for k in SERVER_METADATA:
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
            else:
                meta.pop(k, None)
        if new == old:
            return copy.deepcopy(old)
        if old["metadata"].get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                raise api_error(
                    422,
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                )
        if key[0] in MODELS and _spec_part(new) != _spec_part(old):
            meta["generation"] = old["metadata"]["generation"] + 1
        self._validate(key[0], new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta.pop("finalizers", None)
            self._remove(key, new)
            return copy.deepcopy(new)
        self._store_obj(key, new, "MODIFIED")
        return copy.deepcopy(new)

    def _delete(self, verb: str, resource: str, name: str, grace: int | None) -> None:
        with self._recording(verb, resource, name, None):
            key = self._key(resource, name)
            self._existing(key)
            self._begin_delete(key, grace)

    def _begin_delete(self, key: tuple[str, str, str], grace: int | None) -> None:
        """Gone at once, or marked deleting while finalizers (or a node's kubelet) hold it."""
        obj = self._s.objects[key]
        meta = obj["metadata"]
        held_by_kubelet = (
            key[0] == "pods"
            and self._s.graceful_pods
            and bool((obj.get("spec") or {}).get("nodeName"))
            and grace != 0
        )
        if not meta.get("finalizers") and not held_by_kubelet:
            self._remove(key, copy.deepcopy(obj))
        elif not meta.get("deletionTimestamp"):
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = _now()
            if held_by_kubelet:
                default = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                new["metadata"]["deletionGracePeriodSeconds"] = default if grace is None else grace
            else:
                new["metadata"]["deletionGracePeriodSeconds"] = 0
            self._store_obj(key, new, "MODIFIED")

    def _live_uids(self, namespace: str) -> set[str]:
        return {o["metadata"]["uid"] for (_, ns, _), o in self._s.objects.items() if ns == namespace}

    def _store_obj(self, key: tuple[str, str, str], obj: Obj, event: str) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._s.rv))
        self._s.objects[key] = obj
        self._emit(key, event, obj)

    def _remove(self, key: tuple[str, str, str], last: Obj) -> None:
        """Gone from the store; then the garbage collector's part: dependents whose owners are all gone
        are deleted (finalizers holding them), a gone owner is dropped from a dependent that has others."""
        del self._s.objects[key]
        last["metadata"]["resourceVersion"] = str(next(self._s.rv))
        self._emit(key, "DELETED", last)
        uid = last["metadata"]["uid"]
        ns = key[1]
        for dkey in [k for k in self._s.objects if k[1] == ns]:
            dep = self._s.objects.get(dkey)
            if dep is None:  # collected already, by a recursive step
                continue
            live = self._live_uids(ns)
            refs = dep["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == uid for r in refs):
                continue
            if any(r.get("uid") in live for r in refs):
                new = copy.deepcopy(dep)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self._store_obj(dkey, new, "MODIFIED")
            else:
                self._begin_delete(dkey, None)

    def _emit(self, key: tuple[str, str, str], kind: str, obj: Obj) -> None:
        ev: Obj = {"type": kind, "object": copy.deepcopy(obj)}
        resource, ns, _ = key
        self._s.history.append((int(obj["metadata"]["resourceVersion"]), resource, ns, ev))
        for w in self._s.watchers:
            if w.resource == resource and w.namespace == ns:
                w.queue.put_nowait(copy.deepcopy(ev))


class _Recording:
    """Records a write call in ``writes`` on the way out, with the status it failed with, if it did."""

    def __init__(self, kube: FakeKube, write: Write) -> None:
        self.kube, self.write = kube, write

    def __enter__(self) -> None:
        self.kube._s.writes.append(self.write)
        try:
            self.kube._fault(self.write.verb, self.write.resource, self.write.name or None)
        except ApiException as e:
            self.write.error = e.status
            raise

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, ApiException):
            self.write.error = exc.status
