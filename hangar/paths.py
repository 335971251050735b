"""Well-known places on the local machine."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The source checkout (hangar runs from an editable install in development and CI)."""
    return Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hangar"


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hangar"


def cli_dir() -> Path:
    """Where the pinned agent CLIs are installed (world-readable when root: the agent runs as another uid)."""
    env = os.environ.get("HANGAR_CLI_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/hangar/clis")
    return cache_dir() / "clis"
