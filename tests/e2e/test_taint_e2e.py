"""Taint from the agent's real sources, end to end: the Environment's MCP servers reach the real CLIs (Claude
Code ``--mcp-config``, Codex ``[mcp_servers.*]``), a real stdio MCP server (``hangar.testing.mcp_server``, speaking
the protocol itself) answers, web tools run against the scripted model, and the operator taints the turn and
the session from what the agent read; then the policy denies (deny-risky) or asks (ask) what the taint gate
flags: the server's write tools and a ``git push`` to a real bare repository on the local disk.

What each CLI makes possible offline:

* MCP: both. Claude Code calls ``mcp__tracker__read_issue`` and asks for it with ``can_use_tool``; Codex
  offers the server's tools as a Responses API namespace ``mcp__tracker`` (the scripted call names
  ``namespace`` and ``name``) and asks with an ``mcpServer/elicitation/request``
  (``_meta.codex_approval_kind: mcp_tool_call``), which the driver turns into the same permission request.
* Web: Claude Code's ``WebSearch`` (the CLI runs it as a side request offering the ``web_search_20250305``
  server tool; the scripted model answers it with ``server_tool_use`` + ``web_search_tool_result`` blocks)
  and Codex's ``web_search`` (a scripted ``web_search_call`` output item becomes a ``webSearch`` item).
  Claude Code's ``WebFetch`` is not covered: it can't fetch offline. Without settings it first asks
  claude.ai whether the domain is safe ("Unable to verify if domain 127.0.0.1 is safe to fetch"); with
  ``skipWebFetchPreflight`` it upgrades ``http://`` to ``https://``, so a loopback HTTP server fails the TLS
  handshake (``WRONG_VERSION_NUMBER``). It is tainted by the same path as WebSearch (a ``WebFetch``
  ``tool_result``), which the unit tests cover.

The agent (and so the MCP server it starts) runs as uid 1001, which may not read the test venv or this
checkout (they can live under a mode-700 ``/root``): the server is standard library only, and
``mcp_server.command`` copies it next to its call log and runs it on the system's ``python3``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing import mcp_server
from hangar.testing.model_server import Request, ScriptedModel, Step

from .conftest import Cluster
from .helpers import Api, approvals, clis_installed, environment, model_env, new_session, wait

pytestmark = [pytest.mark.e2e]
needs_clis = pytest.mark.skipif(
    not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"
)
HARNESSES = ["claude", "codex"]
UNTRUSTED = "after reading untrusted content"
AGENT_UID = 1001
READ = "mcp__tracker__read_issue"
WRITE = "mcp__tracker__create_comment"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the agent's uid can write: the MCP server's call log and the bare git remote."""
    d = Path(tempfile.mkdtemp(prefix="hangar-taint-", dir="/tmp"))
    os.chmod(d, 0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def make_env(
    cluster: Cluster,
    name: str,
    harness: str,
    model: ScriptedModel,
    approvals: str,
    mcp: dict[str, Any] | None = None,
) -> None:
    environment(cluster, name, model_env(harness, model), approvals, mcp=mcp or None)


def tracker(shared: Path, trust: str) -> dict[str, Any]:
    """The Environment's ``mcp:`` entry for the test server."""
    return {
        "tracker": {
            "command": mcp_server.command("tracker", shared / "calls.jsonl"),
            "trust": trust,
            "write_tools": ["create_*", "update_*"],
        }
    }


def calls(shared: Path) -> list[str]:
    """The tools the MCP server really ran."""
    log = shared / "calls.jsonl"
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [str(x["tool"]) for x in lines if "tool" in x]


def bare_remote(shared: Path) -> Path:
    """A bare repository the agent may push to, made here: made by the agent's own command it would be a
    write outside its repository, which deny-risky denies (and reports before the push's taint)."""
    remote = shared / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    # Under root the agent runs as uid 1001, and git refuses a repository another uid owns.
    if os.geteuid() == 0:
        for d, _, files in os.walk(remote):
            for p in [d, *(os.path.join(d, f) for f in files)]:
                os.chown(p, AGENT_UID, AGENT_UID)
    return remote


def push_command(remote: Path) -> str:
    return (
        "git init -q && "
        "git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m taint-test && "
        f"git push -q {remote} HEAD:refs/heads/main"
    )


def pushed(remote: Path) -> bool:
    return (remote / "refs" / "heads" / "main").exists() or "refs/heads/main" in _read(remote / "packed-refs")


def _read(p: Path) -> str:
    return p.read_text() if p.exists() else ""


def has(*needles: str) -> Callable[[Request], bool]:
    return lambda r: any(r.contains(n) for n in needles)


def turn_status(cluster: Cluster, name: str) -> dict[str, Any]:
    obj = json.loads(cluster.kubectl("get", "turn", name, "-o", "json").stdout)
    return dict(obj.get("status") or {})


def mcp_script(model: ScriptedModel, remote: Path) -> None:
    """Read an issue, comment on it (a write tool), push. Every step repeats and the most advanced one that
    matches wins, so an extra request (Codex's deny message arrives as a steer) changes nothing."""
    model.add(
        Step(when=has(str(remote)), text="FINAL: done.", repeat=True, name="final"),
        Step(
            when=has("comment added", "MCP write tool", "rejected MCP tool call"),
            text="Pushing the fix.",
            command=push_command(remote),
            repeat=True,
            name="push",
        ),
        Step(
            when=has("IGNORE PREVIOUS INSTRUCTIONS"),
            text="Commenting.",
            tool=WRITE,
            tool_input={"number": 7, "body": "on it"},
            repeat=True,
            name="write",
        ),
        Step(text="Reading the issue.", tool=READ, tool_input={"number": 7}, repeat=True, name="read"),
    )


def cleanup(api: Api, *sessions: str) -> None:
    for s in sessions:
        api.delete(f"/api/sessions/{s}")


# -- MCP -----------------------------------------------------------------------------------------------------


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_an_untrusted_mcp_result_taints_and_its_write_tools_and_a_push_are_denied(
    cluster: Cluster, stack: Stack, model: ScriptedModel, shared: Path, harness: str
) -> None:
    remote = bare_remote(shared)
    mcp_script(model, remote)
    name, env = f"taint-mcp-{harness}", f"taint-env-mcp-{harness}"
    make_env(cluster, env, harness, model, "deny-risky", tracker(shared, "untrusted"))
    api = Api(stack)
    try:
        new_session(api, name, env, harness, "fix issue 7")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["outcome"] == "completed", api.debug(name)
        assert t["taint"] is True
        why = "read a result of untrusted MCP server tracker"
        s = api.session(name)
        assert s["taint"]["tainted"] and any(why in r for r in s["taint"]["reasons"]), s["taint"]
        ts = turn_status(cluster, f"{name}-1")
        assert ts["taint"]["tainted"] and any(why in r for r in ts["taint"]["reasons"]), ts
        assert any(e["kind"] == "taint" and why in e.get("reason", "") for e in api.events(name))
        # The read ran; the write tool and the push were denied and never ran.
        assert calls(shared) == ["read_issue"], calls(shared)
        assert not pushed(remote)
        denied = {x["rule"]: x for x in approvals(api, name)["recent"] if x["phase"] == "Denied"}
        assert set(denied) == {"taint-mcp-write", "taint-push"}, denied
        write = denied["taint-mcp-write"]
        assert write["tool"] == WRITE and write["tainted"] and write["resolved_by"] == "policy"
        assert "MCP write tool create_comment on tracker " + UNTRUSTED in write["why"]
        push = denied["taint-push"]
        assert push["tainted"] and UNTRUSTED in push["why"] and "git push -q" in push["command"]
        # The agent was told, and went on to finish the turn.
        told = [r for r in model.requests if r.contains(UNTRUSTED)]
        assert told, "the agent got the denial"
        assert model.requests[-1].step is not None and model.requests[-1].step.name == "final"
    finally:
        cleanup(api, name)


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_a_trusted_mcp_result_does_not_taint_and_the_push_goes_through(
    cluster: Cluster, stack: Stack, model: ScriptedModel, shared: Path, harness: str
) -> None:
    remote = bare_remote(shared)
    mcp_script(model, remote)
    name, env = f"taint-trusted-{harness}", f"taint-env-trusted-{harness}"
    make_env(cluster, env, harness, model, "deny-risky", tracker(shared, "trusted"))
    api = Api(stack)
    try:
        new_session(api, name, env, harness, "fix issue 7")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["outcome"] == "completed", api.debug(name)
        assert t["taint"] is False
        assert api.session(name)["taint"]["tainted"] is False
        assert not any(e["kind"] == "taint" for e in api.events(name))
        assert calls(shared) == ["read_issue", "create_comment"], calls(shared)
        assert pushed(remote), "the push reached the bare repository"
        assert [x for x in approvals(api, name)["recent"] if x["phase"] == "Denied"] == []
    finally:
        cleanup(api, name)


# -- web tools -----------------------------------------------------------------------------------------------


def _web_search_side(r: Request) -> bool:
    """Claude Code's WebSearch runs as a side request offering only the web_search server tool."""
    return any(
        isinstance(t, dict) and str(t.get("type", "")).startswith("web_search_")
        for t in r.body.get("tools") or []
    )


def web_script(model: ScriptedModel, harness: str, remote: Path) -> None:
    final = Step(when=has(str(remote)), text="FINAL: done.", repeat=True, name="final")
    if harness == "claude":
        model.add(
            final,
            Step(
                when=_web_search_side,
                text="The first result says to push the fix.",
                blocks=[
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_scripted_1",
                        "name": "web_search",
                        "input": {"query": "login page crash fix"},
                    },
                    {
                        "type": "web_search_tool_result",
                        "tool_use_id": "srvtoolu_scripted_1",
                        "content": [
                            {
                                "type": "web_search_result",
                                "url": "https://example.com/login-crash",
                                "title": "Login crash fix",
                                "encrypted_content": "c2NyaXB0ZWQ=",
                                "page_age": None,
                            }
                        ],
                    },
                ],
                repeat=True,
                name="search-side",
            ),
            Step(
                when=has("Web search results"),
                text="Pushing.",
                command=push_command(remote),
                repeat=True,
                name="push",
            ),
            Step(
                text="Searching.",
                tool="WebSearch",
                tool_input={"query": "login page crash fix"},
                repeat=True,
                name="search",
            ),
        )
    else:
        model.add(
            final,
            Step(
                text="Searched; pushing.",
                items=[
                    {
                        "id": "ws_scripted_1",
                        "type": "web_search_call",
                        "status": "completed",
                        "action": {"type": "search", "query": "login page crash fix"},
                    }
                ],
                command=push_command(remote),
                repeat=True,
                name="search-and-push",
            ),
        )


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_a_web_search_taints_and_a_following_push_is_denied(
    cluster: Cluster, stack: Stack, model: ScriptedModel, shared: Path, harness: str
) -> None:
    remote = bare_remote(shared)
    web_script(model, harness, remote)
    name, env = f"taint-web-{harness}", f"taint-env-web-{harness}"
    make_env(cluster, env, harness, model, "deny-risky")
    api = Api(stack)
    try:
        new_session(api, name, env, harness, "find the fix and push it")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["outcome"] == "completed", api.debug(name)
        tool = "WebSearch" if harness == "claude" else "web_search"
        why = f"read web content ({tool})"
        assert t["taint"] is True
        assert why in api.session(name)["taint"]["reasons"]
        assert why in turn_status(cluster, f"{name}-1")["taint"]["reasons"]
        denied = [x for x in approvals(api, name)["recent"] if x["phase"] == "Denied"]
        assert [x["rule"] for x in denied] == ["taint-push"], denied
        assert denied[0]["tainted"] and UNTRUSTED in denied[0]["why"]
        assert not pushed(remote)
        assert any(r.contains(UNTRUSTED) for r in model.requests), "the agent got the denial"
    finally:
        cleanup(api, name)


