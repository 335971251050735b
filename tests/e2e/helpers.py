"""Helpers for end-to-end tests: a REST client on the stack, environments, waiting for turns."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from hangar.devcluster import scripted_envs
from hangar.devcluster.stack import Stack, environment_object
from hangar.paths import cli_dir
from hangar.store import open_database
from hangar.testing.model_server import ScriptedModel

DONE = ("Completed", "Failed", "Interrupted", "NeedsInput")


def clis_installed() -> bool:
    bin_dir = cli_dir() / "node_modules" / ".bin"
    return all((bin_dir / n).exists() for n in ("claude", "codex"))


class Api:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.http = httpx.Client(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30
        )

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.http.get(path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.http.post(path, json=body, **kw)

    def delete(self, path: str) -> httpx.Response:
        return self.http.delete(path)

    def session(self, name: str) -> dict[str, Any]:
        r = self.get(f"/api/sessions/{name}")
        r.raise_for_status()
        return dict(r.json())

    def turn(self, name: str, n: int) -> dict[str, Any] | None:
        r = self.get(f"/api/sessions/{name}/turns/{n}")
        return dict(r.json()) if r.status_code == 200 else None

    def events(self, name: str, since: int = 0) -> list[dict[str, Any]]:
        r = self.get(f"/api/sessions/{name}/events", params={"since": since, "limit": 1000})
        r.raise_for_status()
        return list(r.json()["events"])

    def wait_turn(
        self, name: str, n: int, timeout: float = 90, phases: tuple[str, ...] = DONE
    ) -> dict[str, Any]:
        turn = self._wait_turn(name, n, timeout, phases)
        # The driver's turn_ended event is recorded just after its effect on the status: give it a moment
        # (a turn the operator ended itself, e.g. when its pod went, has none).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if any(e["kind"] == "turn_ended" and e.get("turn") == turn["name"] for e in self.events(name)):
                break
            time.sleep(0.1)
        return turn

    def _wait_turn(self, name: str, n: int, timeout: float, phases: tuple[str, ...]) -> dict[str, Any]:
        return wait(
            lambda: _phase_in(self.turn(name, n), phases),
            timeout,
            f"turn {n} of {name} in {phases}",
            lambda: self.debug(name),
        )

    def wait_event(
        self, name: str, pred: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        return wait(
            lambda: next((e for e in self.events(name) if pred(e)), None),
            timeout,
            "event",
            lambda: self.debug(name),
        )

    def debug(self, name: str) -> str:
        try:
            s = self.session(name)
            ev = self.events(name)
        except Exception as e:
            return f"(no session: {e})"
        return json.dumps({"session": s, "events": ev[-30:]}, indent=1)[-6000:]


def _phase_in(t: dict[str, Any] | None, phases: tuple[str, ...]) -> dict[str, Any] | None:
    return t if t is not None and t["phase"] in phases else None


def wait(fn: Callable[[], Any], timeout: float, what: str, debug: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{debug() if debug else ''}")


def environment(
    cluster: Any, name: str, env: dict[str, str] | None = None, approvals: str | None = None, **spec: Any
) -> None:
    """Applies an Environment (``environment_object``) with kubectl; ``spec`` takes other fields, camelCase."""
    body = environment_object(name, env, approvals=approvals, **spec)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def model_env(harness: str, model: ScriptedModel) -> dict[str, str]:
    """The variables that point a harness's CLI at the scripted model (the same as ``hangar dev``'s)."""
    return scripted_envs.model_env(harness, model.base_url)


def workspace(stack: Stack, session: str) -> Path:
    return stack.runner_root / "pvc" / stack.namespace / f"{session}-workspace" / "workspace"


def new_session(api: Api, name: str, env: str, harness: str, message: str, **extra: Any) -> None:
    """Creates a session over REST with its first message (Codex needs a model name for the scripted API)."""
    body = {"name": name, "environment": env, "harness": harness, "message": message, **extra}
    if harness == "codex":
        body.setdefault("model", "fake-model")
    r = api.post("/api/sessions", body)
    assert r.status_code == 201, r.text


def approvals(api: Api, session: str) -> dict[str, Any]:
    """GET /api/sessions/{session}/approvals: policy, pending and recent."""
    r = api.get(f"/api/sessions/{session}/approvals")
    assert r.status_code == 200, r.text
    return dict(r.json())


@contextmanager
def namespace_stack(cluster: Any, namespace: str, prefix: str, **kw: Any) -> Iterator[Stack]:
    """An operator and an API of their own in ``namespace`` (``kw``: Stack's settings); their pods run on the
    session stack's runner, which watches every namespace."""
    cluster.kubectl("create", "namespace", namespace, check=False)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    s = Stack(root, cluster.kubeconfig, namespace=namespace, **kw)
    try:
        s.start_operator()
        s.start_api()
        yield s
    finally:
        s.stop_all()
        if os.environ.get("HANGAR_KEEP_LOGS"):  # as the session stack's: a CI failure can be read after
            print(f"stack logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def audit(stack: Stack, action: str) -> list[dict[str, Any]]:
    """The stack's audit entries of ``action``, read from its database."""

    async def read() -> list[dict[str, Any]]:
        db = await open_database(stack.database_url)
        try:
            return await db.audit_entries(action, limit=1000)
        finally:
            await db.close()

    return asyncio.run(read())
