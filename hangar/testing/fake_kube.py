"""An in-process fake of ``hangar.kube.Kube`` for the unit tier: the same methods, in memory.

It behaves like the kube-apiserver in what hangar relies on (``fake_apiserver`` lists what), and
``tests/e2e/test_fake_kube_contract.py`` runs one scripted sequence against both to keep it honest. Its
methods answer as ``Kube``'s do: ``get`` of a missing object is None, ``create_core`` of an existing one
False, ``patch`` of a missing one raises ``ApiException(404)``, and so on.

For tests:

- ``writes`` records every write call (successful or not), so a test can say what a reconcile did, or
  that it wrote nothing;
- ``fail_next(verb, resource, status)`` makes the next matching call fail as the apiserver would have;
- ``seed``, ``set_status``, ``finish_pod`` act as the rest of the world (an earlier operator, a kubelet, a
  driver) and are not writes; ``peek`` and ``names`` read without going through a call.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

from hangar.kube import EXT, SNAPSHOT_GROUP, Answer, ApiException, JsonPatch, Kube, Obj, Objs

from .fake_apiserver import CORE_KINDS, MODELS, FakeApiServer, Fault, Key, Write
from .kube_patch import api_error, merge_patch

__all__ = ["ApiException", "FakeApiServer", "FakeKube", "Write"]

Writes = list[Write]  # spelt here: inside FakeKube, ``list`` is the method


class FakeKube(Kube):
    """``Kube`` in memory. A subclass only so it type-checks where a ``Kube`` is expected: it overrides
    every public method and has no connection (``api``, ``custom``, ``core`` are not set)."""

    def __init__(
        self,
        namespace: str = "default",
        *,
        validate: bool = True,
        graceful_pods: bool = False,
        snapshot_api: bool = False,
        server: FakeApiServer | None = None,
    ):
        """``validate``: check hangar objects against the pydantic models (422 if not). ``graceful_pods``:
        deleting a pod bound to a node (``spec.nodeName``) with a grace period leaves it terminating
        (``deletionTimestamp``) until ``finish_pod`` says its kubelet is done, as on a real node; else
        pods go at once, as with the local pod runner. ``snapshot_api``: the cluster serves the CSI snapshot
        API (``snapshot.storage.k8s.io/v1``), so VolumeSnapshots can be made."""
        self.namespace = namespace
        self.server = server or FakeApiServer(validate=validate, graceful_pods=graceful_pods)
        if snapshot_api:
            self.server.served[(SNAPSHOT_GROUP, "v1")] = {
                "volumesnapshots",
                "volumesnapshotcontents",
                "volumesnapshotclasses",
            }
        self.on_write = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, namespace: str | None = None) -> FakeKube:
        return cls(namespace or "default")

    def scoped(self, namespace: str) -> FakeKube:
        if namespace == self.namespace:
            return self
        out = FakeKube(namespace, server=self.server)
        out.on_write = self.on_write
        return out

    async def close(self) -> None:
        return None

    # for tests ----------------------------------------------------------------------------------------
    @property
    def writes(self) -> Writes:
        return self.server.writes

    def fail_next(
        self, verb: str, resource: str, status: int, *, name: str | None = None, times: int = 1
    ) -> None:
        """The next ``times`` calls of ``verb`` (a method name: ``patch_status``, ``create_core``, …) on
        ``resource`` (and ``name``, if given) raise ``ApiException(status)`` as the apiserver would have:
        the fake's ``get`` of a 404 returns None, its ``create_core`` of a 409 False, like ``Kube``'s."""
        self.server.faults.append(Fault(verb, resource, status, name, times))

    def seed(self, resource: str, body: Obj) -> Obj:
        """Stores an object with its ``status`` (the state a test starts from); not a write. The rules of
        a create still hold: server metadata, schema defaults, validation, and an object whose owners are
        all missing is collected at once (seed the owners first)."""
        return self.server.create(self.namespace, resource, body, keep_status=True)

    def set_status(self, resource: str, name: str, status: Obj) -> Obj:
        """Merge-patches an object's status as another writer would (a kubelet, a driver); not a write."""
        key = self._key(resource, name)
        old = self.server.existing(key)
        new = copy.deepcopy(old)
        new["status"] = merge_patch(old.get("status"), status)
        return self.server.commit(key, old, new)

    def finish_pod(self, name: str) -> None:
        """The kubelet is done with a terminating pod: it goes (``graceful_pods``)."""
        self.server.finish_pod(self._key("pods", name))

    def peek(self, resource: str, name: str) -> Obj | None:
        obj = self.server.objects.get(self._key(resource, name))
        return copy.deepcopy(obj) if obj is not None else None

    def names(self, resource: str) -> list[str]:
        return sorted(n for (r, ns, n) in self.server.objects if r == resource and ns == self.namespace)

    # hangar resources ---------------------------------------------------------------------------------
    async def get(self, plural: str, name: str) -> Obj | None:
        with Answer(404):
            return self._read("get", self._custom(plural), name)
        return None

    async def list(self, plural: str, label_selector: str | None = None) -> Objs:
        return self._list("list", self._custom(plural), label_selector)

    async def list_all(self, plural: str, label_selector: str | None = None) -> Objs:
        resource = self._custom(plural)
        self.server.fault("list_all", resource, None)
        return self.server.matching(resource, None, label_selector)

    async def create(self, plural: str, body: Obj) -> Obj:
        return self._wrote(plural, self._create("create", self._custom(plural), body))

    async def patch(self, plural: str, name: str, body: Obj | JsonPatch) -> Obj:
        resource = self._custom(plural)
        with self._request("patch", resource, name, body):
            return self._wrote(plural, self.server.patch(self._key(resource, name), body))

    async def patch_status(
        self, plural: str, name: str, status: Obj, resource_version: str | None = None
    ) -> Obj:
        resource = self._custom(plural)
        with self._request("patch_status", resource, name, status, resource_version):
            return self._wrote(
                plural, self.server.patch_status(self._key(resource, name), status, resource_version)
            )

    async def delete(self, plural: str, name: str) -> bool:
        with Answer(404) as gone:
            self._delete("delete", self._custom(plural), name, None)
        return not gone.given

    # core objects -------------------------------------------------------------------------------------
    async def get_core(self, kind: str, name: str) -> Obj | None:
        with Answer(404):
            return self._read("get_core", self._core(kind), name)
        return None

    async def create_core(self, kind: str, body: Obj) -> bool:
        with Answer(409) as exists:
            self._create("create_core", self._core(kind), body)
        return not exists.given

    async def dry_run_create_core(self, kind: str, body: Obj) -> Obj:
        """As a cluster that serves every field answers (image volumes too): the object, stored nowhere."""
        resource = self._core(kind)
        self.server.fault(
            "dry_run_create_core", resource, str((body.get("metadata") or {}).get("name") or "")
        )
        out = copy.deepcopy(body)
        out.setdefault("metadata", {})["namespace"] = self.namespace
        return out

    async def patch_core(self, kind: str, name: str, body: Obj | JsonPatch) -> Obj:
        resource = self._core(kind)
        with self._request("patch_core", resource, name, body):
            return copy.deepcopy(self.server.patch(self._key(resource, name), body))

    async def delete_core(self, kind: str, name: str, grace_period_seconds: int | None = None) -> bool:
        with Answer(404) as gone:
            self._delete("delete_core", self._core(kind), name, grace_period_seconds)
        return not gone.given

    async def list_core(self, kind: str, label_selector: str | None = None) -> Objs:
        return self._list("list_core", self._core(kind), label_selector)

    # other API groups' objects ----------------------------------------------------------------------
    async def served(self, group: str, version: str) -> set[str]:
        self.server.fault("served", group, None)
        return set(self.server.served.get((group, version), set()))

    async def get_ext(self, plural: str, name: str) -> Obj | None:
        with Answer(404):
            return self._read("get_ext", self._ext(plural), name)
        return None

    async def list_ext(self, plural: str, label_selector: str | None = None) -> Objs:
        return self._list("list_ext", self._ext(plural), label_selector)

    async def create_ext(self, plural: str, body: Obj) -> bool:
        with Answer(409) as exists:
            self._create("create_ext", self._ext(plural), body)
        return not exists.given

    async def delete_ext(self, plural: str, name: str) -> bool:
        with Answer(404) as gone:
            self._delete("delete_ext", self._ext(plural), name, None)
        return not gone.given

    async def list_at(self, plural: str) -> tuple[Objs, str | None]:
        resource = self._custom(plural)
        items = self._list("list_at", resource, None)
        history = self.server.history
        return items, str(history[-1][0] if history else 0)

    async def watch(
        self, plural: str, resource_version: str | None = None, *, bookmarks: bool = False
    ) -> AsyncIterator[Obj]:
        # Like Kube.watch: an expired resource version (``fail_next("watch", plural, 410)``) is raised, for
        # the caller to list again. No bookmarks are sent (the apiserver may send none either).
        resource = self._custom(plural)
        self.server.fault("watch", resource, None)
        first, w = self.server.subscribe(resource, self.namespace, resource_version)
        try:
            for ev in first:
                yield {**ev, "raw_object": ev["object"]}
            while True:
                ev = await w.queue.get()
                if ev.get("type") == "ERROR":  # break_watches: the connection is lost
                    raise api_error(int(ev["object"].get("code") or 500), "the watch was lost")
                yield {**ev, "raw_object": ev["object"]}
        finally:
            self.server.watchers.remove(w)

    def break_watches(self, plural: str, status: int = 500) -> None:
        """Ends every open watch of ``plural`` with an error (a lost connection, or with 410 the apiserver
        saying the watch's version expired); not a write."""
        for w in self.server.watchers:
            if w.resource == plural:
                w.queue.put_nowait({"type": "ERROR", "object": {"code": status}})

    # requests -----------------------------------------------------------------------------------------
    def _custom(self, plural: str) -> str:
        if plural not in MODELS:
            raise api_error(404, f"the server could not find the requested resource ({plural})")
        return plural

    def _core(self, kind: str) -> str:
        if kind not in CORE_KINDS:
            raise KeyError(kind)  # as Kube: only the kinds it maps
        return kind

    def _ext(self, plural: str) -> str:
        group, version, _ = EXT[plural]
        if plural not in self.server.served.get((group, version), set()):
            # As the apiserver answers for a resource whose CRD is not installed.
            raise api_error(404, f"the server could not find the requested resource ({plural})")
        return plural

    def _key(self, resource: str, name: str) -> Key:
        return (resource, self.namespace, name)

    def _read(self, verb: str, resource: str, name: str) -> Obj:
        self.server.fault(verb, resource, name)
        return copy.deepcopy(self.server.existing(self._key(resource, name)))

    def _list(self, verb: str, resource: str, label_selector: str | None) -> Objs:
        self.server.fault(verb, resource, None)
        return self.server.matching(resource, self.namespace, label_selector)

    def _request(
        self, verb: str, resource: str, name: str, body: Any, resource_version: str | None = None
    ) -> _FailureRecorded:
        """Records a write call and fails it if ``fail_next`` said so; the caller carries it out inside
        the returned context, which notes a failure on the record."""
        write = Write(verb, resource, name, self.namespace, copy.deepcopy(body), resource_version)
        self.server.writes.append(write)
        recorded = _FailureRecorded(write)
        with recorded:
            self.server.fault(verb, resource, name or None)
        return recorded

    def _create(self, verb: str, resource: str, body: Obj) -> Obj:
        name = str((body.get("metadata") or {}).get("name") or "")
        with self._request(verb, resource, name, body):
            return self.server.create(self.namespace, resource, body)

    def _delete(self, verb: str, resource: str, name: str, grace: int | None) -> None:
        with self._request(verb, resource, name, None):
            self.server.begin_delete(self._key(resource, name), grace)


class _FailureRecorded:
    """Notes on a recorded write the status it failed with, if it did."""

    def __init__(self, write: Write) -> None:
        self.write = write

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, ApiException):
            self.write.error = exc.status
