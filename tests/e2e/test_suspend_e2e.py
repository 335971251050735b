"""Suspend and resume end to end (spec 002): an operator and an api with Tower enforcing, the Tower
simulator filing calls and delivering signed events to the webhook, the real CLI against the scripted model
on the local pod runner.

A governed risky call waits on Tower, the session is suspended (the pod gone, no slot held, a checkpoint on
the volume), Tower's allow resumes it in a new sandbox where the call runs exactly once, unasked, with the
conversation and the files intact. Tower's deny leaves it suspended until a person's new message; a run.stop
during the suspension withdraws the call at Tower and a later allow resumes nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.devcluster.stack import Stack, environment_object
from hangar.testing.model_server import ScriptedModel, Step
from hangar.testing.tower import TowerSimulator

from .conftest import Cluster
from .helpers import Api, approvals, audit, clis_installed, model_env, namespace_stack, new_session, wait

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]

NS = "gov-sus"
SECRET = b"gov-sus-webhook-secret"
CREDENTIAL = "gov-sus-credential"
# A call the deny-risky rules flag (force-push) whose running leaves a trace: git fails, echo appends.
PUSH = "git push --force origin main || echo ran >> ran.txt"


@pytest.fixture(scope="module")
def tower() -> Iterator[TowerSimulator]:
    t = TowerSimulator(credential=CREDENTIAL, secrets=[SECRET], retry_delays=(0.3,), max_attempts=40)
    t.start()
    try:
        yield t
    finally:
        t.stop()


@pytest.fixture(scope="module")
def gov(cluster: Cluster, stack: Stack, tower: TowerSimulator) -> Iterator[Stack]:
    cluster.kubectl("create", "namespace", NS, check=False)
    cluster.kubectl("-n", NS, "delete", "secret", "tower-webhook", "--ignore-not-found")
    cluster.kubectl(
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "tower-webhook",
        f"--from-literal=webhook-secret={SECRET.decode()}",
    )
    env = {
        "HANGAR_GOVERNANCE": "enforce",
        "HANGAR_GOVERNANCE_WEBHOOK_SECRET": "tower-webhook",
        "HANGAR_GOVERNANCE_URL": tower.url,
        "HANGAR_GOVERNANCE_CREDENTIAL": CREDENTIAL,
        "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS": "3",
    }
    with namespace_stack(cluster, NS, "hangar-gov-sus-", extra_env=env) as s:
        tower.webhook_url = s.api_url + "/api/governance/events"
        yield s


def workspace(stack: Stack, session: str) -> Path:
    return stack.runner_root / "pvc" / NS / f"{session}-workspace"


def suspend(
    cluster: Cluster,
    stack: Stack,
    gov: Stack,
    tower: TowerSimulator,
    model: ScriptedModel,
    name: str,
    harness: str,
) -> tuple[Api, str, dict[str, Any]]:
    """A session whose turn 1 wrote notes.txt, then asked for PUSH and was suspended on it."""
    model.add(
        Step(when="FIRST", text="Drafting.", command="echo draft > notes.txt"),
        Step(when="tool_result", text="Now pushing.", command=PUSH),
        Step(when="tool_result:Paused for approval", text="FINAL: waiting for the approval.", delay=5),
    )
    env = environment_object(f"{name}-env", model_env(harness, model))
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(env))
    api = Api(gov)
    new_session(api, name, f"{name}-env", harness, "FIRST write notes, then push", approvals="governed")
    s = wait(
        lambda: (x := api.session(name))["phase"] == "Suspended" and x,
        180,
        "suspended",
        lambda: api.debug(name),
    )
    [filed] = [f for f in tower.filed if f["session"] == name]
    receipt = filed["id"]
    assert filed["tool"] in ("Bash", "shell") and PUSH in filed["command"] and filed["policy"] == "governed"
    sus = s["suspended"]
    assert sus["tower"] == receipt and sus["reason"] == "approval" and sus["turn"] == f"{name}-1"
    # The sandbox is gone and holds no slot; the checkpoint is on the volume.
    assert s["sandbox"]["pod"] is None and s["sandbox"]["run"] is None
    pods = cluster.kubectl("-n", NS, "get", "pods", "-l", f"hangar.dev/session={name}", "-o", "name").stdout
    assert pods.strip() == "", pods
    [ck] = s["checkpoints"]
    assert ck["turn"] == f"{name}-1" and ck["size"] > 0 and ck["conversation"] == s["conversation"]
    assert (workspace(stack, name) / "checkpoints" / f"{ck['id']}.tar.gz").stat().st_size == ck["size"]
    pending = approvals(api, name)["pending"]
    assert [a["id"] for a in pending] == [sus["approval"]]
    cols = cluster.kubectl("-n", NS, "get", "hsess", name).stdout
    assert "Suspended" in cols and receipt in cols, cols
    assert not (workspace(stack, name) / "workspace" / "ran.txt").exists()
    return api, receipt, s


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_suspended_on_a_governed_call_then_towers_allow_resumes_it_and_the_call_runs_once(
    cluster: Cluster, stack: Stack, gov: Stack, tower: TowerSimulator, model: ScriptedModel, harness: str
) -> None:
    name = f"sus-allow-{harness}"
    try:
        api, receipt, before = suspend(cluster, stack, gov, tower, model, name, harness)
        model.add(
            Step(when="was approved by", text="Pushing again.", command=PUSH),
            Step(when="tool_result", text="FINAL: pushed."),
        )
        d = tower.decide(receipt, "allowed", by="lee@acme.test")
        assert d.done.wait(30) and d.final == 200, d.attempts
        t2 = api.wait_turn(name, 2, timeout=180)
        assert t2["phase"] == "Completed" and "pushed" in t2["summary"], api.debug(name)
        s = api.session(name)
        assert s["sandbox"]["pod"] == f"{name}-r2" and not s["suspended"] and not s["resuming"]
        assert s["conversation"] == before["conversation"], "the same conversation"
        # The call ran exactly once, unasked; the files of turn 1 are intact.
        ws = workspace(stack, name) / "workspace"
        assert (ws / "ran.txt").read_text() == "ran\n"
        assert (ws / "notes.txt").read_text() == "draft\n"
        recent = approvals(api, name)["recent"]
        first = next(a for a in recent if a["id"] == before["suspended"]["approval"])
        assert first["phase"] == "Allowed" and first["resolved_by"] == "tower"
        assert first["by"] == "tower:lee@acme.test" and first["receipt"] == receipt
        again = [a for a in recent if a["turn"] == f"{name}-2"]
        assert len(again) == 1 and again[0]["resolved_by"] == "tower" and again[0]["phase"] == "Allowed"
        # The resumed turn's request carries the conversation so far (turn 1's message).
        resumed = next(r for r in model.requests if r.contains("was approved by"))
        assert resumed.contains("FIRST write notes"), "the agent remembers the conversation"
        # The paused call's answer, with exactly the spec's words, is in that conversation.
        said = f"Paused for approval {receipt}; this turn resumes when it"
        assert resumed.contains(said), json.dumps(resumed.body.get("messages"))[-2000:]
        assert [e for e in audit(gov, "governance.precleared_call") if e["target"] == name]
    finally:
        cluster.kubectl("-n", NS, "delete", f"session.hangar.dev/{name}", "--wait=false", check=False)


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_towers_deny_leaves_it_suspended_and_a_new_message_starts_a_new_run(
    cluster: Cluster, stack: Stack, gov: Stack, tower: TowerSimulator, model: ScriptedModel, harness: str
) -> None:
    name = f"sus-deny-{harness}"
    try:
        api, receipt, _ = suspend(cluster, stack, gov, tower, model, name, harness)
        d = tower.decide(receipt, "denied", by="kim@acme.test", reason="not on a Friday")
        assert d.done.wait(30) and d.final == 200, d.attempts
        s = wait(
            lambda: (x := api.session(name))["suspended"].get("decision") == "denied" and x, 60, "the deny"
        )
        assert s["phase"] == "Suspended" and "not on a Friday" in s["message"]
        time.sleep(3)
        assert api.session(name)["phase"] == "Suspended" and api.session(name)["sandbox"]["pod"] is None
        model.add(Step(when="branch instead", text="FINAL: pushed to a branch."))
        r = api.post(f"/api/sessions/{name}/messages", {"message": "push to a branch instead"})
        assert r.status_code == 202, r.text
        t2 = api.wait_turn(name, 2, timeout=180)
        assert t2["phase"] == "Completed", api.debug(name)
        assert api.session(name)["sandbox"]["pod"] == f"{name}-r2"
        assert not (workspace(stack, name) / "workspace" / "ran.txt").exists()
    finally:
        cluster.kubectl("-n", NS, "delete", f"session.hangar.dev/{name}", "--wait=false", check=False)


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_run_stop_during_a_suspension_withdraws_the_call_and_a_later_allow_resumes_nothing(
    cluster: Cluster, stack: Stack, gov: Stack, tower: TowerSimulator, model: ScriptedModel, harness: str
) -> None:
    name = f"sus-stop-{harness}"
    try:
        api, receipt, before = suspend(cluster, stack, gov, tower, model, name, harness)
        d = tower.stop_run(session=name, by="lee@acme.test", reason="wrong repo")
        assert d.done.wait(30) and d.final == 200, d.attempts
        s = wait(lambda: (x := api.session(name))["phase"] == "Stopped" and x, 60, "stopped")
        assert not s["suspended"] and "wrong repo" in s["message"]
        wait(lambda: any(w[0] == receipt for w in tower.withdrawn), 30, "Tower told")
        ap = next(a for a in approvals(api, name)["recent"] if a["id"] == before["suspended"]["approval"])
        assert ap["phase"] == "Withdrawn"
        d = tower.decide(receipt, "allowed", by="lee@acme.test")
        assert d.done.wait(30) and d.final == 200, d.attempts
        wait(
            lambda: [e for e in audit(gov, "governance.resume_refused") if e["target"] == name],
            30,
            "governance.resume_refused",
        )
        time.sleep(3)
        s = api.session(name)
        assert s["phase"] == "Stopped" and s["sandbox"]["pod"] is None
        assert [t["index"] for t in api.get(f"/api/sessions/{name}").json()["turns"]] == [1]
    finally:
        cluster.kubectl("-n", NS, "delete", f"session.hangar.dev/{name}", "--wait=false", check=False)


def test_a_volume_lost_while_suspended_is_restored_from_its_snapshot_and_the_resumed_agent_sees_its_files(
    cluster: Cluster, stack: Stack, gov: Stack, tower: TowerSimulator, model: ScriptedModel
) -> None:
    """The checkpoint also snapshotted the workspace volume (the local runner emulates the CSI snapshot API);
    the volume is deleted while the session is suspended; Tower's allow resumes it on a volume made again
    from that snapshot: turn 1's file, the conversation and the checkpoint archive are all back."""
    name = "sus-lost-claude"
    try:
        api, receipt, before = suspend(cluster, stack, gov, tower, model, name, "claude")
        ck = before["checkpoints"][-1]
        snap = f"{name}-{ck['id']}"
        assert ck["snapshot"]["name"] == snap, ck
        vs = json.loads(cluster.kubectl("-n", NS, "get", "volumesnapshot", snap, "-o", "json").stdout)
        assert vs["spec"]["source"] == {"persistentVolumeClaimName": f"{name}-workspace"}
        assert vs["metadata"]["ownerReferences"][0]["name"] == name
        wait(
            lambda: api.session(name)["checkpoints"][-1]["snapshot"]["ready_to_use"],
            60,
            "the snapshot recorded ready",
            lambda: api.debug(name),
        )
        # The volume is lost: the claim deleted, its directory gone with it.
        cluster.kubectl("-n", NS, "delete", "pvc", f"{name}-workspace", "--timeout=60s")
        wait(lambda: not workspace(stack, name).exists(), 30, "the volume's directory gone")
        model.add(
            Step(when="was approved by", text="Pushing again.", command=PUSH),
            Step(when="tool_result", text="FINAL: pushed."),
        )
        d = tower.decide(receipt, "allowed", by="lee@acme.test")
        assert d.done.wait(30) and d.final == 200, d.attempts
        t2 = api.wait_turn(name, 2, timeout=180)
        assert t2["phase"] == "Completed" and "pushed" in t2["summary"], api.debug(name)
        pvc = json.loads(cluster.kubectl("-n", NS, "get", "pvc", f"{name}-workspace", "-o", "json").stdout)
        assert pvc["spec"]["dataSource"] == {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": snap,
        }
        ws = workspace(stack, name)
        assert (ws / "workspace" / "notes.txt").read_text() == "draft\n", "turn 1's file is back"
        assert (ws / "workspace" / "ran.txt").read_text() == "ran\n", "the call ran exactly once"
        assert (ws / "checkpoints" / f"{ck['id']}.tar.gz").stat().st_size == ck["size"]
        resumed = next(r for r in model.requests if r.contains("was approved by"))
        assert resumed.contains("FIRST write notes"), "the agent remembers the conversation"
        assert "workspace_restored" in [e["kind"] for e in api.events(name)]
    finally:
        cluster.kubectl("-n", NS, "delete", f"session.hangar.dev/{name}", "--wait=false", check=False)


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_a_decision_delivered_before_the_receipt_is_applied_once_the_call_is_filed(
    cluster: Cluster, stack: Stack, gov: Stack, tower: TowerSimulator, model: ScriptedModel, harness: str
) -> None:
    """Tower decides the moment the call is filed and its outbox delivers "decided" before the filing's
    answer reaches hangar (and no approval.created follows): the webhook finds no Approval with that receipt yet
    and keeps the decision; the operator applies it once it records the receipt (or, at worst, its minute's
    re-read does). The call runs once, unasked, without a suspension."""
    name = f"sus-early-{harness}"
    model.add(
        Step(when="EARLY", text="Pushing.", command=PUSH),
        Step(when="tool_result", text="FINAL: pushed."),
    )
    env = environment_object(f"{name}-env", model_env(harness, model))
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(env))
    api = Api(gov)
    tower.decide_on_filing = ("allowed", "lee@acme.test")
    try:
        new_session(api, name, f"{name}-env", harness, "EARLY: push the branch", approvals="governed")
        t1 = api.wait_turn(name, 1, timeout=180)
        assert t1["phase"] == "Completed" and "pushed" in t1["summary"], api.debug(name)
        [filed] = [f for f in tower.filed if f["session"] == name]
        receipt = filed["id"]
        [decided] = [d for d in tower.deliveries.values() if d.event.get("approval", {}).get("id") == receipt]
        assert decided.event["kind"] == "approval.decided" and decided.final == 200, decided.attempts
        # The webhook had no Approval with that receipt to apply it to: it kept it, and the operator applied it.
        assert json.loads(decided.answer) == {"ok": True, "decision": "allowed", "applied": 0}
        [ap] = [a for a in approvals(api, name)["recent"] if a["receipt"] == receipt]
        assert ap["phase"] == "Allowed" and ap["resolved_by"] == "tower" and ap["by"] == "tower:lee@acme.test"
        reads = [e for e in audit(gov, "governance.decision_read") if e["target"] == receipt]
        assert [(e["kind"], e["status"]) for e in reads] == [("approval.decided", "allowed")]
        assert (workspace(stack, name) / "workspace" / "ran.txt").read_text() == "ran\n"
        assert "suspending" not in [e["kind"] for e in api.events(name)]
    finally:
        tower.decide_on_filing = None
        cluster.kubectl("-n", NS, "delete", f"session.hangar.dev/{name}", "--wait=false", check=False)


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_tower_down_when_it_allows_a_suspended_call_is_503_then_the_retry_resumes_it_once(
    cluster: Cluster, stack: Stack, gov: Stack, tower: TowerSimulator, model: ScriptedModel, harness: str
) -> None:
    """Tower allows a suspended session's call while its decisions API is down: the webhook cannot read the
    decision back, answers 503 and applies nothing (the session stays suspended); once Tower is up the
    outbox's retry is accepted and applied once: the session resumes, turn 2 completes, the call ran once."""
    name = f"sus-down-{harness}"
    try:
        api, receipt, _ = suspend(cluster, stack, gov, tower, model, name, harness)
        model.add(
            Step(when="was approved by", text="Pushing again.", command=PUSH),
            Step(when="tool_result", text="FINAL: pushed."),
        )
        [created] = [d for d in tower.deliveries.values() if d.event.get("approval", {}).get("id") == receipt]
        assert created.event["kind"] == "approval.created" and created.done.wait(30), created.attempts

        def reads() -> list[tuple[str, str, str]]:
            found = audit(gov, "governance.decision_read")
            return sorted((e["kind"], e["status"], e["event"]) for e in found if e["target"] == receipt)

        read_created = ("approval.created", "pending", created.event["id"])
        assert reads() == [read_created]
        tower.available = False
        try:
            d = tower.decide(receipt, "allowed", by="lee@acme.test")
            wait(lambda: 503 in d.attempts, 30, "a 503 while Tower is down")
            assert not d.done.is_set(), d.attempts
            s = api.session(name)
            assert s["phase"] == "Suspended" and s["suspended"]["tower"] == receipt and not s["resuming"], s
            assert s["sandbox"]["pod"] is None
            assert reads() == [read_created], "nothing read, nothing applied"
        finally:
            tower.available = True
        assert d.done.wait(30) and d.final == 200, d.attempts
        assert d.attempts.count(200) == 1 and set(d.attempts[:-1]) == {503}, d.attempts
        t2 = api.wait_turn(name, 2, timeout=180)
        assert t2["phase"] == "Completed" and "pushed" in t2["summary"], api.debug(name)
        assert (workspace(stack, name) / "workspace" / "ran.txt").read_text() == "ran\n"
        assert reads() == [read_created, ("approval.decided", "allowed", d.event["id"])]
    finally:
        cluster.kubectl("-n", NS, "delete", f"session.hangar.dev/{name}", "--wait=false", check=False)
