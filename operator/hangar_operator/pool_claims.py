"""A warm sandbox's claim, the writes beside the session's status write (``pools.Pools._adopt``): the
member's volume made the session's, and, at a start after an operator stopped midway, what those writes
left undone (``finish_claim``, from ``Sandboxes.check``)."""

from __future__ import annotations

import asyncio
import base64
import logging

from hangar.kube import Obj
from hangar.models import Session

from .context import Context
from .pool_objects import volume_patch
from .runs import Run
from .sandbox_objects import pvc_name

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
