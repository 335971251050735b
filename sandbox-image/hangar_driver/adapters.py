"""The harness adapter registry: ``make_harness(name, emit)`` returns the adapter for ``claude``, ``codex``,
``pi`` or ``antigravity``.

Standard library only, Python 3.8+. This module imports the adapters; none of them imports it (what they
share is in ``harness``, ``process`` and ``live``).
"""

from __future__ import annotations

from .claude import ClaudeHarness
from .codex import CodexHarness
from .harness import Emit, Harness
from .oneshot import CommandHarness, PiHarness

NAMES = ("claude", "codex", "pi", "antigravity")


def make_harness(name: str, emit: Emit) -> Harness:
    """The adapter for harness ``name``. Raises ValueError for an unknown name."""
    if name == "claude":
        return ClaudeHarness(emit)
    if name == "codex":
        return CodexHarness(emit)
    if name == "pi":
        return PiHarness(emit)
    if name == "antigravity":
        return CommandHarness(emit)
    raise ValueError("unknown harness %r (known: %s)" % (name, ", ".join(NAMES)))
