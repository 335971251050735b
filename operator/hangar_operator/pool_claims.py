"""A warm sandbox's claim, the writes after the session's status write (``pools.Pools.claim``): the run's
key Secret, the member's volume made the session's, the records (``after_claim``), and, at a start after an
operator stopped midway, what those writes left undone (``finish_claim``, from ``Sandboxes.check``)."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable

from hangar.kube import Obj
from hangar.models import Session

from . import metrics
from .context import Context
from .pool_objects import Member, volume_patch
from .runs import Run
from .sandbox_objects import pvc_name, run_key_secret

log = logging.getLogger("hangar.operator.pools")

NO_KEY = "has no run key (the operator stopped while it was being made)"  # finish_claim's verdict


class ClaimWrites:
    """Each warm claim's writes after its status write (``after_claim``), on a task: the session's lock is
    not held for them. And the session runs whose claim wrote them connected (``took_connect``)."""

    def __init__(self) -> None:
        self.writing: dict[tuple[str, str], asyncio.Task[None]] = {}  # (namespace, session) -> its task
        self.recorded: set[str] = set()

    def start(
        self,
        ctx: Context,
        ns: str,
        session: str,
        m: Member,
        writes: Callable[[], Awaitable[None]],
        refill: Callable[[], None],
    ) -> None:
        """A failure fails closed as a failed status write does (the pod deleted: the session's pod watch
        releases it and the next turn starts another sandbox). ``refill`` comes after the writes either way:
        the refill's Secret, volume and pod creates and its driver's start would compete with the claim's
        writes for the apiserver and the CPU while a person waits on this session."""

        async def run() -> None:
            try:
                await writes()
            except Exception:
                log.exception("warm sandbox %s/%s: the claim's writes failed; removing it", ns, m.name)
                try:
                    await ctx.kube_in(ns).delete_core("pods", m.name, grace_period_seconds=0)
                except Exception:
                    log.exception("warm sandbox %s/%s could not be removed", ns, m.name)
            refill()  # (not at a stop: a cancel ends the task here)

        task = asyncio.create_task(run())
        self.writing[(ns, session)] = task
        task.add_done_callback(lambda t: self._done(ns, session, t))

    def _done(self, ns: str, session: str, task: asyncio.Task[None]) -> None:
        if self.writing.get((ns, session)) is task:
            del self.writing[(ns, session)]

    async def written(self, ns: str, session: str) -> None:
        """Waits for the session's claim's writes, if any are on their way (a release must not delete the
        run's key Secret before the claim creates it)."""
        task = self.writing.get((ns, session))
        if task is not None:
            await asyncio.wait({task})  # its failure is its own (logged, failed closed)

    def stop(self) -> None:
        """At the operator's stop: as a crash would (the next start mends what is undone, finish_claim)."""
        for task in list(self.writing.values()):
            task.cancel()

    def took_connect(self, run_id: str) -> bool:
        """The claim's write said ``run_id``'s driver is connected and its writes record what the hello's
        path would: the hello's on_connect (under the session's lock, after the claim) records nothing
        more. True once."""
        if run_id in self.recorded:
            self.recorded.discard(run_id)
            return True
        return False


async def finish_claim(ctx: Context, ns: str, s_obj: Obj, run: Run) -> str:
    """At a start (the run's key not in this process's memory): what the claim's writes beside its status
    write left undone is done now. Returns why the sandbox can't be kept, "" if it can. The key Secret is
    missing when the operator stopped between the status write and the Secret's create: the key, derived
    with a nonce only that process knew, is gone with it (fail closed: the sandbox is released and the
    next turn starts another). A volume still the pool's is re-owned by the session. Also for a fresh
    sandbox's run (its Secret made with its pod, before the status): its key is kept for the hello."""
    kube = ctx.kube_in(ns)
    s = Session.model_validate(s_obj)
    took = s.status.workspace if s.status.workspace and s.status.workspace != pvc_name(s.name) else None
    secret, pvc = await asyncio.gather(
        kube.get_core("secrets", run.key_secret),
        kube.get_core("persistentvolumeclaims", took) if took else asyncio.sleep(0),
    )
    uid = s_obj["metadata"].get("uid")
    meta = (pvc or {}).get("metadata") or {}
    if took and pvc and not any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []):
        log.info("session %s/%s: its warm sandbox's volume %s becomes its own", ns, s.name, took)
        await kube.patch_core("persistentvolumeclaims", took, volume_patch(s_obj))
    data = ((secret or {}).get("data") or {}).get("run-key")
    if not data:
        return NO_KEY
    ctx.run_keys.setdefault(run.id, base64.b64decode(data))
    return ""


async def after_claim(
    ctx: Context,
    s_obj: Obj,
    written: Obj,
    m: Member,
    run: Run,
    key: str,
    connected: float | None,
    record: Callable[[Obj], Awaitable[None]] | None,
) -> None:
    """The claim's writes after its status write, side by side: the key Secret, the volume's re-owning, the
    pool's key Secret's delete (its key is dead already: key_for_run refuses a claimed member, and a crash
    before the delete leaves only an Environment-owned Secret that the Environment's deletion takes), and
    the records. Off the session's lock (``Pools.claim`` runs it on a task): what waits for the lock (the
    driver's hello, the first turn) does not wait for these. ``connected``: when the claim's write said the
    driver is connected (seconds since the claim began), else None; then what the hello's own path records
    is recorded here, after the write (its ``on_connect`` finds it done: ``ClaimWrites.took_connect``)."""
    kube = ctx.kube_in(m.namespace)
    secret, _ = run_key_secret(s_obj, run, key=key)
    hello = ctx.gateway.hello(run.id) if connected is not None else {}

    async def records() -> None:
        # The activity in the order a fresh sandbox's is: the start, then the connect (no Event between).
        if record is not None:
            await record(written)
        if connected is not None:
            await ctx.activity(
                m.namespace,
                str(written["metadata"]["name"]),
                "driver_connected",
                {"run": run.pod, "driver": hello.get("driver_version", ""), "pid": hello.get("pid")},
            )

    if connected is not None:
        metrics.SANDBOX_CONNECT.observe(connected)
    await asyncio.gather(
        kube.create_core("secrets", secret),
        kube.patch_core("persistentvolumeclaims", m.workspace, volume_patch(s_obj)),
        kube.delete_core("secrets", m.key_secret),
        ctx.events.emit(kube, written, "Normal", "SandboxStarted", f"took warm sandbox pod {m.name}"),
        ctx.events.emit(
            kube, written, "Normal", "SandboxConnected", f"warm sandbox {m.name} connected as {run.pod}"
        )
        if connected is not None
        else asyncio.sleep(0),
        records(),
    )
