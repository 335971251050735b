"""The sandbox manager: a session's sandbox run from slot to release, and what its pod's end means.

A run is the Secret ``<session>-r<n>-key`` (its run key), the workspace PVC ``<session>-workspace`` (kept
across runs) and the Pod ``<session>-r<n>``, all in the session's namespace. ``HANGAR_MAX_SANDBOXES`` runs
at once across every namespace the operator serves; a session past that waits in ``Pending``.
Releasing a run deletes its pod and key, withdraws its pending approvals and drops the gateway's per-run
state, so a run key that is gone can no longer say hello.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hangar.kube import ApiException, Obj, status_of
from hangar.models import Session, Turn
from hangar.models import labels as L
from hangar.models.base import iso
from hangar.models.environment import EnvironmentSpec

from . import metrics
from .approvals.controller import Approvals
from .context import Context
from .foreign_status import pod_status
from .held_starts import combine
from .lifecycle import SESSION, after, move
from .pool_objects import parse_pool_run
from .pools import NO_KEY, Pools
from .runs import Run, parse_run
from .sandbox_objects import run_key_secret, sandbox_pod, workspace_pvc
from .snapshots import Snapshots, Workspace
from .status import merged, patch_status
from .turns.ending import failed
from .turns.outcomes import TurnOutcomes

log = logging.getLogger("hangar.operator.sandboxes")


def first_volume(s: Session) -> bool:
    """The session's first run makes its workspace volume, empty: nothing to look for or restore first."""
    st = s.status
    return st.counters.sandboxes == 0 and not st.checkpoints and not s.spec.fork_of and not st.workspace


# (namespace, session): look at the session again (its sandbox changed).
Reconcile = Callable[[str, str], Awaitable[None]]
# Seconds a new run's Starting write waits for its driver's hello, to be folded into that write
# (held_starts.py); a cold start connects in ~0.1 s on two cores.
START_HOLD = 0.5


