"""The one Runtime of this operator process (kopf handlers are module-level functions)."""

from __future__ import annotations

from .runtime import Runtime

_runtime: Runtime | None = None


def set_runtime(rt: Runtime | None) -> None:
    global _runtime
    _runtime = rt


def runtime() -> Runtime:
    if _runtime is None:
        raise RuntimeError("the operator runtime is not started")
    return _runtime
