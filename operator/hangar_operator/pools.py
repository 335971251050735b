"""Warm sandbox pools: an Environment's ``spec.warmPool`` keeps sandboxes started, driver connected and
verified, for new sessions to take (docs/architecture.md, "Warm sandbox pools").

- A member (``pool_objects``) is a run without a session; its driver runs nothing until adopted.
- It is *ready* once its driver said ``driver_ready`` without an error over a verified connection (recorded
  on the pod, ``hangar.dev/pool-ready``, so an operator restart finds it again when the driver reconnects).
- A session claims one with a test-and-set on the member's key Secret (``take_key``): of concurrent claims
  and retirements, in this process or another, the apiserver lets exactly one through. The session's run
  key is derived from the member's (``adopt``, sent beside the test-and-set and undone if it loses); after
  the session's status write the pod is relabelled the session's, the member's key Secret deleted, and its
  run is refused from the claim on.
- Every member holds a sandbox slot; a claim turns it into the session's slot. The pool refills only into
  slots no waiting session wants, and gives its members back when sessions wait for a slot.
- Members past ``maxAgeSeconds``, of an older spec, ended, or not ready within the connect timeout are
  retired (the same test-and-set, so a claim and a retirement never both win) and replaced.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hangar.kube import Answer, ApiException, Obj, status_of
from hangar.models import Session
from hangar.models import labels as L
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec
from hangar_driver import protocol as P

from .context import Context
from .foreign_status import pod_status
from .lifecycle import SESSION, move
from .pool_claims import NO_KEY as NO_KEY  # re-exported: its readers (Sandboxes) know it from here
from .pool_claims import after_claim, finish_claim, left_halfway
from .pool_objects import (
    KEY,
    MEMBER,
    RETIRED,
    Member,
    created,
    env_spec,
    member_objects,
    new_member_name,
    parse_pool_run,
    pool_of,
    resource_version,
    retire_key,
    retire_patch,
    spec_hash,
    take_key,
)
from .runs import Run
from .status import patch_status
from .sweeper import Wakeups, waits_for_slot

log = logging.getLogger("hangar.operator.pools")

READY = "hangar.dev/pool-ready"
SPEC = "hangar.dev/pool-spec"  # the hash of the Environment spec a member was made from
BACKSTOP = 60.0  # seconds between looks at a pool that could not fill (no free slot)
ADOPT_WAIT = 2.0  # seconds a claim waits for the adopted driver's hello before it writes the status
# Seconds after a claim's writes before its pool refills: the refill's creates, the Environment's status and
# the new pod's start came while the claim's `connected` write was on its way to its watchers (measured:
# docs/performance.md, 2026-12-02 13:05-14:15), as the first turn's pre-start did (prepare_turn.py).
REFILL_AFTER = 0.25

InUse = Callable[[], Awaitable[int]]


class Pools:
    def __init__(self, ctx: Context, in_use: InUse) -> None:
        self.ctx = ctx
        self.in_use = in_use  # slots held now (Sandboxes.in_use), pool members included
        self.keys: dict[str, bytes] = {}  # member run id -> its key, while unclaimed
        self.ready: dict[str, Member] = {}  # member run id -> member, driver verified and connected
        self.seen: dict[str, Obj] = {}  # member run id -> its pod as this process last wrote it
        self.adopting: dict[str, str] = {}  # session run id -> member run id it was claimed from
        # Members this process is claiming: taken on their key Secret, their pod not yet relabelled.
        self.claiming: set[tuple[str, str]] = set()
        self.locks: dict[tuple[str, str], asyncio.Lock] = {}
        # Pools below their size for want of a slot: a freed slot wakes them (wake_short), not the backstop.
        self.short: set[tuple[str, str]] = set()
        self.wakeups: Wakeups | None = None
        self.on_slot_freed: Callable[[], None] | None = None
        # Seams for the unit rig, whose gateway is never started: is a run's driver connected, and the time.
        self.is_connected: Callable[[str], bool] = ctx.gateway.connected
        self.clock: Callable[[], float] = time.time
        # A member recorded ready is kept for a connect timeout from this process's start (or its driver's
        # last disconnect) for its driver to come back; one that does not (adopted by a claim an earlier
        # process never finished, say) is retired.
        self.started = self.clock()
        self.down: dict[str, float] = {}  # member run id -> when its ready driver disconnected
        self.wait_connected: Callable[[str, float], Awaitable[bool]] = ctx.gateway.wait_connected
        # Session runs whose claim wrote them connected and recorded their connect (``took_connect``).
        self.recorded: set[str] = set()

    # --- the pool ---------------------------------------------------------------------------------------
    def wake(self, ns: str, env: str, when: float = 0.0) -> None:
        if self.wakeups is not None:
            self.wakeups.at(f"pools/{ns}/{env}", when, lambda: self.reconcile(ns, env))

    def wake_short(self) -> None:
        """A slot freed (Sweeper.fill_slots, after the waiting sessions had theirs): the short pools refill."""
        for ns, env in sorted(self.short):
            self.wake(ns, env)

    def make_room(self) -> None:
        """A session waits for a slot: every pool with members looks again (and gives members back)."""
        for ns, env in set((ns, env) for (ns, _), env in self.ctx.pool_members.items()):
            self.wake(ns, env)

    def _waiting(self) -> int:
        cache = self.ctx.cache
        return sum(1 for _, obj in cache.items("sessions") if waits_for_slot(obj)) if cache.primed else 0

    async def reconcile(self, ns: str, env: str) -> None:
        async with self.locks.setdefault((ns, env), asyncio.Lock()):
            await self._reconcile(ns, env)

    async def _reconcile(self, ns: str, env: str) -> None:
        kube = self.ctx.kube_in(ns)
        env_obj = await kube.get("environments", env)
        spec = env_spec(env_obj)
        size = pool_of(spec)
        want_spec = spec_hash(env_obj["spec"]) if env_obj and size else ""
        now, timeout = self.clock(), self.ctx.settings.connect_timeout
        waiting = self._waiting()
        live: list[tuple[Member, Obj]] = []
        for pod in sorted(await kube.list_core("pods", label_selector=f"{L.POOL}={env}"), key=created):
            m = Member(ns, env, pod["metadata"]["name"])
            component = (pod["metadata"].get("labels") or {}).get(L.COMPONENT)
            if component == RETIRED:  # a retirement that did not finish
                await self._remove(m)
                continue
            if component != MEMBER or (ns, m.name) in self.claiming:
                continue
            age = now - created(pod)
            # Ready before an operator restart: its driver reconnects (and is ready again) in a moment.
            recorded_ready = (pod["metadata"].get("annotations") or {}).get(READY) == "true"
            recorded_ready = recorded_ready and now - self.down.get(m.run_id, self.started) <= timeout
            why = ""
            if not size:
                why = "the pool was removed"
            elif pod["metadata"].get("deletionTimestamp") or pod_status(pod).phase in ("Failed", "Succeeded"):
                why = "it ended"
            elif (pod["metadata"].get("annotations") or {}).get(SPEC) != want_spec:
                why = "the Environment changed"
            elif spec and spec.warm_pool and age > spec.warm_pool.max_age_seconds:
                why = "older than maxAgeSeconds"
            elif m.run_id not in self.ready and not recorded_ready and age > timeout:
                why = f"its driver was not ready within {timeout:.0f}s"
            elif len(live) >= size:
                why = "more than the pool's size"
            if why:
                await self._retire(m, pod, why)
            else:
                live.append((m, pod))
        # Sessions wait for a slot: the pool gives slots back, newest member first, and does not refill.
        while waiting and live:
            m, pod = live.pop()
            waiting -= int(await self._retire(m, pod, "a session waits for a sandbox slot"))
        for key in [k for k, e in self.ctx.pool_members.items() if k[0] == ns and e == env]:
            del self.ctx.pool_members[key]
        for m, _ in live:
            self.ctx.pool_members[(ns, m.name)] = env
        made = 0
        while env_obj is not None and spec is not None and len(live) + made < size:
            async with self.ctx.slot_lock:
                if await self.in_use() + self._waiting() >= self.ctx.settings.max_sandboxes:
                    break
                m = Member(ns, env, new_member_name(env))
                self.ctx.pool_members[(ns, m.name)] = env  # the slot is held from here
            try:
                await self._make(env_obj, spec, m, want_spec)
            except BaseException:
                self.ctx.pool_members.pop((ns, m.name), None)
                raise
            made += 1
        ready = sum(1 for m, _ in live if self._is_ready(m))
        if env_obj is not None and len(live) + made < size:
            self.short.add((ns, env))
        else:
            self.short.discard((ns, env))
        if env_obj is not None:
            await self._status(ns, env_obj, size, ready, len(live) + made - ready)
        if size:
            due = [
                created(p) + spec.warm_pool.max_age_seconds + 1 for _, p in live if spec and spec.warm_pool
            ]
            if len(live) + made > ready:
                due.append(now + timeout + 1)
            if len(live) + made < size:
                due.append(now + BACKSTOP)
            self.wake(ns, env, min(due) if due else now + BACKSTOP)

    def _is_ready(self, m: Member) -> bool:
        return m.run_id in self.ready and self.is_connected(m.run_id)

    async def _status(self, ns: str, env_obj: Obj, size: int, ready: int, starting: int) -> None:
        status: dict[str, Any] | None = (
            {"size": size, "ready": ready, "starting": starting, "summary": f"{ready}/{size}"}
            if size
            else None
        )
        if status_of(env_obj).get("pool") != status:
            await patch_status(self.ctx.kube_in(ns), "environments", env_obj, {"pool": status})

    async def _make(self, env_obj: Obj, spec: EnvironmentSpec, m: Member, want_spec: str) -> None:
        kube = self.ctx.kube_in(m.namespace)
        secret, key, pvc, pod = member_objects(
            env_obj, m, spec, self.ctx.settings, self.ctx.gateway_address()
        )
        pod["metadata"]["annotations"][SPEC] = want_spec
        self.keys[m.run_id] = key.encode()
        await kube.create_core("secrets", secret)
        await kube.create_core("persistentvolumeclaims", pvc)
        await kube.create_core("pods", pod)
        log.info("started warm sandbox %s/%s for environment %s", m.namespace, m.name, m.env)

    async def _retire(self, m: Member, pod: Obj, why: str) -> bool:
        """Takes ``m`` out of the pool (unless a claim took it first) and removes it."""
        kube = self.ctx.kube_in(m.namespace)
        try:
            await kube.patch_core("secrets", m.key_secret, retire_key())
        except ApiException as e:
            if e.status == 422 and await left_halfway(self.ctx, m, self.clock()):
                why = "an earlier claim or retirement of it was left halfway"
            elif e.status in (404, 422):
                return False
            else:
                raise
        with Answer(404):  # a start that finds it retired finishes the removal
            await kube.patch_core("pods", m.name, retire_patch())
        log.info("retiring warm sandbox %s/%s: %s", m.namespace, m.name, why)
        await self._remove(m)
        return True

    async def _remove(self, m: Member) -> None:
        kube = self.ctx.kube_in(m.namespace)
        await kube.delete_core("pods", m.name, grace_period_seconds=0)
        await kube.delete_core("secrets", m.key_secret)
        await kube.delete_core("persistentvolumeclaims", m.workspace)
        self._forget(m)
        if self.ctx.pool_members.pop((m.namespace, m.name), None) and self.on_slot_freed:
            self.on_slot_freed()

    def _forget(self, m: Member) -> None:
        self.keys.pop(m.run_id, None)
        self.down.pop(m.run_id, None)
        self.ready.pop(m.run_id, None)
        self.seen.pop(m.run_id, None)
        self.ctx.gateway.forget(m.run_id)

    # --- a member's driver (the gateway's view) ------------------------------------------------------------
    async def key_for_run(self, run_id: str) -> bytes | None:
        """A member's key while it is unclaimed; None once claimed (the pool's key is dead then)."""
        parsed = parse_pool_run(run_id)
        if parsed is None or not self.ctx.serves(parsed[0]):
            return None
        if run_id in self.keys:
            return self.keys[run_id]
        pod = await self._member_pod(parsed[0], parsed[1])
        if pod is None:
            return None
        m = Member(parsed[0], str((pod["metadata"].get("labels") or {}).get(L.POOL)), parsed[1])
        secret = await self.ctx.kube_in(m.namespace).get_core("secrets", m.key_secret)
        data = ((secret or {}).get("data") or {}).get("run-key")
        if not data or ((secret or {})["metadata"].get("labels") or {}).get(L.COMPONENT) != KEY:
            return None  # claimed or retired: the pool's key is dead
        self.keys[run_id] = base64.b64decode(data)
        return self.keys[run_id]

    async def _member_pod(self, ns: str, name: str) -> Obj | None:
        pod = await self.ctx.kube_in(ns).get_core("pods", name)
        if pod is None or (pod["metadata"].get("labels") or {}).get(L.COMPONENT) != MEMBER:
            return None
        return pod

    async def member_event(self, run_id: str, name: str, payload: dict[str, Any]) -> None:
        """A member's driver event: ``driver_ready`` without an error makes it ready; with one, it goes."""
        parsed = parse_pool_run(run_id)
        if parsed is None or name != P.EV_DRIVER_READY:
            return
        pod = await self._member_pod(*parsed)
        if pod is None:
            return
        m = Member(parsed[0], str((pod["metadata"].get("labels") or {}).get(L.POOL)), parsed[1])
        if payload.get("error"):
            await self._retire(m, pod, f"its driver is not ready: {payload['error']}")
            self.wake(m.namespace, m.env)
            return
        self.seen[run_id] = await self.ctx.kube_in(m.namespace).patch_core(
            "pods", m.name, {"metadata": {"annotations": {READY: "true"}}}
        )
        self.ready[run_id] = m
        self.wake(m.namespace, m.env)  # its status says one more is ready

    async def member_connected(self, run_id: str) -> None:
        """A member's driver (re)connected: after an operator restart, the pod's record says it was ready."""
        parsed = parse_pool_run(run_id)
        if parsed is None or run_id in self.ready:
            return
        pod = await self._member_pod(*parsed)
        if pod is not None and (pod["metadata"].get("annotations") or {}).get(READY) == "true":
            m = Member(parsed[0], str((pod["metadata"].get("labels") or {}).get(L.POOL)), parsed[1])
            self.ready[run_id] = m
            self.wake(m.namespace, m.env)

    def pod_seen(self, ns: str, pod: Obj) -> None:
        """A member's pod as its watch event shows it: a claim looks at the newest version known (whether it
        still runs) without a read."""
        m = Member(ns, "", str(pod["metadata"].get("name") or ""))
        old = self.seen.get(m.run_id)
        if old is None or m.run_id not in self.ready:
            return  # only a ready member is claimed at a remembered version
        if resource_version(pod) > resource_version(old):
            self.seen[m.run_id] = pod

    def member_disconnected(self, run_id: str) -> None:
        m = self.ready.pop(run_id, None)
        if m is not None:
            self.down[run_id] = self.clock()
            self.wake(m.namespace, m.env)

    def session_connected(self, run_id: str) -> None:
        """The adopting session's run said hello with the derived key: the member's run is done with."""
        member_run = self.adopting.pop(run_id, None)
        if member_run is not None:
            self.ctx.gateway.forget(member_run)

    # --- claiming ---------------------------------------------------------------------------------------
    async def claim(
        self,
        ns: str,
        s_obj: Obj,
        env: EnvironmentSpec,
        extra: dict[str, Any] | None = None,
        after: Callable[[Obj], Awaitable[None]] | None = None,
    ) -> Obj | None:
        """Gives the session a ready member of its Environment's pool, or None (it starts a fresh sandbox).
        Returns the session as written (with ``extra``, more status fields, in the same write). ``after``
        (the caller's record of the start) runs with the written session beside the claim's writes that
        follow the status write. Caller holds the session's lock."""
        s = Session.model_validate(s_obj)
        if not pool_of(env) or env.warm_pool is None or s.spec.harness != env.warm_pool.harness:
            return None
        mine = [m for m in self.ready.values() if (m.namespace, m.env) == (ns, s.spec.environment)]
        for m in mine:
            if not self._is_ready(m):
                continue
            run = self.ctx.run(ns, s.name, s.status.counters.sandboxes + 1)
            began = self.clock()
            # Out of the ready set before the first await: no other claim in this process picks it.
            self.ready.pop(m.run_id, None)
            seen = self.seen.pop(m.run_id, None)
            self.claiming.add((ns, m.name))
            # The test-and-set and the adopt side by side (one round trip, not two): the adopt goes over
            # the member's one connection, to this process's gateway only, and its driver takes one adopt in
            # its life, so no other claimer can have adopted it; the test-and-set records the claim before
            # the status write names the pod. A lost test-and-set (or a failed step) undoes the adopt.
            # The adopt first: its frame is written before the test-and-set's request is built (the client
            # takes longer over that than the adopt's whole send).
            key, took = await asyncio.gather(
                self._send_adopt(m, run), self._take(m, s_obj, run, seen), return_exceptions=True
            )
            if took is not True or isinstance(key, BaseException):
                self.claiming.discard((ns, m.name))
                await self._undo_adopt(m, run)
                for failed in (took, key):
                    if isinstance(failed, BaseException):
                        raise failed
                continue
            self.ctx.pool_members.pop((ns, m.name), None)
            try:
                written, connected = await self._adopted(s_obj, m, run, extra or {})
                if connected:  # its hello's on_connect (waiting for the lock) finds what it records done
                    self.recorded.add(run.id)
                since = self.clock() - began if connected else None
                # Under the session's lock still: taken off it (on a task), they ran beside the hello's
                # reconcile and kopf's own patch, right when the write goes out to the watchers, and a
                # watcher saw it later (docs/performance.md, 2026-12-02 09:43-10:21).
                await after_claim(self.ctx, s_obj, written, m, run, str(key), since, after)
                return written
            except BaseException:
                # Fail closed: a half-adopted sandbox is nobody's; the session starts another.
                self.recorded.discard(run.id)  # its connect was not recorded after all
                await self.ctx.kube_in(ns).delete_core("pods", m.name, grace_period_seconds=0)
                raise
            finally:
                self.claiming.discard((ns, m.name))
                # The refill a moment after the claim is written, not beside it: its Secret, volume and pod
                # creates and its driver's start would compete for the apiserver and the CPU with the
                # claim's writes and their way to the person who waits on this session.
                self.wake(ns, m.env, self.clock() + REFILL_AFTER)
        return None

    def took_connect(self, run_id: str) -> bool:
        """The claim's write said ``run_id``'s driver is connected and the claim recorded what the hello's
        path would: the hello's on_connect (under the session's lock, after the claim) records nothing
        more. True once."""
        if run_id in self.recorded:
            self.recorded.discard(run_id)
            return True
        return False

    async def _undo_adopt(self, m: Member, run: Run) -> None:
        """A claim that did not go through after its adopt went out (fail closed): the session's run forgets
        the derived key and any connection (its hello is refused from now on), and the member, adopted or
        about to be and so of use to no one, is removed; its pool refills. The session starts another."""
        self.ctx.run_keys.pop(run.id, None)
        self.adopting.pop(run.id, None)
        self.ctx.gateway.forget(run.id)
        self.ctx.gateway.forget(m.run_id)
        self.keys.pop(m.run_id, None)
        await self.ctx.kube_in(m.namespace).delete_core("pods", m.name, grace_period_seconds=0)
        log.info("warm sandbox %s/%s removed: its claim did not go through", m.namespace, m.name)
        self.wake(m.namespace, m.env)

    async def _take(self, m: Member, s_obj: Obj, run: Run, seen: Obj | None) -> bool:
        """The claim's test-and-set on the member's key Secret, for a pod running as this process last saw it
        (``seen``, its watch's newest: no read in the way) or as read now. Lost (422: claimed or retired
        already) or gone (404): False."""
        pod = seen or await self._member_pod(m.namespace, m.name)
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod_status(pod).phase != "Running":
            return False
        try:
            await self.ctx.kube_in(m.namespace).patch_core(
                "secrets", m.key_secret, take_key(s_obj, run, self.clock())
            )
            return True
        except ApiException as e:
            if e.status in (404, 422):
                return False
            raise

    async def finish_claim(self, ns: str, s_obj: Obj, run: Run) -> str:
        """At a start: what a claim's writes beside its status write left undone (``pool_claims``)."""
        return await finish_claim(self.ctx, ns, s_obj, run)

    async def _send_adopt(self, m: Member, run: Run) -> str:
        """Tells the member's driver to become the session's run; returns the derived key (its Secret is
        written with the claim's status). The key is served for the run's hello from now on."""
        pool_key = self.keys.pop(m.run_id, None)
        if pool_key is None:
            secret = await self.ctx.kube_in(m.namespace).get_core("secrets", m.key_secret)
            data = ((secret or {}).get("data") or {}).get("run-key")
            if not data:
                raise RuntimeError(f"warm sandbox {m.name} has no key")
            pool_key = base64.b64decode(data)
        nonce = secrets.token_urlsafe(24)
        key = P.derive_run_key(pool_key, run.id, nonce)
        # The driver says hello as the session's run on its connection (protocol "Adoption in place") while
        # the writes go on: verified with this key; its on_connect waits for the session's lock, which the
        # caller holds.
        self.ctx.run_keys[run.id] = key.encode()
        self.adopting[run.id] = m.run_id
        await self.ctx.gateway.send(m.run_id, P.OP_ADOPT, {"run": run.id, "nonce": nonce}, f"adopt-{run.id}")
        return key

    async def _adopted(self, s_obj: Obj, m: Member, run: Run, extra: dict[str, Any]) -> tuple[Obj, bool]:
        """The claim went through and the adopt is out: the one status write (connected, once the driver is
        back as the session's run), alone: sent beside the key Secret's create and the volume's patch, it
        shared the apiserver and etcd with them and came back last as often as first. It needs neither of
        them (``after_claim`` follows it): a crash before they are done is mended at the next start
        (finish_claim, from Sandboxes.check on resume); the key is served from memory."""
        kube = self.ctx.kube_in(m.namespace)
        s = Session.model_validate(s_obj)
        # The adopted driver is back as the session's run within a driver round trip, usually (it keeps
        # its connection): then one status write says so, instead of a Starting write and a connected
        # one after it (its on_connect, which waits for the session's lock, finds nothing left to do).
        connected = await self.wait_connected(run.id, ADOPT_WAIT)
        counters = s.status.counters.model_copy()
        counters.sandboxes += 1
        phase = move(SESSION, s.status.phase, "sandbox_created")
        patch: dict[str, Any] = {
            **extra,
            "phase": move(SESSION, phase, "connected") if connected else phase,
            "reason": "",
            "message": "sandbox connected" if connected else f"starting sandbox {m.name} (warm)",
            "sandbox": {"pod": m.name, "run": run.pod, "connected": connected, "startedAt": iso()},
            "workspace": m.workspace,
            "counters": counters.changed(s.status.counters),
        }
        written = await patch_status(kube, "sessions", s_obj, patch)
        log.info("session %s/%s took warm sandbox %s (connected: %s)", m.namespace, s.name, m.name, connected)
        return written, connected