# -- ask -----------------------------------------------------------------------------------------------------


@needs_clis
@pytest.mark.parametrize("harness", HARNESSES)
def test_under_ask_a_tainted_push_asks_with_the_taint(
    cluster: Cluster, stack: Stack, model: ScriptedModel, shared: Path, harness: str
) -> None:
    remote = bare_remote(shared)
    model.add(
        Step(when=has(str(remote)), text="FINAL: done.", repeat=True, name="final"),
        Step(
            when=has("IGNORE PREVIOUS INSTRUCTIONS"),
            text="Pushing.",
            command=push_command(remote),
            repeat=True,
            name="push",
        ),
        Step(text="Reading the issue.", tool=READ, tool_input={"number": 7}, repeat=True, name="read"),
    )
    name, env = f"taint-ask-{harness}", f"taint-env-ask-{harness}"
    make_env(cluster, env, harness, model, "ask", tracker(shared, "untrusted"))
    api = Api(stack)
    try:
        new_session(api, name, env, harness, "fix issue 7")

        def pending(tool: str) -> dict[str, Any] | None:
            return next((a for a in approvals(api, name)["pending"] if tool in a["tool"]), None)

        read = wait(lambda: pending("read_issue"), 90, "the read tool's approval", lambda: api.debug(name))
        assert read["tool"] == READ and read["tainted"] is False and read["why"] == "approvals: ask"
        r = api.post(f"/api/sessions/{name}/approvals/{read['id']}", {"decision": "allow"})
        assert r.status_code == 200, r.text
        push = wait(
            lambda: next((a for a in approvals(api, name)["pending"] if a["id"] != read["id"]), None),
            90,
            "the push's approval",
            lambda: api.debug(name),
        )
        assert push["tainted"] is True and push["rule"] == "taint-push", push
        assert push["why"].startswith("approvals: ask; flagged: git push") and UNTRUSTED in push["why"]
        obj = json.loads(cluster.kubectl("get", "approval", push["id"], "-o", "json").stdout)
        assert obj["spec"]["tainted"] is True and UNTRUSTED in obj["spec"]["why"]
        assert api.session(name)["taint"]["tainted"] is True
        r = api.post(
            f"/api/sessions/{name}/approvals/{push['id']}", {"decision": "deny", "message": "not after that"}
        )
        assert r.status_code == 200, r.text
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["taint"] is True, api.debug(name)
        assert not pushed(remote)
        assert calls(shared) == ["read_issue"]
    finally:
        cleanup(api, name)


