"""The client context: which API to talk to, with which token (``hangar dev up`` writes it)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..paths import state_dir


def context_file() -> Path:
    return Path(os.environ.get("HANGAR_CONTEXT") or state_dir() / "dev" / "context.json")


@dataclass(frozen=True)
class Context:
    api_url: str
    token: str
    kubeconfig: str | None = None
    namespace: str = "default"


def load() -> Context:
    url, token = os.environ.get("HANGAR_URL"), os.environ.get("HANGAR_TOKEN")
    if url and token:
        return Context(url, token, os.environ.get("KUBECONFIG"))
    path = context_file()
    if not path.exists():
        raise SystemExit(
            f"no hangar context: run `hangar dev up`, or set HANGAR_URL and HANGAR_TOKEN (looked in {path})"
        )
    data = json.loads(path.read_text())
    return Context(data["api_url"], data["token"], data.get("kubeconfig"), data.get("namespace", "default"))


def save(ctx: Context, path: Path | None = None) -> Path:
    path = path or context_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ctx.__dict__, indent=2))
    path.chmod(0o600)
    return path
