"""The in-memory apiserver behind ``FakeKube``: objects by (resource, namespace, name) and what the
kube-apiserver (and its garbage collector) does to them on each write.

- server-set metadata: ``uid``, ``creationTimestamp``, ``namespace``, ``resourceVersion`` (one counter for
  the whole store, bumped on every write that changes something; a no-op write bumps nothing) and, for
  hangar's kinds, ``generation`` (bumped when anything but ``metadata``/``status`` changes, and when a
  graceful deletion starts); empty ``labels``/``finalizers``/… are not stored (``omitempty``);
- hangar objects are pruned of unknown fields and get their schema defaults (``kube_schema``), then
  checked against the pydantic models (422 if invalid);
- the status subresource of every hangar kind: create and patch keep the status it had, ``patch_status``
  changes only ``status``; a stale ``resourceVersion`` is 409;
- deletion with finalizers (``deletionTimestamp``, gone with the last finalizer), owner-reference garbage
  collection (at once here; the real one is eventually consistent), and watch events with a history.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from hangar.kube import EXT, ApiException, Obj, Objs
from hangar.models import API_VERSION, KINDS, Resource

from .kube_patch import api_error, json_patch, label_matcher, merge_patch
from .kube_schema import prune_and_default

MODELS: dict[str, type[Resource]] = {k.info.plural: k for k in KINDS}
CORE_KINDS = {
    "pods": "Pod",
    "secrets": "Secret",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "events": "Event",
}
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

Key = tuple[str, str, str]  # (resource, namespace, name)


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


@dataclass
class Fault:
    verb: str
    resource: str
    status: int
    name: str | None
    times: int


@dataclass
class Watcher:
    resource: str
    namespace: str
    queue: asyncio.Queue[Obj] = field(default_factory=asyncio.Queue)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


def _omit_empty(meta: Obj) -> None:
    """ObjectMeta's lists and maps are ``omitempty``: an empty one is not stored."""
    for k in ("labels", "annotations", "finalizers", "ownerReferences"):
        if k in meta and not meta[k]:
            del meta[k]


