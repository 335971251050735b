"""A warm sandbox's claim, the writes after the session's status write (``pools.Pools.claim``): the pod and
its volume made the session's, the run's key Secret, the records (``after_claim``), and, at a start after an
operator stopped midway, what those writes left undone (``finish_claim``, from ``Sandboxes.check``; and
``left_halfway``, from a retirement)."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable

from hangar.kube import Obj
from hangar.models import Session
from hangar.models import labels as L

from . import metrics
from .context import Context
from .pool_objects import (
    CLAIM_SESSION,
    CLAIMED_AT,
    KEY_CLAIMED,
    KEY_RETIRED,
    MEMBER,
    Member,
    claim_patch,
    volume_patch,
)
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
    sandbox's run (its Secret made with its pod, before the status): its key is kept for the hello. A pod
    still labelled the pool's (the claim won on its key Secret; the operator stopped before the relabel)
    is made the session's."""
    kube = ctx.kube_in(ns)
    s = Session.model_validate(s_obj)
    took = s.status.workspace if s.status.workspace and s.status.workspace != pvc_name(s.name) else None
    pod_name = str(s.status.sandbox.pod or "")
    secret, pvc, pod = await asyncio.gather(
        kube.get_core("secrets", run.key_secret),
        kube.get_core("persistentvolumeclaims", took) if took else asyncio.sleep(0),
        kube.get_core("pods", pod_name) if took and pod_name else asyncio.sleep(0),
    )
    if pod and (pod["metadata"].get("labels") or {}).get(L.COMPONENT) == MEMBER:
        log.info("session %s/%s: its warm sandbox's pod %s becomes its own", ns, s.name, pod_name)
        await kube.patch_core("pods", pod_name, claim_patch(s_obj, run))
        await kube.delete_core("secrets", Member(ns, "", pod_name).key_secret)
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
    """The claim's writes after its status write, side by side: the pod's relabel and then the pool's key
    Secret's delete (its key is dead already: key_for_run refuses a claimed member; a stop between the two
    is mended by ``finish_claim``), the key Secret, the volume's re-owning, and the records. ``connected``: when the claim's write said the driver is connected (seconds since the
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

    async def the_pod() -> None:
        # The claim's record moves from the key Secret to the pod: relabelled first, so no pod is ever the
        # pool's without a key Secret that says whose it is.
        await kube.patch_core("pods", m.name, claim_patch(s_obj, run))
        # A session deleted before the relabel (its user deleted it as soon as it connected): the pod now
        # names a gone owner, which the garbage collector is slow to find (until its discovery knows the
        # kind, it can't look the owner up: 30 s and more after the CRDs were installed). Nobody's: it goes.
        # The watch's copy (a deleted session leaves the cache; a miss is read).
        now = await ctx.cached(m.namespace, "sessions", str(s_obj["metadata"]["name"]))
        if now is None or now["metadata"].get("uid") != s_obj["metadata"].get("uid"):
            log.info("session %s/%s went during its claim: its pod %s goes", m.namespace, run.session, m.name)
            await kube.delete_core("pods", m.name, grace_period_seconds=0)
        await kube.delete_core("secrets", m.key_secret)

    if connected is not None:
        metrics.SANDBOX_CONNECT.observe(connected)
    await asyncio.gather(
        the_pod(),
        kube.create_core("secrets", secret),
        kube.patch_core("persistentvolumeclaims", m.workspace, volume_patch(s_obj)),
        ctx.events.emit(kube, written, "Normal", "SandboxStarted", f"took warm sandbox pod {m.name}"),
        ctx.events.emit(
            kube, written, "Normal", "SandboxConnected", f"warm sandbox {m.name} connected as {run.pod}"
        )
        if connected is not None
        else asyncio.sleep(0),
        records(),
    )


async def left_halfway(ctx: Context, m: Member, now: float) -> bool:
    """A retirement's test-and-set found ``m``'s key Secret claimed or retired already: True when that was
    left halfway by a process that stopped (the member can go). Retired: its removal did not finish. Claimed
    more than a connect timeout ago by a session whose status does not name the pod: the claimer stopped
    before its status write (the session went on to another sandbox); one that names it is made the
    session's by its ``finish_claim``."""
    kube = ctx.kube_in(m.namespace)
    secret = await kube.get_core("secrets", m.key_secret)
    meta = (secret or {}).get("metadata") or {}
    component = (meta.get("labels") or {}).get(L.COMPONENT)
    if component == KEY_RETIRED:
        return True
    notes = meta.get("annotations") or {}
    try:
        at = float(notes.get(CLAIMED_AT) or "")
    except ValueError:
        at = 0.0
    if component != KEY_CLAIMED or now - at <= ctx.settings.connect_timeout:
        return False
    s_obj = await kube.get("sessions", str(notes.get(CLAIM_SESSION) or ""))
    if s_obj is not None and s_obj["metadata"].get("uid") == notes.get(L.CLAIMED_BY):
        return Session.model_validate(s_obj).status.sandbox.pod != m.name
    return True
