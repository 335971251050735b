"""Sandbox slots: sessions beyond HANGAR_MAX_SANDBOXES wait in Pending and say why, then start."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from hangar.devcluster.stack import Stack, environment_object

from .conftest import Cluster
from .helpers import Api, namespace_stack, wait

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def one_slot(cluster: Cluster, stack: Stack) -> Iterator[Stack]:
    """An operator and API in namespace `slots` allowed one sandbox; pods run on the main stack's runner."""
    with namespace_stack(cluster, "slots", "hangar-slots-", extra_env={"HANGAR_MAX_SANDBOXES": "1"}) as s:
        yield s


def test_a_session_waits_for_a_slot_and_starts_when_one_frees(cluster: Cluster, one_slot: Stack) -> None:
    cluster.kubectl(
        "apply",
        "-n",
        "slots",
        "-f",
        "-",
        input=json.dumps(
            environment_object("slot-env", harnessOptions={"command": ["sh", "-c", "echo ok", "x"]})
        ),
    )
    api = Api(one_slot)
    assert (
        api.post(
            "/api/sessions", {"name": "slot-a", "environment": "slot-env", "harness": "antigravity"}
        ).status_code
        == 201
    )
    wait(lambda: (api.session("slot-a")["sandbox"] or {}).get("connected"), 60, "slot-a connected")
    assert (
        api.post(
            "/api/sessions",
            {"name": "slot-b", "environment": "slot-env", "harness": "antigravity", "message": "hello"},
        ).status_code
        == 201
    )
    b = wait(
        lambda: (s := api.session("slot-b"))["phase"] == "Pending" and s["message"] and s,
        30,
        "slot-b pending",
    )
    assert b["reason"] == "NoSandboxSlot"
    assert b["message"] == "waiting for a sandbox slot (1 of 1 in use)"
    assert b["sandbox"]["pod"] is None
    out = cluster.kubectl("get", "hsess", "-n", "slots").stdout
    assert "slot-b" in out and "Pending" in out
    assert api.delete("/api/sessions/slot-a").status_code == 202
    t1 = api.wait_turn("slot-b", 1, 60)
    assert t1["phase"] == "Completed" and "ok" in t1["summary"]
