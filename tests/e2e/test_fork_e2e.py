"""Session forks end to end: REST / the CLI / kubectl → Session with spec.forkOf → operator (policy, taint,
conversation) → a cloned workspace volume (the local runner's clone) → the driver → the real CLI forking
the parent's conversation (Claude Code --fork-session, Codex thread/fork) against a ScriptedModel."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from ..integration.test_harness_real_clis import Rig, make_rig  # noqa: F401 (make_rig is a fixture)
from .conftest import Cluster
from .helpers import Api, approvals, clis_installed, new_session, wait, workspace
from .test_approvals_e2e import decide, make_env, wait_pending
from .test_cli_e2e import hangar

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]


def session_names(api: Api) -> list[str]:
    return [s["name"] for s in api.get("/api/sessions").json()["sessions"]]


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_fork_keeps_policy_taint_workspace_and_conversation(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    model.add(
        Step(when="PARENT", text="Writing.", command="echo from-parent > parent.txt"),
        Step(when="tool_result", text="FINAL: the parent wrote parent.txt"),
        Step(when="FORKED", text="Writing again.", command="echo from-fork > fork.txt"),
        Step(when="tool_result", text="FINAL: the fork wrote fork.txt"),
    )
    parent, fork, env = f"fk-parent-{harness}", f"fk-child-{harness}", f"fk-env-{harness}"
    # The environment says auto: ask is the parent's own (spec.approvals), and the fork must keep it.
    make_env(cluster, env, harness, model, approvals="auto")
    api = Api(stack)
    try:
        new_session(api, parent, env, harness, "PARENT: write parent.txt", approvals="ask", tainted=True)
        a = wait_pending(api, parent)
        assert decide(api, parent, a["id"], "allow").status_code == 200
        t = api.wait_turn(parent, 1)
        assert t["phase"] == "Completed", api.debug(parent)
        p = wait(lambda: (x := api.session(parent))["phase"] == "Idle" and x, 20, "parent idle")
        assert p["policy"] == "ask" and p["taint"]["tainted"] and p["conversation"]
        parent_conversation = p["conversation"]

        r = api.post(f"/api/sessions/{parent}/fork", {"name": fork, "message": "FORKED: write fork.txt"})
        assert r.status_code == 201, r.text
        view = r.json()
        assert view["name"] == fork and view["fork_of"] == parent
        assert view["harness"] == harness and view["environment"] == env and view["approvals"] is None

        # The fork's tool call asks: the parent's policy, not the environment's auto.
        fa = wait_pending(api, fork)
        assert fa["policy"] == "ask" and fa["session"] == fork and fa["tainted"], fa
        s = api.session(fork)
        assert s["policy"] == "ask", s
        assert s["taint"]["tainted"], s
        assert any(f"forked from {parent} (tainted:" in why for why in s["taint"]["reasons"]), s["taint"]
        origin = s["forked_from"]
        assert origin["session"] == parent and origin["conversation"] == parent_conversation
        assert origin["policy"] == "ask" and origin["tainted"] and origin["at"]
        # The workspace is a clone of the parent's.
        assert (workspace(stack, fork) / "parent.txt").read_text().strip() == "from-parent"
        # The fork's first request carried the parent's conversation.
        first = next(req for req in model.requests if req.contains("FORKED: write fork.txt"))
        assert first.contains("PARENT: write parent.txt") and first.contains("the parent wrote parent.txt")

        assert decide(api, fork, fa["id"], "allow").status_code == 200
        t = api.wait_turn(fork, 1)
        assert t["phase"] == "Completed" and "the fork wrote fork.txt" in t["summary"], api.debug(fork)
        assert t["taint"] and t["policy"] == "ask"
        assert (workspace(stack, fork) / "fork.txt").read_text().strip() == "from-fork"
        assert not (workspace(stack, parent) / "fork.txt").exists(), "the parent's workspace is its own"
        # A conversation of its own, and the parent's is left as it was.
        s = wait(
            lambda: (x := api.session(fork))["conversation"] != parent_conversation and x,
            20,
            "the fork's own conversation",
            lambda: api.debug(fork),
        )
        assert s["conversation"] and api.session(parent)["conversation"] == parent_conversation
        assert s["forked_from"]["conversation"] == parent_conversation
        assert any(e["kind"] == "forked" for e in api.events(fork))
        assert not model.unmatched
    finally:
        for name in (fork, parent):
            api.delete(f"/api/sessions/{name}")


def test_kubectl_fork_waits_for_its_parent_then_keeps_its_policy_and_taint(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(
        Step(when="HELLO", text="FINAL: hello there"),
        Step(when="KFORK", text="Writing.", command="echo k > k.txt"),
        Step(when="tool_result", text="FINAL: not written"),
    )
    parent, fork, env = "fk-k-parent", "fk-k-child", "fk-k-env"
    make_env(cluster, env, "claude", model)  # the environment says nothing about approvals
    api = Api(stack)
    obj = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": fork},
        "spec": {"harness": "claude", "environment": env, "forkOf": parent, "prompt": "KFORK: write k.txt"},
    }
    try:
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))
        s = wait(
            lambda: (x := api.session(fork))["reason"] == "ParentNotFound" and x,
            30,
            "ParentNotFound",
            lambda: api.debug(fork),
        )
        assert s["phase"] == "Pending" and f"parent session '{parent}' does not exist" in s["message"]
        assert s["forked_from"] is None and s["counters"].get("turns", 0) == 0

        # The parent appears: the operator's timer picks the fork up.
        new_session(api, parent, env, "claude", "HELLO", approvals="ask", tainted=True)
        s = wait(
            lambda: (x := api.session(fork))["forked_from"] and x, 30, "forkedFrom", lambda: api.debug(fork)
        )
        assert s["forked_from"]["session"] == parent and s["forked_from"]["tainted"]
        fa = wait_pending(api, fork)
        assert fa["policy"] == "ask" and fa["tainted"]
        s = api.session(fork)
        assert s["policy"] == "ask" and s["taint"]["tainted"] and s["reason"] != "ParentNotFound"
        out = cluster.kubectl("get", "hsess", fork, "-o", "jsonpath={.status.policy} {.status.taint.tainted}")
        assert out.stdout == "ask true"
        assert decide(api, fork, fa["id"], "deny").status_code == 200
        t = api.wait_turn(fork, 1)
        assert t["phase"] == "Completed" and not (workspace(stack, fork) / "k.txt").exists()
        assert approvals(api, fork)["policy"] == "ask"
    finally:
        cluster.kubectl("delete", "hsess", fork, parent, "--ignore-not-found", check=False)


def test_fork_refusals_create_nothing_and_the_cli_forks(cluster: Cluster, stack: Stack) -> None:
    parent = "fk-bad-parent"
    obj = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": parent},
        # Stopped: no sandbox, nothing runs; a fork of it is still a fork.
        "spec": {
            "harness": "claude",
            "environment": "fk-bad-env",
            "stopped": True,
            "approvals": "deny-risky",
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(obj))
    api = Api(stack)
    try:
        before = session_names(api)
        r = api.post("/api/sessions/fk-nobody/fork", {"name": "fk-x"})
        assert r.status_code == 404 and r.json()["detail"] == "no session 'fk-nobody'", r.text
        r = api.post(f"/api/sessions/{parent}/fork", {"name": parent})
        assert r.status_code == 409 and "already exists" in r.json()["detail"], r.text
        for bad in (
            {"name": "Bad_Name"},
            {"name": "x" * 41},
            {},
            {"name": "fk-y", "approvals": "sometimes"},
            {"name": "fk-y", "message": ""},
        ):
            r = api.post(f"/api/sessions/{parent}/fork", bad)
            assert r.status_code == 422, (bad, r.text)
        assert session_names(api) == before

        r = hangar(stack, "session", "fork", "fk-nobody", "fk-x")
        assert r.returncode == 1 and "error 404: no session 'fk-nobody'" in r.stderr
        r = hangar(stack, "session", "fork", parent, "fk-cli", "--approvals", "ask")
        assert r.returncode == 0 and "session fk-cli created, forked from fk-bad-parent" in r.stdout, r.stderr
        out = cluster.kubectl("get", "hsess", "fk-cli", "-o", "jsonpath={.spec}")
        spec = json.loads(out.stdout)
        assert spec["forkOf"] == parent and spec["approvals"] == "ask"
        r = hangar(stack, "session", "get", "fk-cli")
        assert "forked from fk-bad-parent" in r.stdout
    finally:
        cluster.kubectl("delete", "hsess", "fk-cli", parent, "--ignore-not-found", check=False)


@pytest.mark.parametrize("name", ["claude", "codex", "pi"])
def test_driver_forks_the_conversation(make_rig: Callable[..., Rig], name: str) -> None:  # noqa: F811
    """start_turn's fork, against each real CLI: a new conversation that starts with the parent's, which
    goes on without the fork's messages. One HOME, as the fork's cloned volume looks on a cluster."""
    rig = make_rig(
        name,
        [
            Step(when="FIRST", text="FINAL: one"),
            Step(when="FORKED", text="FINAL: forked"),
            Step(when="PARENT AGAIN", text="FINAL: parent again"),
        ],
    )
    assert rig.run("FIRST message")["outcome"] == "completed"
    parent = rig.conversation
    assert parent
    cfg = rig.cfg("FORKED message", conversation=parent)
    cfg.fork = True
    rig.harness.start_turn(cfg)
    ended = rig.events.ended(cfg.turn_id)
    assert ended["outcome"] == "completed" and "forked" in ended["summary"], ended
    assert rig.model.requests[-1].contains("FIRST message")
    assert rig.conversation and rig.conversation != parent
    cfg = rig.cfg("PARENT AGAIN", conversation=parent)
    rig.harness.start_turn(cfg)
    assert rig.events.ended(cfg.turn_id)["outcome"] == "completed"
    last = rig.model.requests[-1]
    assert last.contains("FIRST message") and not last.contains("FORKED message")
    assert rig.conversation == parent and not rig.model.unmatched


def test_local_runner_clones_a_claim_and_waits_for_a_missing_source(cluster: Cluster, stack: Stack) -> None:
    """The local runner plays the CSI driver: a PVC with a PVC dataSource starts as a copy of it (owners
    and modes kept); a missing source leaves it Pending with an Event saying why."""

    def pvc(name: str, source: str | None = None) -> str:
        spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        }
        if source:
            spec["dataSource"] = {"kind": "PersistentVolumeClaim", "name": source}
        return json.dumps(
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}
        )

    def phase(name: str) -> str:
        return cluster.kubectl("get", "pvc", name, "-o", "jsonpath={.status.phase}").stdout

    pvc_dir = stack.runner_root / "pvc" / stack.namespace
    try:
        cluster.kubectl("create", "-f", "-", input=pvc("fk-orphan", source="fk-none"))
        wait(
            lambda: (
                "source claim 'fk-none' does not exist"
                in cluster.kubectl(
                    "get", "events", "--field-selector", "involvedObject.name=fk-orphan"
                ).stdout
            ),
            30,
            "the ProvisioningFailed event",
        )
        assert phase("fk-orphan") == "Pending"
        cluster.kubectl("create", "-f", "-", input=pvc("fk-src"))
        wait(lambda: phase("fk-src") == "Bound", 30, "fk-src bound")
        secret = pvc_dir / "fk-src" / "home" / "secret.txt"
        secret.parent.mkdir(parents=True)
        secret.write_text("mine")
        secret.chmod(0o600)
        os.chown(secret, 1001, 1001)
        cluster.kubectl("create", "-f", "-", input=pvc("fk-clone", source="fk-src"))
        wait(lambda: phase("fk-clone") == "Bound", 30, "fk-clone bound")
        copy = pvc_dir / "fk-clone" / "home" / "secret.txt"
        st = copy.stat()
        assert copy.read_text() == "mine" and (st.st_uid, st.st_mode & 0o777) == (1001, 0o600)
        assert phase("fk-orphan") == "Pending"
    finally:
        cluster.kubectl("delete", "pvc", "fk-orphan", "fk-src", "fk-clone", "--ignore-not-found", check=False)
