"""The Environment's MCP servers on their way to the CLIs: the pod's HANGAR_MCP_SERVERS, the driver's parsing,
Claude Code's --mcp-config and Codex's config.toml (the end-to-end path is tests/e2e/test_taint_e2e.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from hangar.config import Settings
from hangar.models.environment import EnvironmentSpec
from hangar.testing.model_server import _openai_namespace
from hangar_driver import mcp
from hangar_driver.codex import _mcp_answer, _mcp_approval, write_config
from hangar_driver.harness import TurnConfig
from hangar_operator.approvals import resource_reader, untrusted_source
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import mcp_servers_env, sandbox_pod

ENV = EnvironmentSpec.model_validate(
    {
        "image": "img",
        "mcp": {
            "tracker": {
                "command": ["tracker-mcp", "--stdio"],
                "trust": "untrusted",
                "write_tools": ["create_*"],
            },
            "github.com": {"url": "https://mcp.example.com/github", "trust": "trusted"},
            "empty": {"trust": "trusted"},
        },
    }
)


def test_the_pod_carries_how_to_reach_each_server_and_nothing_else() -> None:
    [var] = mcp_servers_env(ENV)
    assert var["name"] == "HANGAR_MCP_SERVERS"
    assert json.loads(var["value"]) == {
        "github.com": {"url": "https://mcp.example.com/github"},
        "tracker": {"command": ["tracker-mcp", "--stdio"]},
    }
    assert "trust" not in var["value"] and "write_tools" not in var["value"]
    assert mcp_servers_env(EnvironmentSpec(image="img")) == []
    session = {
        "metadata": {"name": "s", "uid": "u"},
        "spec": {"harness": "claude"},
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
    }
    pod = sandbox_pod(session, ENV, make_run("default", "default", "s", 1), Settings(), "gw:1")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert json.loads(env["HANGAR_MCP_SERVERS"])["tracker"]["command"] == ["tracker-mcp", "--stdio"]


def test_the_driver_parses_and_spells_server_names_like_the_clis() -> None:
    raw = json.dumps(
        {
            "github.com": {"url": "https://mcp.example.com/github"},
            "tracker": {"command": ["tracker-mcp", "--stdio"]},
            "bad": {"command": "not a list"},
            "ftp": {"url": "ftp://x"},
        }
    )
    servers, warnings = mcp.load(raw)
    assert servers == {
        "github_com": {"url": "https://mcp.example.com/github"},
        "tracker": {"command": ["tracker-mcp", "--stdio"]},
    }
    assert any("bad dropped" in w for w in warnings) and any("ftp dropped" in w for w in warnings)
    assert any("github.com is called github_com" in w for w in warnings)
    assert mcp.load("")[0] == {} and mcp.load("[1]")[1] and mcp.load("{nope")[1]
    args = mcp.claude_args(servers)
    assert args[0] == "--mcp-config" and args[2] == "--strict-mcp-config"
    assert json.loads(args[1]) == {
        "mcpServers": {
            "github_com": {"type": "http", "url": "https://mcp.example.com/github"},
            "tracker": {"type": "stdio", "command": "tracker-mcp", "args": ["--stdio"]},
        }
    }
    assert mcp.claude_args({}) == []


def test_codex_config_gets_the_servers(tmp_path: Path) -> None:
    servers, _ = mcp.load(
        json.dumps({"tracker": {"command": ["py", "-c", 'print("a\\"b")']}, "gh": {"url": "https://x"}})
    )
    cfg = TurnConfig("t", "m", str(tmp_path), {"CODEX_HOME": str(tmp_path / "ch")}, mcp_servers=servers)
    path = write_config(cfg)
    toml = tomllib.loads(Path(path).read_text())
    assert toml["mcp_servers"] == {
        "tracker": {"command": "py", "args": ["-c", 'print("a\\"b")']},
        "gh": {"url": "https://x"},
    }
    assert toml["features"]["plugins"] is False


def test_codex_mcp_tool_approval_is_an_elicitation() -> None:
    assert _mcp_approval({"_meta": {"codex_approval_kind": "mcp_tool_call"}})
    assert not _mcp_approval({"_meta": {}}) and not _mcp_approval({})
    assert _mcp_answer("deny") == {"action": "decline"}
    assert _mcp_answer("allow") == {"action": "accept", "content": {}}
    assert _mcp_answer("allow_always")["_meta"] == {"persist": "session"}


def test_resource_reads_count_as_the_servers_tools() -> None:
    assert resource_reader("ReadMcpResourceTool", {"server": "tracker", "uri": "x"}) == (
        "mcp__tracker__ReadMcpResourceTool"
    )
    assert resource_reader("read_mcp_resource", {"server": "gh"}) == "mcp__gh__read_mcp_resource"
    assert resource_reader("Read", {"server": "x"}) is None
    assert resource_reader("ReadMcpResourceTool", {}) is None
    assert "untrusted MCP server tracker" in (
        untrusted_source("mcp__tracker__ReadMcpResourceTool", ENV) or ""
    )


def test_the_scripted_model_calls_namespaced_tools() -> None:
    body = {
        "tools": [
            {"type": "namespace", "name": "mcp__tracker", "tools": [{"type": "function", "name": "read"}]}
        ]
    }
    assert _openai_namespace(body, "mcp__tracker__read") == ("mcp__tracker", "read")
    assert _openai_namespace(body, "mcp__tracker__write") is None
    assert _openai_namespace({}, "exec_command") is None
