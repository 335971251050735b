"""What one watch last saw of one kind of resource in the API's namespace: the state, without the I/O.

Fed by a list (:meth:`ObjectCache.relist`) and the watch that follows it (:meth:`ObjectCache.apply`), and by
the API's own writes (:meth:`ObjectCache.wrote`: read your writes, so a decision just made is seen by the
next read of this replica before its watch event arrives). An older ``resourceVersion`` never replaces a
newer one, and a deleted object is not brought back by a late event of it (a tombstone, kept until the next
listing). Each object is kept as ``project(obj)`` — only what the readers need — and at most ``capacity``
of them: past that the cache empties itself and says so (``overflowed``), and readers go to the apiserver.

Readers trust it only while :attr:`usable` (listed, its watch running, not overflowed); an object it does
not hold may still exist (its event not here yet), so a miss is a reason to read, never a 404.

Every writer says what was news, so the stream's listeners (``watch_cache.Watched``) hear each state of an
object once: an event or a write is news when its object is newer than what is held (a resourceVersion names
one state, so an equal one was heard already); a relist returns its differences as changes (what is new or
newer than held, and a DELETED stub for what is held but no longer listed). An overflowed cache holds
nothing to compare with: every event is news, and a relist returns every object it lists (a listener may
hear an object twice then, never miss it; a deletion during that gap is not seen).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Generic, TypeVar

from hangar.kube import Obj

T = TypeVar("T")

# (ADDED | MODIFIED | DELETED, the object): what a listener is told.
Change = tuple[str, Obj]


def rv_of(obj: Obj) -> int | None:
    """The object's resourceVersion as a number; None when it has none or it is not one (opaque by contract:
    then the newest event wins)."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(rv) if rv is not None else None
    except (TypeError, ValueError):
        return None


def _newer(new: int | None, old: int | None) -> bool:
    """Does an object at ``new`` replace one held at ``old``? Unknown versions replace (the latest event)."""
    return new is None or old is None or new >= old