def _spec_part(obj: Obj) -> Obj:
    """What a change of bumps ``generation``: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def conflict(resource: str, name: str) -> ApiException:
    return api_error(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
    )


@dataclass
class FakeApiServer:
    """Shared by every namespace view (``FakeKube.scoped``) of one fake."""

    validate: bool = True
    graceful_pods: bool = False
    objects: dict[Key, Obj] = field(default_factory=dict)
    history: list[tuple[int, Key, Obj]] = field(default_factory=list)
    watchers: list[Watcher] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # API discovery: (group, version) → the plurals served there (e.g. the CSI snapshot API, when installed).
    served: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    # requests --------------------------------------------------------------------------------------
    def fault(self, verb: str, resource: str, name: str | None) -> None:
        """Raises the error ``fail_next`` put in for this call, if any."""
        for f in self.faults:
            if f.verb == verb and f.resource == resource and (f.name is None or f.name == name):
                f.times -= 1
                if f.times <= 0:
                    self.faults.remove(f)
                raise api_error(f.status, f"injected by fail_next({verb!r}, {resource!r})")

    def existing(self, key: Key) -> Obj:
        obj = self.objects.get(key)
        if obj is None:
            raise api_error(404, f'{key[0]} "{key[2]}" not found', "NotFound")
        return obj

    def matching(self, resource: str, ns: str | None, label_selector: str | None) -> Objs:
        """Objects of ``resource`` in ``ns`` (None: every namespace) whose labels match."""
        match = label_matcher(label_selector)
        return [
            copy.deepcopy(obj)
            for (r, n, _), obj in sorted(self.objects.items())
            if r == resource and ns in (None, n) and match(obj["metadata"].get("labels") or {})
        ]

    def create(self, ns: str, resource: str, body: Obj, *, keep_status: bool = False) -> Obj:
        obj = copy.deepcopy(body)
        if not keep_status:
            # The status subresource (hangar's kinds) or the apiserver's own initial status (core kinds).
            obj.pop("status", None)
            if resource in CORE_INITIAL_STATUS:
                obj["status"] = copy.deepcopy(CORE_INITIAL_STATUS[resource])
        obj = self._stamp(ns, resource, obj)
        key = (resource, ns, obj["metadata"]["name"])
        if key in self.objects:
            raise api_error(409, f'{resource} "{key[2]}" already exists', "AlreadyExists")
        self._store(key, obj, "ADDED")
        refs = obj["metadata"].get("ownerReferences") or []
        if refs and not any(r.get("uid") in self._live_uids(ns) for r in refs):
            # Every owner is gone already: the garbage collector takes it (here at once).
            self.begin_delete(key, None)
        return copy.deepcopy(obj)

    def patch(self, key: Key, body: Obj | list[Obj]) -> Obj:
        old = self.existing(key)
        new = json_patch(old, body) if isinstance(body, list) else merge_patch(old, body)
        if not isinstance(new, dict):
            raise api_error(422, "the patched object is not a JSON object")
        rv = _meta(new).get("resourceVersion")
        if rv is not None and rv != old["metadata"]["resourceVersion"]:
            raise conflict(key[0], key[2])
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
        return self.commit(key, old, new)

    def patch_status(self, key: Key, status: Obj, resource_version: str | None) -> Obj:
        old = self.existing(key)
        if resource_version is not None and resource_version != old["metadata"]["resourceVersion"]:
            raise conflict(key[0], key[2])
        new = copy.deepcopy(old)
        patched = merge_patch(old.get("status"), status)
        if patched:
            new["status"] = patched
        else:
            new.pop("status", None)
        return self.commit(key, old, new)

    def commit(self, key: Key, old: Obj, new: Obj) -> Obj:
        """An update: nothing when nothing changed (like the apiserver), else a new resource version."""
        if key[0] in MODELS:
            new = prune_and_default(key[0], new)
        meta = _meta(new)
        _omit_empty(meta)
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
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is "
                    "being deleted",
                )
        if key[0] in MODELS and _spec_part(new) != _spec_part(old):
            meta["generation"] = old["metadata"]["generation"] + 1
        self._validate(key[0], new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(key, new)
        else:
            self._store(key, new, "MODIFIED")
        return copy.deepcopy(new)

    def begin_delete(self, key: Key, grace: int | None) -> None:
        """Gone at once, or marked deleting while finalizers (or a node's kubelet) hold it."""
        obj = self.existing(key)
        meta = obj["metadata"]
        held_by_kubelet = (
            key[0] == "pods"
            and self.graceful_pods
            and bool((obj.get("spec") or {}).get("nodeName"))
            and grace != 0
        )
        if not meta.get("finalizers") and not held_by_kubelet:
            self._remove(key, copy.deepcopy(obj))
        elif not meta.get("deletionTimestamp"):
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = _now()
            if "generation" in meta:  # the apiserver counts a graceful deletion as a change of intent
                new["metadata"]["generation"] = meta["generation"] + 1
            if held_by_kubelet:
                default = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                new["metadata"]["deletionGracePeriodSeconds"] = default if grace is None else grace
            else:
                new["metadata"]["deletionGracePeriodSeconds"] = 0
            self._store(key, new, "MODIFIED")

    def finish_pod(self, key: Key) -> None:
        pod = self.existing(key)
        if not pod["metadata"].get("deletionTimestamp"):
            raise ValueError(f"pod {key[2]} is not terminating")
        if not pod["metadata"].get("finalizers"):
            self._remove(key, copy.deepcopy(pod))

    # watches ---------------------------------------------------------------------------------------
    def subscribe(self, resource: str, ns: str, resource_version: str | None) -> tuple[Objs, Watcher]:
        """The events a new watch starts with and its queue for what follows, taken in one step so no
        change falls between the two: without a resource version, ADDED for each object there is (as
        the apiserver does); with one, every event after it."""
        if resource_version is None:
            first = [{"type": "ADDED", "object": o} for o in self.matching(resource, ns, None)]
        else:
            since = int(resource_version)
            first = [
                copy.deepcopy(ev) for rv, key, ev in self.history if rv > since and key[:2] == (resource, ns)
            ]
        w = Watcher(resource, ns)
        self.watchers.append(w)
        return first, w

    # the store ---------------------------------------------------------------------------------------
    def _stamp(self, ns: str, resource: str, obj: Obj) -> Obj:
        """What the apiserver sets and checks on create."""
        meta = _meta(obj)
        for k in SERVER_METADATA:
            meta.pop(k, None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise api_error(422, "metadata.name: Required value: name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if meta.setdefault("namespace", ns) != ns:
            raise api_error(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        _omit_empty(meta)
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
        elif resource in EXT:
            group, version, kind = EXT[resource]
            obj.setdefault("apiVersion", f"{group}/{version}")
            obj.setdefault("kind", kind)
        else:
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", CORE_KINDS[resource])
        if resource == "secrets":
            data = dict(obj.get("data") or {})
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
            if not data:  # omitempty
                del obj["data"]
            obj.setdefault("type", "Opaque")
        self._validate(resource, obj)
        return obj

    def _validate(self, resource: str, obj: Obj) -> None:
        model = MODELS.get(resource)
        if model is None or not self.validate:
            return
        try:
            model.model_validate(obj)
        except ValidationError as e:
            name = obj["metadata"].get("name")
            raise api_error(422, f'{model.info.kind}.{API_VERSION} "{name}" is invalid: {e}') from None

    def _live_uids(self, ns: str) -> set[str]:
        return {o["metadata"]["uid"] for (_, n, _), o in self.objects.items() if n == ns}

    def _store(self, key: Key, obj: Obj, event: str) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        self.objects[key] = obj
        self._emit(key, event, obj)

    def _remove(self, key: Key, last: Obj) -> None:
        """Gone from the store; then the garbage collector's part: dependents whose owners are all gone
        are deleted (finalizers holding them), a gone owner is dropped from a dependent that has others."""
        del self.objects[key]
        last["metadata"].pop("finalizers", None)
        last["metadata"]["resourceVersion"] = str(next(self.rv))
        self._emit(key, "DELETED", last)
        uid, ns = last["metadata"]["uid"], key[1]
        for dkey in [k for k in self.objects if k[1] == ns]:
            dep = self.objects.get(dkey)
            if dep is None:  # collected already, by a recursive step
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == uid for r in refs):
                continue
            if any(r.get("uid") in self._live_uids(ns) for r in refs):
                new = copy.deepcopy(dep)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                self._store(dkey, new, "MODIFIED")
            else:
                self.begin_delete(dkey, None)

    def _emit(self, key: Key, kind: str, obj: Obj) -> None:
        ev: Obj = {"type": kind, "object": copy.deepcopy(obj)}
        self.history.append((int(obj["metadata"]["resourceVersion"]), key, ev))
        for w in self.watchers:
            if (w.resource, w.namespace) == key[:2]:
                w.queue.put_nowait(copy.deepcopy(ev))
