"""The api app driven in-process: ``create_app`` with its Kube replaced by the fake
(``hangar/testing/fake_kube.py``), a SQLite database in the test's directory, and Starlette's TestClient
(real HTTP semantics through the ASGI app: routing, middleware, validation, encoding)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from hangar.config import load
from hangar.models import API_VERSION
from hangar.store import open_database
from hangar.testing.fake_kube import FakeKube
from hangar_api.app import create_app

ADMIN = "rig-admin-token"
ALICE = "rig-alice-jobs-token"  # a jobs token
MCP = "rig-mcp-token"
BOB = "rig-bob-jobs-token"  # another jobs token: a repository's policy approver in some tests


def auth(token: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ApiRig:
    def __init__(self, client: TestClient, kube: FakeKube, database_url: str) -> None:
        self.client, self.kube, self.database_url = client, kube, database_url

    def env(self, name: str = "default") -> None:
        self.kube.seed(
            "environments",
            {
                "apiVersion": API_VERSION,
                "kind": "Environment",
                "metadata": {"name": name},
                "spec": {"image": "i"},
            },
        )

    def post(self, path: str, body: Any = None, token: str | None = ADMIN, **kw: Any) -> Any:
        headers = {**(auth(token) if token else {}), **kw.pop("headers", {})}
        if body is not None and "content" not in kw:
            kw["content"] = json.dumps(body)
            headers.setdefault("content-type", "application/json")
        return self.client.post(path, headers=headers, **kw)

    def get(self, path: str, token: str | None = ADMIN, **kw: Any) -> Any:
        return self.client.get(path, headers=auth(token) if token else {}, **kw)

    def delete(self, path: str, token: str | None = ADMIN, **kw: Any) -> Any:
        return self.client.delete(path, headers=auth(token) if token else {}, **kw)

    def audit(self, action: str = "api.refused") -> list[dict[str, Any]]:
        async def read() -> list[dict[str, Any]]:
            db = await open_database(self.database_url)
            try:
                return await db.audit_entries(action, limit=1000)
            finally:
                await db.close()

        return asyncio.run(read())


@contextmanager
def api_rig(tmp_path: Path, kube: FakeKube | None = None, **settings: Any) -> Iterator[ApiRig]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        json.dumps(
            [
                {"token": ADMIN, "subject": "root", "role": "admin"},
                {"token": ALICE, "subject": "alice", "role": "jobs"},
                {"token": MCP, "subject": "bot", "role": "mcp"},
                {"token": BOB, "subject": "bob", "role": "jobs"},
            ]
        )
    )
    url = f"sqlite:///{tmp_path / 'api.db'}"
    s = load(api_tokens_file=tokens, database_url=url, **settings)
    kube = kube or FakeKube()
    app = create_app(s, kube=kube)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield ApiRig(client, kube, url)