class Sandboxes:
    def __init__(self, ctx: Context, outcomes: TurnOutcomes, approvals: Approvals) -> None:
        self.ctx = ctx
        self.outcomes = outcomes
        self.approvals = approvals
        self.snapshots = Snapshots(ctx)
        self.start_hold = START_HOLD
        self.reconcile_session: Reconcile | None = None
        self.pools: Pools | None = None  # warm sandboxes (pools.py), set in controllers.py

    async def read_session(self, ns: str, name: str) -> Obj | None:
        """The session as the operator's cache holds it (at least as new as the watch event or the operator's
        own write that brought the caller here: no apiserver round trip on the way to a sandbox), or read
        while the cache is not primed or lacks it. A copy: callers may change what they get."""
        return copy.deepcopy(await self.ctx.cached(ns, "sessions", name))

    # --- the gateway's view -----------------------------------------------------------------------------
    async def key_for_run(self, run_id: str) -> bytes | None:
        if run_id in self.ctx.run_keys:
            return self.ctx.run_keys[run_id]
        if parse_pool_run(run_id) is not None:
            return await self.pools.key_for_run(run_id) if self.pools else None
        run = parse_run(self.ctx.home, run_id)
        if run is None or not self.ctx.serves(run.namespace):
            return None
        kube = self.ctx.kube_in(run.namespace)
        s_obj = await kube.get("sessions", run.session)
        if s_obj is None or Session.model_validate(s_obj).status.sandbox.run != run.pod:
            return None  # a driver of a sandbox this session no longer has
        secret = await kube.get_core("secrets", run.key_secret)
        data = ((secret or {}).get("data") or {}).get("run-key")
        if not data:
            return None
        self.ctx.run_keys[run_id] = base64.b64decode(data)
        return self.ctx.run_keys[run_id]

    async def connected(self, ns: str, session: str, run_pod: str, hello: dict[str, Any]) -> bool:
        """The run's driver said hello: the session is ready for turns. Caller holds the session's lock."""
        held = self.ctx.held.take((ns, session))  # the run's Starting write, folded into this one
        try:
            return await self._connected(ns, session, run_pod, hello, held.patch if held else {})
        except BaseException:
            if held is not None:
                self._hold(ns, session, held.patch)
            raise

    async def _connected(
        self, ns: str, session: str, run_pod: str, hello: dict[str, Any], held: dict[str, Any]
    ) -> bool:
        kube = self.ctx.kube_in(ns)
        base = await self.read_session(ns, session)
        if base is None:
            return False
        s_obj = merged(base, held) if held else base
        st = Session.model_validate(s_obj).status
        # A warm sandbox's driver adopted as this run by a claim that was then undone (Pools._undo_adopt) may
        # have said hello before its connection was dropped: it is not the sandbox the status names.
        adopted = parse_pool_run(str(hello.get("adopted_from") or ""))
        if st.sandbox.run != run_pod or (adopted is not None and adopted != (ns, st.sandbox.pod)):
            if held:  # not this hello's to fold: written as it is
                await patch_status(kube, "sessions", base, held)
            return False
        patch: dict[str, Any] = {"sandbox": {"connected": True}}
        first = st.phase == "Starting"
        if first:
            patch.update(phase=move(SESSION, st.phase, "connected"), reason="", message="sandbox connected")
            if st.sandbox.started_at is not None:
                metrics.SANDBOX_CONNECT.observe(max(0.0, time.time() - st.sandbox.started_at.timestamp()))
        written = await patch_status(kube, "sessions", base, combine(held, patch))
        if first:
            driver = hello.get("driver_version", "")
            await self.ctx.events.emit(
                kube, written, "Normal", "SandboxConnected", f"sandbox {run_pod} connected (driver {driver})"
            )
        return True

    async def write_held(self, ns: str, session: str) -> None:
        """The session's held Starting write, now (the caller holds the session's lock)."""
        held = self.ctx.held.take((ns, session))
        if held is None:
            return
        try:
            s_obj = await self.read_session(ns, session)
            if s_obj is not None:
                await patch_status(self.ctx.kube_in(ns), "sessions", s_obj, held.patch)
        except Exception as e:
            if not (isinstance(e, ApiException) and e.status == 404):  # gone: nothing to write
                self._hold(ns, session, held.patch)  # kept, and its slot with it
                raise

    def _hold(self, ns: str, session: str, patch: dict[str, Any]) -> None:
        async def flush() -> None:
            async with self.ctx.lock(ns, session):  # which writes it
                pass
            if self.ctx.cache.primed and self.ctx.cache.fresh("sessions", ns, session) is None:
                self.ctx.drop_lock(ns, session)  # deleted meanwhile: no lock left behind

        self.ctx.held.hold((ns, session), patch, self.start_hold, flush)

    async def disconnected(self, ns: str, session: str, run_pod: str) -> None:
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", session)
        if s_obj and Session.model_validate(s_obj).status.sandbox.run == run_pod:
            await patch_status(kube, "sessions", s_obj, {"sandbox": {"connected": False}})

    # --- slots and starting -----------------------------------------------------------------------------
    async def in_use(self, ns: str, name: str) -> int:
        """Sandbox slots held now, across every namespace served, besides ``name``'s own: counted in the cache
        (which holds the operator's own writes at once), or listed before the cache is primed."""
        cache = self.ctx.cache
        # A run being made, or made with its status write held (held_starts.py), holds its slot already.
        reserved = {key for key in (*self.ctx.reserved, *self.ctx.held.keys()) if key != (ns, name)}
        if cache.primed:
            found = [obj for key, obj in cache.items("sessions") if key != (ns, name) and key not in reserved]
        else:
            found = [
                x
                for x in await self.ctx.list_served("sessions")
                if (x["metadata"].get("namespace"), x["metadata"]["name"]) not in reserved | {(ns, name)}
            ]
        # Reserved: a run being made (start) holds its slot before its status says so. An unclaimed warm
        # sandbox holds one too (it runs); a claim makes it the session's, so the count does not move.
        return (
            len(reserved)
            + len(self.ctx.pool_members)
            + sum(1 for x in found if (status_of(x).get("sandbox") or {}).get("pod"))
        )

    async def start_warm(
        self, ns: str, s_obj: Obj, env: EnvironmentSpec, extra: dict[str, Any] | None = None
    ) -> bool:
        """A new session's first sandbox (not a fork's: its volume is a clone) from its Environment's warm
        pool, if it keeps one ready: True when the session took one. Its volume comes with it, so there is
        no workspace to look for first. ``extra``: more status fields for the claim's one status write.
        Caller holds the session's lock."""
        s = Session.model_validate(s_obj)
        st = s.status
        if self.pools is None or st.sandbox.pod or st.counters.sandboxes:
            return False
        if s.spec.fork_of or s.spec.stopped or st.resuming or st.checkpoints or st.suspended:
            return False

        async def record(written: Obj) -> None:
            # Beside the claim's writes after its status write, before its driver_connected (the Event beside).
            pod = str(Session.model_validate(written).status.sandbox.pod)
            await self.ctx.activity(ns, s.name, "sandbox_starting", {"pod": pod, "warm": True})

        written = await self.pools.claim(ns, s_obj, env, extra or {}, record)
        if written is None:
            return False
        metrics.SANDBOXES_STARTED.inc()
        return True

    async def start(
        self, ns: str, s_obj: Obj, env: EnvironmentSpec, extra: dict[str, Any] | None = None
    ) -> None:
        """Start the session's next run, or wait (Pending, NoSandboxSlot) while every slot is taken.
        ``extra``: more status fields (the policy) for whichever status write this makes.

        The slot lock covers counting and reserving a slot only, not the apiserver calls that make the run:
        a burst of new sessions starts their sandboxes side by side, and a reserved slot counts as held
        until the status write that holds it (which the cache sees at once)."""
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        name, st = s.name, s.status
        extra = extra or {}
        if await self.start_warm(ns, s_obj, env, extra):
            return
        # The workspace volume first: a lost one is made again from its newest ready snapshot, or waited for.
        # A new session's first (not a fork's: cloned already) is made without looking (_make_run checks).
        fresh = first_volume(s)
        ws = Workspace(claim=workspace_pvc(s_obj, self.ctx.settings)) if fresh else None
        ws = ws or await self.snapshots.workspace(ns, s_obj)
        if ws.wait:
            wait = {
                "phase": move(SESSION, st.phase, "wait"),
                "reason": "RestoringWorkspace",
                "message": ws.wait,
            }
            await patch_status(kube, "sessions", s_obj, {**extra, **(wait if st.message != ws.wait else {})})
            return
        async with self.ctx.slot_lock:
            in_use = await self.in_use(ns, name)
            limit = self.ctx.settings.max_sandboxes
            if in_use < limit:
                self.ctx.reserved.add((ns, name))
        if in_use >= limit:
            msg = f"waiting for a sandbox slot ({in_use} of {limit} in use)"
            if st.reason != "NoSandboxSlot":  # once per wait: the Event, and the status's first word
                await self.ctx.events.emit(kube, s_obj, "Normal", "WaitingForSlot", msg)
            wait = {"phase": move(SESSION, st.phase, "wait"), "reason": "NoSandboxSlot", "message": msg}
            await patch_status(kube, "sessions", s_obj, {**extra, **(wait if st.message != msg else {})})
            if self.pools is not None:  # after the write: the pools count the sessions that wait
                self.pools.make_room()  # warm sandboxes give their slots to waiting sessions
            return
        try:
            run, written = await self._make_run(ns, s_obj, env, ws.claim, fresh, extra)
        finally:
            self.ctx.reserved.discard((ns, name))
        metrics.SANDBOXES_STARTED.inc()
        await self.ctx.activity(ns, name, "sandbox_starting", {"pod": run.pod})
        if ws.restored_from:
            why = f"the workspace volume was lost: restored from VolumeSnapshot {ws.restored_from}"
            await self.ctx.activity(ns, name, "workspace_restored", {"snapshot": ws.restored_from})
            await self.ctx.events.emit(kube, written, "Normal", "WorkspaceRestored", why)
        elif ws.lost:
            why = "the workspace volume was lost and no snapshot restores it: the run starts on an empty one"
            await self.ctx.activity(ns, name, "workspace_lost", {"reason": why})
            await self.ctx.events.emit(kube, written, "Warning", "WorkspaceLost", why)
        await self.ctx.events.emit(
            kube, written, "Normal", "SandboxStarted", f"started sandbox pod {run.pod}"
        )

    async def _make_run(
        self,
        ns: str,
        s_obj: Obj,
        env: EnvironmentSpec,
        claim: Obj | None,
        fresh: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> tuple[Run, Obj]:
        """The run's key Secret beside the workspace volume (``claim``: None when it exists) and then the Pod
        (the volume checked first, see ``_own_volume``), then the status that holds the slot. ``fresh``:
        ``claim`` was made without looking whether the volume exists."""
        kube = self.ctx.kube_in(ns)
        s = Session.model_validate(s_obj)
        name, st = s.name, s.status
        n = st.counters.sandboxes + 1
        run = self.ctx.run(ns, name, n)
        r = st.resuming
        # A resumed run: the call Tower allowed reaches its driver signed with this run's key.
        pre = (
            {
                "turn": r.turn,
                "tool": r.tool,
                "args_hash": r.args_hash,
                "approval": r.approval,
                "tower": r.tower,
            }
            if r is not None
            else None
        )
        secret, key = run_key_secret(s_obj, run, pre)

        async def make_secret() -> bool:
            if await kube.create_core("secrets", secret):
                self.ctx.run_keys[run.id] = key.encode()
                self.ctx.gateway.expect(run.id)  # its stored events read while the pod starts
                return True
            return False  # an earlier attempt made it: its key is read on the driver's hello, via the status

        async def make_volume_then_pod() -> None:
            # A fork's volume exists already: it was cloned when the fork was recorded.
            if claim is not None and not await kube.create_core("persistentvolumeclaims", claim) and fresh:
                await self._own_volume(ns, s_obj, str(claim["metadata"]["name"]))
            # The volume is known to be the session's before a pod mounts it; the key Secret needs no such
            # look, so the pod does not wait for it: a kubelet (and the local runner) waits for a Secret
            # its volumes name, and the pod is scheduled only once its volume is bound.
            await kube.create_core(
                "pods", sandbox_pod(s_obj, env, run, self.ctx.settings, self.ctx.gateway_address())
            )

        secret_made, pod_made = await asyncio.gather(
            make_secret(), make_volume_then_pod(), return_exceptions=True
        )
        if isinstance(secret_made, BaseException):
            # No pod waits for a key that is not coming: the next attempt makes both again.
            if not isinstance(pod_made, BaseException):
                await kube.delete_core("pods", run.pod, grace_period_seconds=0)
            raise secret_made
        if isinstance(pod_made, BaseException):
            raise pod_made
        counters = st.counters.model_copy()
        counters.sandboxes = n
        patch = {
            **(extra or {}),
            "phase": move(SESSION, st.phase, "sandbox_created"),
            "reason": "",
            "message": f"starting sandbox {run.pod}",
            "sandbox": {"pod": run.pod, "run": run.pod, "connected": False, "startedAt": iso()},
            "counters": counters.changed(st.counters),
            # A volume made now is <session>-workspace, whatever warm sandbox's it had before.
            **({"workspace": None} if claim is not None else {}),
        }
        if secret_made is True and self.start_hold > 0:
            self._hold(ns, name, patch)
            return run, merged(s_obj, patch)
        return run, await patch_status(kube, "sessions", s_obj, patch)

    async def _own_volume(self, ns: str, s_obj: Obj, volume: str) -> None:
        """A first volume that was there already (an earlier attempt made it) is used only if it is this
        session's and not going: fail closed rather than mount another session's (a deleted namesake's) data."""
        pvc = await self.ctx.kube_in(ns).get_core("persistentvolumeclaims", volume)
        meta = (pvc or {}).get("metadata") or {}
        uid = s_obj["metadata"].get("uid")
        if pvc is None or meta.get("deletionTimestamp"):
            raise RuntimeError(f"the workspace volume {volume} is being deleted: the sandbox starts later")
        if not any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []):
            raise RuntimeError(f"the workspace volume {volume} belongs to another session")

    # --- releasing --------------------------------------------------------------------------------------
    async def release(self, ns: str, name: str, why: str, event: str = "sandbox_released") -> None:
        """Deletes the sandbox pod and its run key; the workspace volume (and the conversation) stays.
        Caller holds the session's lock."""
        kube = self.ctx.kube_in(ns)
        s_obj = await kube.get("sessions", name)
        if s_obj is None:
            return
        st = Session.model_validate(s_obj).status
        pod = st.sandbox.pod
        run = self.ctx.run_of(ns, st.sandbox.run)
        if pod:
            await kube.delete_core("pods", pod, grace_period_seconds=0)
        if run:
            self.ctx.run_keys.pop(run.id, None)
            await kube.delete_core("secrets", run.key_secret)
        phase = after(SESSION, st.phase, event)
        await patch_status(
            kube,
            "sessions",
            s_obj,
            {
                "phase": phase,
                "message": why,
                "currentTurn": None,
                "sandbox": {"pod": None, "run": None, "connected": False, "startedAt": None},
            },
        )
        await self.ctx.activity(ns, name, "sandbox_released", {"pod": pod, "reason": why})
        if run:
            await self.approvals.withdraw_run(ns, run.pod, f"the sandbox was released: {why}")
            self.approvals.forget_run(run.id)
            # Per-run state goes with the run: its queued commands, its connection, its acked seq.
            self.ctx.gateway.forget(run.id)

    async def pod_gone(
        self, ns: str, session: str, run_pod: str, pod_name: str, why: str, pod: Obj | None = None
    ) -> None:
        """The sandbox pod was deleted or ended: fail the running turn, free the slot; the next turn restarts."""
        kube = self.ctx.kube_in(ns)
        async with self.ctx.lock(ns, session):
            s_obj = await kube.get("sessions", session)
            if s_obj is None:
                return
            st = Session.model_validate(s_obj).status
            if st.sandbox.run != run_pod:
                return
            lost = f"sandbox pod {pod_name} {why}"
            for obj in await kube.list("turns", label_selector=L.session_selector(session)):
                turn = Turn.model_validate(obj)
                if turn.status.run != run_pod:
                    continue
                if turn.status.phase == "Running" and not await self.ctx.db.has_event(
                    self.ctx.scope("session", ns, session), turn.name, "turn_started"
                ):
                    # start_turn went to a sandbox on its way out (a queued steer's turn, say): the agent never
                    # had it. Run it in the next sandbox rather than fail it.
                    await self.outcomes.requeue(
                        ns, session, obj, f"{lost} before the turn started", {"reason": ""}
                    )
                    continue
                if turn.status.phase == "Running":
                    ending = failed("sandbox_lost", lost)
                    ending.lost, ending.interrupts, ending.interrupt_reason = lost, "killed", lost
                    await self.outcomes.finish(ns, session, obj, ending)
                elif turn.status.phase == "Failed" and lost not in turn.status.reason:
                    # The driver saw its CLI die as the pod went: say why it died.
                    reason = f"{lost}: {turn.status.reason}".rstrip(": ")
                    await patch_status(kube, "turns", obj, {"reason": reason[:2000]})
            if st.phase == "Starting" and why not in ("was deleted", NO_KEY):  # not the image's fault
                await self.never_connected(ns, session, pod, lost)
            await self.release(ns, session, lost)
            await self.ctx.events.emit(kube, s_obj, "Warning", "SandboxLost", lost)
        if self.reconcile_session is not None:
            await self.reconcile_session(ns, session)

    async def never_connected(self, ns: str, session: str, pod: Obj | None, lost: str) -> None:
        """A sandbox whose driver never connected can run no turn: fail the first queued turn with why,
        instead of starting sandbox after sandbox for it. The usual cause is an image without python3 3.8+."""
        detail = ""
        for cs in pod_status(pod).container_statuses:
            term = cs.state.get("terminated") or {}
            if cs.name == "sandbox" and term:
                detail = f" (exit {term.get('exitCode')}"
                detail += f": {term['message']})" if term.get("message") else ")"
        kube = self.ctx.kube_in(ns)
        queued = sorted(
            (
                Turn.model_validate(t)
                for t in await kube.list("turns", label_selector=L.session_selector(session))
            ),
            key=lambda t: t.spec.index,
        )
        first = next((t for t in queued if t.status.phase == "Queued"), None)
        if first is None:
            return
        reason = (
            f"the sandbox never connected: {lost}{detail}. hangar's driver runs on the environment image's "
            "python3, which must be 3.8 or later, with ctypes"
        )
        obj = await kube.get("turns", first.name)
        if obj is not None:
            await self.outcomes.finish(ns, session, obj, failed("refused", reason))

    async def check(self, ns: str, name: str) -> None:
        """After a restart, or periodically: a sandbox whose pod is gone, ended or never connected is released.
        The pod is read (a release acts on what is gone); the session comes from the cache."""
        kube = self.ctx.kube_in(ns)
        s_obj = await self.read_session(ns, name)
        if s_obj is None:
            return
        st = Session.model_validate(s_obj).status
        pod_name, run_pod = st.sandbox.pod, st.sandbox.run
        if not pod_name or not run_pod:
            return
        pod = await kube.get_core("pods", pod_name)
        if pod is None:
            await self.pod_gone(ns, name, run_pod, pod_name, "was deleted")
            return
        phase = pod_status(pod).phase
        run = self.ctx.run_of(ns, run_pod)
        if phase in ("Failed", "Succeeded"):
            await self.pod_gone(ns, name, run_pod, pod_name, f"ended ({phase})", pod)
            return
        if run and run.id not in self.ctx.run_keys and self.pools is not None:
            # At a start: a claim's writes beside its status write may be undone (Pools.finish_claim).
            why = await self.pools.finish_claim(ns, s_obj, run)
            if why:
                await self.pod_gone(ns, name, run_pod, pod_name, why, pod)
                return
        if st.phase == "Starting" and st.sandbox.started_at is not None:
            if time.time() - st.sandbox.started_at.timestamp() > self.ctx.settings.connect_timeout:
                timeout = self.ctx.settings.connect_timeout
                await self.pod_gone(
                    ns, name, run_pod, pod_name, f"did not connect within {timeout:.0f}s", pod
                )
