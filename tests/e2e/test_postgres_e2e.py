"""hangar on PostgreSQL: a second operator and API (namespace `pg`) whose history lives in a real server."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from hangar.devcluster.stack import Stack
from hangar.store import open_database
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, clis_installed, namespace_stack

PG_URL = os.environ.get("HANGAR_TEST_POSTGRES_URL", "")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
    pytest.mark.skipif(
        not PG_URL, reason="HANGAR_TEST_POSTGRES_URL is not set (tools/test.sh starts a server)"
    ),
]


@pytest.fixture(scope="module")
def pg_stack(cluster: Cluster, stack: Stack) -> Iterator[Stack]:
    """Operator and API on PostgreSQL in their own namespace; pods run on the session stack's runner."""
    with namespace_stack(cluster, "pg", "hangar-pg-stack-", database_url=PG_URL) as s:
        yield s


def test_a_session_on_postgresql(cluster: Cluster, stack: Stack, pg_stack: Stack) -> None:
    model = ScriptedModel(
        [
            Step(text="Writing.", command="echo pg > pg.txt"),
            Step(when="tool_result", text="FINAL: stored in postgres"),
        ]
    )
    url = model.start()
    try:
        cluster.kubectl(
            "apply",
            "-n",
            "pg",
            "-f",
            "-",
            input=(
                '{"apiVersion": "hangar.dev/v1alpha1", "kind": "Environment", "metadata": {"name": "pg-env"},'
                ' "spec": {"image": "ghcr.io/hangar-dev/hangar-sandbox:0.1.0", "env": ['
                f'{{"name": "ANTHROPIC_BASE_URL", "value": "{url}"}},'
                ' {"name": "ANTHROPIC_API_KEY", "value": "sk-ant-test"}]}}'
            ),
        )
        api = Api(pg_stack)
        r = api.post("/api/sessions", {"name": "pg-sess", "environment": "pg-env", "message": "write pg.txt"})
        assert r.status_code == 201, r.text
        t1 = api.wait_turn("pg-sess", 1)
        assert t1["phase"] == "Completed" and "stored in postgres" in t1["summary"], api.debug("pg-sess")
        # A driver event's effect (the turn's status) is applied before the event is recorded, so that a
        # crash in between re-applies it instead of losing it: the event may land a moment later.
        api.wait_event("pg-sess", lambda e: e["kind"] == "turn_ended")
        events = api.events("pg-sess")
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))

        async def from_postgres() -> tuple[int, list[dict[str, object]]]:
            db = await open_database(PG_URL)
            try:
                return await db.last_seq("session/pg-sess"), await db.audit_entries("session.create")
            finally:
                await db.close()

        last, audit = asyncio.run(from_postgres())
        assert last == events[-1]["seq"]
        assert any(a["target"] == "pg-sess" for a in audit)
        # The sqlite stack's API doesn't know this session: each deployment has its own namespace.
        assert Api(stack).get("/api/sessions/pg-sess").status_code == 404
    finally:
        model.stop()
