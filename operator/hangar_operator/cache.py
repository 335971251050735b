"""What the operator's watches last saw of Sessions, Environments and sandbox pods, so that counting slots,
counting an environment's sessions and finding the sessions that need a look cost no apiserver call.

Fed by kopf's raw watch events (``handlers.py``) and by the operator's own status writes (``status.py``: read
your writes, so a slot taken is counted before its watch event arrives); an older ``resourceVersion`` never
replaces a newer one. Until :meth:`Cache.prime` has listed the served namespaces once (``Controllers.start``)
the cache is not trusted and readers fall back to the apiserver. Decisions that act on what is gone (a pod
missing) are confirmed with a read before acting: the cache only says where to look.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from hangar.kube import Obj

Key = tuple[str, str]  # (namespace, name)
Lister = Callable[[str], Awaitable[list[Obj]]]  # plural -> every served namespace's objects


def _rv(obj: Obj) -> int | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(rv) if rv is not None else None
    except ValueError:  # opaque by contract: then the latest seen wins
        return None


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Cache:
    PLURALS = ("sessions", "environments")

    def __init__(self) -> None:
        self.objs: dict[str, dict[Key, Obj]] = {p: {} for p in self.PLURALS}
        self.pods: dict[Key, str] = {}  # sandbox pods: (namespace, name) -> phase
        self.primed = False
        # Called with (plural, old, new) when an object is added, changed or removed (new None).
        self.observers: list[Callable[[str, Obj | None, Obj | None], None]] = []

    def put(self, plural: str, obj: Obj, namespace: str | None = None) -> None:
        if plural not in self.objs or not (obj.get("metadata") or {}).get("name"):
            return
        ns, name = key_of(obj)
        key = (ns or namespace or "", name)
        old = self.objs[plural].get(key)
        if old is not None:
            new_rv, old_rv = _rv(obj), _rv(old)
            if new_rv is not None and old_rv is not None and new_rv < old_rv:
                return  # a late watch event: what the operator wrote since is newer
        self.objs[plural][key] = obj
        for observe in self.observers:
            observe(plural, old, obj)

    def drop(self, plural: str, namespace: str, name: str) -> None:
        old = self.objs.get(plural, {}).pop((namespace, name), None)
        if old is not None:
            for observe in self.observers:
                observe(plural, old, None)

    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        return self.objs[plural].get((namespace, name))

    def fresh(self, plural: str, namespace: str, name: str) -> Obj | None:
        """The object, when the cache is primed and holds it; None when it cannot say (not primed yet, a kind
        it does not keep, an object it has not seen): then the caller reads it (``Context.cached``)."""
        if not self.primed or plural not in self.objs:
            return None
        return self.objs[plural].get((namespace, name))

    def items(self, plural: str) -> Iterator[tuple[Key, Obj]]:
        yield from list(self.objs[plural].items())

    def pod_seen(self, namespace: str, name: str, phase: str | None, deleted: bool) -> None:
        if deleted:
            self.pods.pop((namespace, name), None)
        else:
            self.pods[(namespace, name)] = phase or "Pending"

    def seen(self, plural: str, event: dict[str, Any], namespace: str | None = None) -> None:
        """A watch event (kopf's raw event: ``type`` and ``object``)."""
        obj = dict(event.get("object") or {})
        if event.get("type") == "DELETED":
            ns, name = key_of(obj)
            self.drop(plural, ns or namespace or "", name)
        else:
            self.put(plural, obj, namespace)

    async def prime(self, lister: Lister) -> None:
        """A listing of every served namespace: once at start, then now and then (``Sweeper``) for a deletion
        no watch event reported. Objects the listing no longer has are dropped, unless newer than it."""
        for plural in self.PLURALS:
            listed = await lister(plural)
            newest = max((_rv(o) or 0 for o in listed), default=0)
            present = {key_of(o) for o in listed}
            for key, obj in self.items(plural):
                rv = _rv(obj)
                if key not in present and rv is not None and rv <= newest:
                    self.drop(plural, *key)
            for obj in listed:
                self.put(plural, obj)
        self.primed = True
