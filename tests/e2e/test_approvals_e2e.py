"""Tool approvals and taint end to end: REST / kubectl → Approval resources → operator → driver → the real
CLI (Claude Code and Codex against a ScriptedModel), and back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, approvals, clis_installed, environment, model_env, new_session, wait, workspace

pytestmark = [pytest.mark.e2e]
needs_clis = pytest.mark.skipif(
    not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"
)
HARNESSES = ["claude", "codex"]


def make_env(
    cluster: Cluster,
    name: str,
    harness: str,
    model: ScriptedModel,
    *,
    approvals: str | None = None,
    timeout: int | None = None,
    overrides: dict[str, Any] | None = None,
) -> None:
    environment(
        cluster,
        name,
        model_env(harness, model),
        approvals,
        approvalTimeoutSeconds=timeout or None,
        podOverrides=overrides or None,
    )


def wait_pending(
    api: Api, session: str, exclude: tuple[str, ...] = (), timeout: float = 90
) -> dict[str, Any]:
    def look() -> dict[str, Any] | None:
        return next((a for a in approvals(api, session)["pending"] if a["id"] not in exclude), None)

    found: dict[str, Any] = wait(
        look, timeout, f"a pending approval on {session}", lambda: api.debug(session)
    )
    return found


def delivered(api: Api, session: str, ident: str, timeout: float = 30) -> dict[str, Any]:
    """Approval ``ident`` among the session's recent ones once its answer's delivery is recorded: the driver
    confirms it as it writes it to the CLI, and the operator records ``deliveredAt`` on a task of its own, so
    the turn may end a moment before it shows."""

    def look() -> dict[str, Any] | None:
        rec = next((x for x in approvals(api, session)["recent"] if x["id"] == ident), None)
        return rec if rec is not None and rec["delivered_at"] else None

    found: dict[str, Any] = wait(look, timeout, f"{ident} delivered", lambda: api.debug(session))
    return found


def decide(api: Api, session: str, ident: str, decision: str, message: str | None = None) -> Any:
    body: dict[str, Any] = {"decision": decision}
    if message is not None:
        body["message"] = message
    return api.post(f"/api/sessions/{session}/approvals/{ident}", body)


def script(model: ScriptedModel, steps: list[Step]) -> ScriptedModel:
    model.add(*steps)
    return model


def cleanup(api: Api, *sessions: str) -> None:
    for s in sessions:
        api.delete(f"/api/sessions/{s}")


# -- ask -----------------------------------------------------------------------------------------------------


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_ask_allow_runs_the_command_and_bad_decisions_are_refused(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    script(
        model,
        [
            Step(text="Writing.", command="echo hi > allowed.txt"),
            Step(when="tool_result", text="FINAL: written."),
        ],
    )
    name = f"apr-allow-{harness}"
    make_env(cluster, f"apr-env-{harness}", harness, model)
    api = Api(stack)
    try:
        new_session(api, name, f"apr-env-{harness}", harness, "write it", approvals="ask")
        a = wait_pending(api, name)
        assert "echo hi > allowed.txt" in a["command"]
        assert a["policy"] == "ask" and a["why"] == "approvals: ask" and a["phase"] == "Pending"
        assert a["id"].startswith("ap-") and len(a["id"]) == 15 and a["deadline"]
        # When the agent asked, by the sandbox's clock (its driver read the prompt): kept, never after the
        # operator had it.
        assert a["sandbox_asked_at"] and a["sandbox_asked_at"] <= a["requested_at"], a
        listing = approvals(api, name)
        assert listing["policy"] == "ask"

        # The session's record and the activity event follow the Approval's status write (it is listed from
        # its create on): a moment later, not never.
        def recorded() -> bool:
            pending = [p["id"] for p in api.session(name)["pending_approvals"]]
            asked = any(
                e["kind"] == "approval_request" and e["approval"] == a["id"] for e in api.events(name)
            )
            assert pending in ([], [a["id"]]), pending
            return pending == [a["id"]] and asked

        wait(recorded, 30, f"{a['id']} in {name}'s pending_approvals and events", lambda: api.debug(name))
        assert not (workspace(stack, name) / "allowed.txt").exists(), "nothing ran before the decision"
        # Bad input: a decision that doesn't exist, an unknown approval, another session's path.
        r = decide(api, name, a["id"], "maybe")
        assert r.status_code == 422, r.text
        assert decide(api, name, "ap-000000000000", "allow").status_code == 404
        assert decide(api, "apr-nope", a["id"], "allow").status_code == 404
        r = decide(api, name, a["id"], "allow")
        assert r.status_code == 200, r.text
        assert r.json()["decision"] == "allow"
        # Deciding twice: 409, and the first decision is kept.
        r = decide(api, name, a["id"], "deny", "changed my mind")
        assert r.status_code == 409 and "already decided: allow" in r.json()["detail"], r.text
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed", api.debug(name)
        assert (workspace(stack, name) / "allowed.txt").read_text().strip() == "hi"
        done = approvals(api, name)
        assert done["pending"] == [] and api.session(name)["pending_approvals"] == []
        rec = delivered(api, name, a["id"])
        assert rec["phase"] == "Allowed" and rec["decision"] == "allow" and rec["resolved_by"] == "person"
        assert rec["by"] == "admin" and rec["decided_at"] and rec["delivered_at"]
        assert decide(api, name, a["id"], "deny").status_code == 409
    finally:
        cleanup(api, name)


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_ask_deny_reaches_the_agent_and_the_turn_goes_on(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    script(
        model,
        [
            Step(text="Writing.", command="echo hi > denied.txt"),
            Step(when="tool_result", text="FINAL: understood, not writing."),
            Step(when="not in this repo", text="FINAL: understood, not writing."),
        ],
    )
    name = f"apr-deny-{harness}"
    make_env(cluster, f"apr-env-{harness}", harness, model)
    api = Api(stack)
    try:
        new_session(api, name, f"apr-env-{harness}", harness, "write it", approvals="ask")
        a = wait_pending(api, name)
        r = decide(api, name, a["id"], "deny", "not in this repo")
        assert r.status_code == 200, r.text
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["outcome"] == "completed", api.debug(name)
        assert not (workspace(stack, name) / "denied.txt").exists()
        assert any(req.contains("not in this repo") for req in model.requests[1:]), (
            "the agent got the message"
        )
        rec = next(x for x in approvals(api, name)["recent"] if x["id"] == a["id"])
        assert (
            rec["phase"] == "Denied"
            and rec["message"] == "not in this repo"
            and rec["resolved_by"] == "person"
        )
    finally:
        cleanup(api, name)


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_unanswered_approval_is_denied_at_the_deadline(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    script(
        model,
        [
            Step(text="Writing.", command="echo hi > late.txt"),
            Step(when="tool_result", text="FINAL: no answer, moving on."),
            Step(when="no decision", text="FINAL: no answer, moving on."),
        ],
    )
    name = f"apr-timeout-{harness}"
    make_env(cluster, f"apr-env-short-{harness}", harness, model, timeout=3)
    api = Api(stack)
    try:
        new_session(api, name, f"apr-env-short-{harness}", harness, "write it", approvals="ask")
        a = wait_pending(api, name)
        t = api.wait_turn(name, 1, 60)
        assert t["phase"] == "Completed", api.debug(name)
        assert not (workspace(stack, name) / "late.txt").exists()
        rec = next(x for x in approvals(api, name)["recent"] if x["id"] == a["id"])
        assert rec["phase"] == "Expired" and rec["decision"] == "deny" and rec["resolved_by"] == "timeout"
        assert "no decision within 3 s" in rec["message"]
        r = decide(api, name, a["id"], "allow")
        assert r.status_code == 409 and "expired" in r.json()["detail"], r.text
        assert any(req.contains("no decision within 3 s") for req in model.requests[1:])
    finally:
        cleanup(api, name)


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_allow_always_lasts_the_turn_and_the_next_turn_asks_again(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    # Claude's own suggestion for `git init -q r1` is the session rule `Bash(git init *)`; Codex's
    # acceptForSession covers the same command again.
    first, second = ("git init -q r1", "git init -q r2") if harness == "claude" else ("git init -q r1",) * 2
    script(
        model,
        [
            Step(text="First.", command=first),
            Step(when="tool_result", text="Again.", command=second),
            Step(when="tool_result", text="FINAL: twice."),
            Step(when="ONCE MORE", text="Once more.", command=second),
            Step(when="tool_result", text="FINAL: once more."),
        ],
    )
    name = f"apr-always-{harness}"
    make_env(cluster, f"apr-env-{harness}", harness, model)
    api = Api(stack)
    try:
        # Created idle, then the message: Claude's first turn runs in the CLI the operator had the driver
        # start ahead of it (prepare_turn), the second in the one started when the first ended. Neither
        # carries a grant over: the second turn asks again.
        body = {"name": name, "environment": f"apr-env-{harness}", "harness": harness, "approvals": "ask"}
        assert api.post(
            "/api/sessions", body | ({"model": "fake-model"} if harness == "codex" else {})
        ).is_success
        if harness == "claude":
            wait(
                lambda: any(
                    f"pre-started for turn {name}-1" in str(e.get("message")) for e in api.events(name)
                ),
                90,
                "the first turn's CLI pre-started",
                lambda: api.debug(name),
            )
        else:
            wait(lambda: api.session(name)["sandbox"]["connected"], 90, "connected", lambda: api.debug(name))
        assert api.post(f"/api/sessions/{name}/messages", {"message": "INIT twice"}).status_code == 202
        a = wait_pending(api, name)
        assert first in a["command"]
        assert decide(api, name, a["id"], "allow_always").status_code == 200
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed", api.debug(name)
        ws = workspace(stack, name)
        assert (ws / "r1" / ".git").is_dir() and (ws / second.split()[-1] / ".git").is_dir()
        ours = [x for x in approvals(api, name)["recent"] if x["turn"] == f"{name}-1"]
        assert [x["decision"] for x in ours] == ["allow_always"], "the second call was not asked"
        assert not (ws / ".claude").exists(), "nothing written to the repository's settings"
        assert api.post(f"/api/sessions/{name}/messages", {"message": "ONCE MORE"}).status_code == 202
        again = wait_pending(api, name, exclude=(a["id"],))
        assert again["turn"] == f"{name}-2"
        assert decide(api, name, again["id"], "allow").status_code == 200
        assert api.wait_turn(name, 2)["phase"] == "Completed", api.debug(name)
        started = {e["turn"]: e.get("prestarted") for e in api.events(name) if e["kind"] == "turn_started"}
        ahead = True if harness == "claude" else None  # Codex starts its app-server with the turn
        assert started == {f"{name}-1": ahead, f"{name}-2": ahead}, started
    finally:
        cleanup(api, name)


@needs_clis
def test_kubectl_patch_decides_and_a_decision_is_not_changed(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    script(
        model,
        [
            Step(text="Writing.", command="echo hi > patched.txt"),
            Step(when="tool_result", text="FINAL: written."),
        ],
    )
    name = "apr-kubectl"
    make_env(cluster, "apr-env-claude", "claude", model)
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-claude", "claude", "write it", approvals="ask")
        a = wait_pending(api, name)
        out = cluster.kubectl("get", "approvals", "-o", "wide").stdout
        assert a["id"] in out and "Pending" in out
        cluster.kubectl(
            "patch", "approval", a["id"], "--type", "merge", "-p", '{"spec":{"decision":"allow"}}'
        )
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed", api.debug(name)
        assert (workspace(stack, name) / "patched.txt").exists()
        obj = json.loads(cluster.kubectl("get", "approval", a["id"], "-o", "json").stdout)
        assert obj["status"]["phase"] == "Allowed" and obj["status"]["resolvedBy"] == "person"
        assert "kubectl" in obj["status"]["by"]
        # The apiserver refuses to change a decision.
        r = cluster.kubectl(
            "patch", "approval", a["id"], "--type", "merge", "-p", '{"spec":{"decision":"deny"}}', check=False
        )
        assert r.returncode != 0 and "decided once" in r.stderr, r.stderr
        obj = json.loads(cluster.kubectl("get", "approval", a["id"], "-o", "json").stdout)
        assert obj["spec"]["decision"] == "allow"
        # What another writer did reaches the API's listing (its caches follow the watch), and a decision
        # through REST on the approval kubectl decided is refused with the first one.
        done = wait(
            lambda: next(
                (x for x in approvals(api, name)["recent"] if x["id"] == a["id"] and x["phase"] == "Allowed"),
                None,
            ),
            30,
            "the kubectl decision in the REST listing",
            lambda: api.debug(name),
        )
        assert "kubectl" in done["by"] and done["resolved_by"] == "person"
        assert approvals(api, name)["pending"] == []
        r = decide(api, name, a["id"], "deny")
        assert r.status_code == 409 and "already decided: allow" in r.text, r.text
        # A deleted session's approvals are a 404, as before.
        assert api.delete(f"/api/sessions/{name}").status_code in (200, 202, 204)
        wait(
            lambda: api.get(f"/api/sessions/{name}/approvals").status_code == 404,
            60,
            "the deleted session's approvals gone",
        )
    finally:
        cleanup(api, name)


# -- deny-risky, hand-back, taint -----------------------------------------------------------------------------


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_deny_risky_denies_a_force_push_at_once_and_the_turn_completes(
    cluster: Cluster, stack: Stack, model: ScriptedModel, harness: str
) -> None:
    script(
        model,
        [
            Step(text="Reporting.", command='hangar-agent progress "about to push"'),
            Step(when="tool_result", text="Harmless first.", command="echo ok > ok.txt"),
            Step(when="tool_result", text="Pushing.", command="git push --force origin main"),
            Step(when="tool_result", text="FINAL: the push was refused."),
            Step(when="force-push", text="FINAL: the push was refused."),
        ],
    )
    name = f"apr-risky-{harness}"
    make_env(cluster, f"apr-env-risky-{harness}", harness, model, approvals="deny-risky")
    api = Api(stack)
    try:
        new_session(api, name, f"apr-env-risky-{harness}", harness, "push it")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["policy"] == "deny-risky", api.debug(name)
        assert (workspace(stack, name) / "ok.txt").exists()
        listing = approvals(api, name)
        assert listing["pending"] == []
        recent = listing["recent"]
        denied = [x for x in recent if x["phase"] == "Denied"]
        assert len(denied) == 1 and denied[0]["rule"] == "force-push", recent
        assert denied[0]["resolved_by"] == "policy" and "git push --force origin main" in denied[0]["command"]
        handback = [x for x in recent if x["rule"] == "handback"]
        assert (
            len(handback) == 1
            and handback[0]["phase"] == "Allowed"
            and handback[0]["resolved_by"] == "policy"
        )
        assert len(recent) == 2, "a call no rule flags is not kept as an Approval"
        told = "Denied by hangar (approvals: deny-risky): force-push"
        assert any(req.contains(told) for req in model.requests[1:]), "the agent was told why"
        decided = [e for e in api.events(name) if e["kind"] == "approval_decided"]
        assert {d["rule"] for d in decided} >= {"handback", "default", "force-push"}
    finally:
        cleanup(api, name)


@needs_clis
@pytest.mark.parametrize("tainted", [True, False])
def test_a_tainted_session_may_not_push_under_deny_risky(
    cluster: Cluster, stack: Stack, model: ScriptedModel, tainted: bool
) -> None:
    script(
        model,
        [
            Step(text="Pushing.", command="git push origin HEAD"),
            Step(when="tool_result", text="FINAL: done with the push."),
            Step(when="untrusted", text="FINAL: done with the push."),
        ],
    )
    name = f"apr-taint-{'yes' if tainted else 'no'}"
    make_env(cluster, "apr-env-risky-claude", "claude", model, approvals="deny-risky")
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-risky-claude", "claude", "push it", tainted=tainted)
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed", api.debug(name)
        assert t["taint"] is tainted
        s = api.session(name)
        assert s["taint"]["tainted"] is tainted
        decided = [e for e in api.events(name) if e["kind"] == "approval_decided"]
        push = [d for d in decided if "git push origin HEAD" in (d.get("command") or "")]
        assert len(push) == 1, decided
        if tainted:
            assert push[0]["decision"] == "deny" and push[0]["rule"] == "taint-push"
            assert "after reading untrusted content" in push[0]["reason"]
            rec = approvals(api, name)["recent"]
            assert rec[0]["tainted"] and rec[0]["rule"] == "taint-push" and rec[0]["phase"] == "Denied"
            assert any(req.contains("after reading untrusted content") for req in model.requests[1:])
        else:
            assert push[0]["decision"] == "allow" and push[0]["rule"] == "default"
            assert approvals(api, name)["recent"] == []
    finally:
        cleanup(api, name)


# -- no prompts without a live turn ----------------------------------------------------------------------------


def test_pi_under_ask_fails_its_turn_rather_than_run_unchecked(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    name = "apr-pi"
    make_env(cluster, "apr-env-pi", "claude", model)
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-pi", "pi", "do something", approvals="ask")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Failed", api.debug(name)
        assert "needs a live turn" in t["reason"] and "permission checks off" in t["reason"]
        assert model.requests == []
    finally:
        cleanup(api, name)


def test_a_sandbox_without_python3_fails_the_turn_with_the_reason(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    name = "apr-nopython"
    overrides = {
        "containers": [{"name": "sandbox", "command": ["/nonexistent/python3", "-m", "hangar_driver"]}]
    }
    make_env(cluster, "apr-env-nopython", "claude", model, overrides=overrides)
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-nopython", "claude", "do something", approvals="ask")
        t = api.wait_turn(name, 1, 60)
        assert t["phase"] == "Failed", api.debug(name)
        assert "never connected" in t["reason"] and "python3" in t["reason"], t["reason"]
        s = wait(lambda: (x := api.session(name))["sandbox"]["pod"] is None and x, 30, "the slot released")
        assert s["counters"]["sandboxes"] == 1, "no second sandbox for a turn that can't run"
    finally:
        cleanup(api, name)


@needs_clis
def test_a_python3_without_ctypes_refuses_a_turn_under_ask(
    cluster: Cluster, stack: Stack, model: ScriptedModel, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shadow = tmp_path_factory.mktemp("noctypes")
    shadow.chmod(0o755)
    (shadow / "ctypes.py").write_text("raise ImportError('this python3 was built without ctypes')\n")
    (shadow / "ctypes.py").chmod(0o644)
    env = [{"name": "PYTHONPATH", "value": f"{shadow}:/opt/hangar/lib"}]
    overrides = {"containers": [{"name": "sandbox", "env": env}]}
    name = "apr-noctypes"
    make_env(cluster, "apr-env-noctypes", "claude", model, overrides=overrides)
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-noctypes", "claude", "do something", approvals="ask")
        t = api.wait_turn(name, 1, 60)
        assert t["phase"] == "Failed", api.debug(name)
        assert "ctypes" in t["reason"] and "approvals ask" in t["reason"], t["reason"]
        assert model.requests == []
    finally:
        cleanup(api, name)


@needs_clis
def test_a_web_tool_taints_the_turn_mid_turn_and_a_later_push_is_denied(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    script(
        model,
        [
            Step(text="Searching.", tool="WebSearch", tool_input={"query": "hangar release notes"}),
            Step(when="Perform a web search", text="Nothing relevant was found."),
            Step(when="tool_result", text="Pushing.", command="git push origin HEAD"),
            Step(when="tool_result", text="FINAL: done with the push."),
            Step(when="untrusted", text="FINAL: done with the push."),
        ],
    )
    name = "apr-taint-web"
    make_env(cluster, "apr-env-risky-claude", "claude", model, approvals="deny-risky")
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-risky-claude", "claude", "search, then push")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed", api.debug(name)
        assert t["taint"] is True
        s = api.session(name)
        assert s["taint"]["tainted"] and any("WebSearch" in r for r in s["taint"]["reasons"]), s["taint"]
        kinds = [e["kind"] for e in api.events(name)]
        assert "taint" in kinds
        push = [
            e
            for e in api.events(name)
            if e["kind"] == "approval_decided" and "git push" in (e["command"] or "")
        ]
        assert len(push) == 1 and push[0]["decision"] == "deny" and push[0]["rule"] == "taint-push", push
        # Sticky: the next turn starts tainted.
        assert api.post(f"/api/sessions/{name}/messages", {"message": "anything else?"}).status_code == 202
        t2 = api.wait_turn(name, 2)
        assert t2["taint"] is True
    finally:
        cleanup(api, name)


def hangar_cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HANGAR_URL": stack.api_url, "HANGAR_TOKEN": stack.token}
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", *args], env=env, capture_output=True, text=True, timeout=60
    )


@needs_clis
def test_governed_holds_what_the_rules_flag_and_the_cli_answers_it(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    script(
        model,
        [
            Step(text="Harmless first.", command="echo ok > ok.txt"),
            Step(when="tool_result", text="Now the risky one.", command="rm -rf /tmp/hangar-governed-x"),
            Step(when="tool_result", text="FINAL: done."),
        ],
    )
    name = "apr-governed"
    make_env(cluster, "apr-env-claude", "claude", model)
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-claude", "claude", "clean up", approvals="governed")
        a = wait_pending(api, name)
        assert (workspace(stack, name) / "ok.txt").exists(), "an unflagged call ran at once"
        assert a["governed"] and a["policy"] == "governed" and a["rule"] == "rm-recursive"
        assert a["why"].startswith("governed: ")
        out = hangar_cli(stack, "session", "approvals", name)
        assert out.returncode == 0, out.stderr
        assert a["id"] in out.stdout and "[governed]" in out.stdout and "approvals=governed" in out.stdout
        bad = hangar_cli(stack, "session", "approvals", name, "--allow", "ap-000000000000")
        assert bad.returncode == 1 and "error 404" in bad.stderr
        ok = hangar_cli(stack, "session", "approvals", name, "--allow", a["id"])
        assert ok.returncode == 0 and f"{a['id']}: allow sent" in ok.stdout, ok.stderr
        again = hangar_cli(stack, "session", "approvals", name, "--deny", a["id"], "-m", "no")
        assert again.returncode == 1 and "error 409" in again.stderr and "already decided" in again.stderr
        assert api.wait_turn(name, 1)["phase"] == "Completed", api.debug(name)
        metrics = httpx.get(f"{stack.operator_url}/metrics").text
        assert 'hangar_approvals_total{outcome="allow",policy="governed",resolver="person"}' in metrics
        assert 'hangar_approval_pending_seconds_count{resolver="person"}' in metrics
    finally:
        cleanup(api, name)


@needs_clis
def test_a_pending_approval_survives_an_operator_restart(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    script(
        model,
        [
            Step(text="Writing.", command="echo hi > restarted.txt"),
            Step(when="tool_result", text="FINAL: written."),
        ],
    )
    name = "apr-restart"
    make_env(cluster, "apr-env-claude", "claude", model)
    api = Api(stack)
    try:
        new_session(api, name, "apr-env-claude", "claude", "write it", approvals="ask")
        a = wait_pending(api, name)
        stack.stop("operator")
        # Decided while no operator runs: the decision waits in spec.decision.
        assert decide(api, name, a["id"], "allow").status_code == 200
        stack.start_operator()
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed", api.debug(name)
        assert (workspace(stack, name) / "restarted.txt").exists()
        rec = delivered(api, name, a["id"])
        assert rec["phase"] == "Allowed" and rec["delivered_at"], rec
    finally:
        cleanup(api, name)
