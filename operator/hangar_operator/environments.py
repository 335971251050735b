"""The Environment controller: an Environment's status says whether sessions may use it and how many do.

An Environment is a template: nothing runs for it. Its status holds ``Ready`` (the spec is one the operator
can build sandboxes from), ``observedGeneration`` and the number of sessions that name it. A session that
names a missing environment waits in ``Pending`` (``EnvironmentNotFound``) and starts once it exists.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from hangar.models import Environment

from .context import Context
from .status import patch_status

log = logging.getLogger("hangar.operator.environments")


class Environments:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def reconcile(self, ns: str, name: str) -> None:
        kube = self.ctx.kube_in(ns)
        # The watch's copy once primed (a recount comes a second after each session change: no GET each time).
        obj = await self.ctx.cached(ns, "environments", name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        try:
            env = Environment.model_validate(obj)
        except ValidationError as e:  # the CRD schema refuses such a spec first
            log.warning("environment %s/%s is not valid: %s", ns, name, e)
            return
        if self.ctx.cache.primed:  # counted in memory: the watch keeps the cache current
            specs = [o.get("spec") or {} for (n, _), o in self.ctx.cache.items("sessions") if n == ns]
        else:
            specs = [o.get("spec") or {} for o in await kube.list("sessions")]
        users = sum(1 for sp in specs if sp.get("environment") == name and not sp.get("stopped"))
        if (
            env.status.sessions != users
            or env.status.observed_generation != env.generation
            or not env.status.conditions
        ):
            await patch_status(kube, "environments", obj, {"sessions": users})
