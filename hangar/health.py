"""Health checks behind the operator's and the api's ``/readyz`` and ``/healthz``: named checks, each an
awaitable that raises when its part is not working, run together with a timeout and answered from a short
cache (a probe every few seconds must not become load on the apiserver or the database).

Readiness says "send me work": it covers what the process needs from outside (the apiserver, with the RBAC
to list what it watches; the database; the driver gateway). Liveness says "restart me": it covers only the
process itself (its event loop answers, its long-running parts still run), never the apiserver, so an
apiserver outage does not restart every hangar pod.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from kubernetes_asyncio.client.exceptions import ApiException

from .kube import Kube
from .models import GROUP, VERSION

Check = Callable[[], Awaitable[None]]

# What the operator watches (kopf needs list and watch on each, in every served namespace).
WATCHED = ("environments", "sessions", "turns", "approvals", "jobs")


@dataclass
class Checks:
    checks: Mapping[str, Check]
    ttl: float = 2.0
    timeout: float = 3.0
    _cached: tuple[float, bool, dict[str, str]] | None = field(default=None, repr=False)

    async def run(self) -> tuple[bool, dict[str, str]]:
        """(all passed, each check's ``ok`` or why it failed)."""
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < self.ttl:
            return self._cached[1], self._cached[2]
        names = list(self.checks)
        answers = await asyncio.gather(*(self._one(self.checks[n]) for n in names))
        results = dict(zip(names, answers, strict=True))
        ok = all(v == "ok" for v in results.values())
        self._cached = (time.monotonic(), ok, results)
        return ok, results

    async def _one(self, check: Check) -> str:
        try:
            await asyncio.wait_for(check(), self.timeout)
            return "ok"
        except TimeoutError:
            return f"no answer within {self.timeout:g}s"
        except ApiException as e:
            return f"apiserver answered {e.status} {e.reason}"
        except Exception as e:
            return f"{type(e).__name__}: {e}"[:300]


def report(results: Mapping[str, str]) -> str:
    """One line a check, as ``kubectl describe``'s probe failure message shows the body's start."""
    return "".join(f"{name}: {why}\n" for name, why in results.items())


def flag(event: asyncio.Event, what: str) -> Check:
    async def check() -> None:
        if not event.is_set():
            raise RuntimeError(f"{what} not yet")

    return check


def listable(kube: Kube, namespaces: tuple[str, ...], plurals: tuple[str, ...] = WATCHED) -> Check:
    """The apiserver answers and RBAC lets this process list each of ``plurals`` in each namespace (``*``:
    cluster-wide), as its watches need."""

    async def one(ns: str, plural: str) -> None:
        try:
            if ns == "*":
                await kube.custom.list_cluster_custom_object(GROUP, VERSION, plural, limit=1)
            else:
                await kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural, limit=1)
        except ApiException as e:
            where = "cluster-wide" if ns == "*" else f"in {ns}"
            raise RuntimeError(f"cannot list {plural} {where}: {e.status} {e.reason}") from None

    async def check() -> None:
        await asyncio.gather(*(one(ns, p) for ns in namespaces for p in plurals))

    return check