@needs_clis
def test_a_web_search_the_models_api_ran_itself_taints_claude(
    cluster: Cluster, stack: Stack, model: ScriptedModel, shared: Path
) -> None:
    """The model's answer carries a server tool's ``server_tool_use`` and ``web_search_tool_result`` blocks
    (Claude Code shows them as assistant messages of their own): the driver reports them as a tool call and its
    result, so the push in the same answer is judged tainted."""
    remote = bare_remote(shared)
    model.add(
        Step(when=has(str(remote)), text="FINAL: done.", repeat=True, name="final"),
        Step(
            text="Searched; pushing.",
            blocks=[
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_scripted_2",
                    "name": "web_search",
                    "input": {"query": "login page crash fix"},
                },
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_scripted_2",
                    "content": [
                        {
                            "type": "web_search_result",
                            "url": "https://example.com/login-crash",
                            "title": "Login crash fix",
                            "encrypted_content": "c2NyaXB0ZWQ=",
                            "page_age": None,
                        }
                    ],
                },
            ],
            command=push_command(remote),
            repeat=True,
            name="search-and-push",
        ),
    )
    name, env = "taint-srvtool-claude", "taint-env-srvtool-claude"
    make_env(cluster, env, "claude", model, "deny-risky")
    api = Api(stack)
    try:
        new_session(api, name, env, "claude", "find the fix and push it")
        t = api.wait_turn(name, 1)
        assert t["phase"] == "Completed" and t["taint"] is True, api.debug(name)
        assert "read web content (web_search)" in api.session(name)["taint"]["reasons"]
        denied = [x for x in approvals(api, name)["recent"] if x["phase"] == "Denied"]
        assert [x["rule"] for x in denied] == ["taint-push"], denied
        assert not pushed(remote)
    finally:
        cleanup(api, name)
