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
    the records. ``connected``: when the claim's write said the driver is connected (seconds since the
    claim began), else None; then what the hello's own path records is recorded here, after the write (its
    ``on_connect``, which waits for the session's lock, finds it done: ``Pools.took_connect``)."""
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