class ObjectCache(Generic[T]):
    def __init__(self, project: Callable[[Obj], T], capacity: int, label: str | None = None) -> None:
        self.project = project
        self.capacity = capacity
        self.label = label  # indexed: the objects whose metadata.labels[label] is a value
        self.objs: dict[str, tuple[int | None, T]] = {}
        self.labels: dict[str, str] = {}  # name -> its indexed label's value
        self.index: dict[str, set[str]] = {}  # label value -> names
        self.gone: dict[str, int | None] = {}  # deleted name -> its resourceVersion then (tombstones)
        self.rv: str | None = None  # where the watch goes on from (the listing's, then each event's)
        self.listed = False
        self.watching = False
        self.overflowed = False

    @property
    def usable(self) -> bool:
        return self.listed and self.watching and not self.overflowed

    # --- readers ----------------------------------------------------------------------------------------
    def get(self, name: str) -> T | None:
        held = self.objs.get(name)
        return held[1] if held is not None else None

    def having(self, values: Collection[str]) -> list[T]:
        """The objects whose indexed label is one of ``values``."""
        out: list[T] = []
        for v in sorted(set(values)):
            for name in sorted(self.index.get(v, ())):
                out.append(self.objs[name][1])
        return out

    def __len__(self) -> int:
        return len(self.objs)

    # --- writers ----------------------------------------------------------------------------------------
    def apply(self, kind: str, obj: Obj) -> bool:
        """A watch event: ADDED, MODIFIED, DELETED or BOOKMARK (which only moves where the watch goes on).
        True when it is news (see the module's doc)."""
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv is not None:
            self.rv = str(rv)
        if kind == "BOOKMARK":
            return False
        if self.overflowed:
            return True  # nothing held to compare with
        if kind == "DELETED":
            return self._delete(obj)
        return self._put(obj)

    def wrote(self, obj: Obj) -> bool:
        """The object as one of the API's own writes returned it; True when it is news."""
        return self._put(obj)

    def relist(self, items: list[Obj], rv: str | None) -> list[Change]:
        """A full listing at ``rv``: it replaces what is held, but for what is newer than the listing (a
        write of ours applied meanwhile). Too many objects: the cache empties and stays overflowed.
        Returns the differences from what was held, as changes."""
        if len(items) > self.capacity:
            self._overflow()
            self.rv = rv
            return [("MODIFIED", o) for o in items]
        self.overflowed = False
        at = int(rv) if rv is not None and rv.isdigit() else None
        present = {_name(o) for o in items}
        changes: list[Change] = []
        for name, (held_rv, _) in list(self.objs.items()):
            if name not in present and (at is None or held_rv is None or held_rv <= at):
                changes.append(("DELETED", self.stub(name, rv)))
                self._drop(name)
        # A tombstone older than the listing has nothing left to guard against: the listing is newer.
        self.gone = {n: g for n, g in self.gone.items() if at is not None and g is not None and g > at}
        for o in items:
            known = _name(o) in self.objs
            if self._put(o):
                changes.append(("MODIFIED" if known else "ADDED", o))
        self.rv = rv
        self.listed = True
        return changes

    # --- inside -----------------------------------------------------------------------------------------
    def _put(self, obj: Obj) -> bool:
        name = _name(obj)
        if not name:
            return False
        rv = rv_of(obj)
        held = self.objs.get(name)
        if held is not None and not _newer(rv, held[0]):
            return False  # a late event: what is held (our own write, say) is newer
        # The same version again (the watch event of our own write): replaced, but no news.
        news = held is None or rv is None or held[0] is None or rv > held[0]
        if name in self.gone:
            tomb = self.gone[name]
            if rv is not None and tomb is not None and rv <= tomb:
                return False  # an event of the object from before it was deleted
            del self.gone[name]  # made again under the same name
        try:
            value = self.project(obj)
        except Exception:
            # Not readable as the readers need it: not held, so a reader reads it (and fails as before).
            self._drop(name)
            return news
        if held is None and len(self.objs) >= self.capacity:
            self._overflow()
            return True
        self.objs[name] = (rv, value)
        self._label(name, ((obj.get("metadata") or {}).get("labels") or {}).get(self.label or ""))
        return news

    def _delete(self, obj: Obj) -> bool:
        name = _name(obj)
        if not name:
            return False
        rv = rv_of(obj)
        held = self.objs.get(name)
        if held is not None and rv is not None and held[0] is not None and held[0] > rv:
            return False  # held is newer than this deletion: it was made again since
        if held is None and name in self.gone:
            tomb = self.gone[name]
            if rv is None or tomb is None or tomb >= rv:
                return False  # this deletion was heard already
        self._drop(name)
        self.gone[name] = rv
        while len(self.gone) > self.capacity:  # bounded: the oldest tombstones go first
            del self.gone[next(iter(self.gone))]
        return True

    def stub(self, name: str, rv: str | None) -> Obj:
        """What the cache can still tell of an object: its name, ``rv`` and its indexed label (the session a
        Turn or an Approval belongs to, the job a Session is an attempt of). Told of one deleted while the
        watch was lost, and of each one held to a listener that joins late."""
        meta: Obj = {"name": name}
        if rv is not None:
            meta["resourceVersion"] = rv
        label = self.labels.get(name)
        if self.label is not None and label is not None:
            meta["labels"] = {self.label: label}
        return {"metadata": meta}

    def _drop(self, name: str) -> None:
        self.objs.pop(name, None)
        self._label(name, None)

    def _label(self, name: str, value: str | None) -> None:
        old = self.labels.pop(name, None)
        if old is not None:
            names = self.index.get(old)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.index[old]
        if self.label is not None and isinstance(value, str) and name in self.objs:
            self.labels[name] = value
            self.index.setdefault(value, set()).add(name)

    def _overflow(self) -> None:
        self.objs.clear()
        self.labels.clear()
        self.index.clear()
        self.gone.clear()
        self.overflowed = True


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
