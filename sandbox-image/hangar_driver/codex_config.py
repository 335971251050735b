"""Codex's ``$CODEX_HOME/config.toml``, written before each turn (offline settings, the model provider, the
Environment's MCP servers), its exec-policy rules (``$CODEX_HOME/rules``), and the state directory a fork's
first turn needs (see ``codex.py``).

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import List

from .harness import TurnConfig
from .mcp import codex_toml as mcp_codex_toml

RULES_FILE = "hangar.rules"
# Codex's own known-safe commands (codex-rs ``is_safe_command.rs``: ``is_safe_to_call_with_exec``, plus the
# ``git`` subcommands older releases counted), which its ``untrusted`` approval policy may run unasked. 0.171.0
# asks about them as hangar runs it, but a "prompt" rule outranks that list in any release that has it.
KNOWN_SAFE = (
    "base64 cat cd cut echo expr false find git grep head id ls nl numfmt paste pwd rev rg sed seq stat tac "
    "tail tr true uname uniq wc which whoami"
).split()


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string takes JSON's escapes


def codex_home(cfg: TurnConfig) -> str:
    home = cfg.env.get("CODEX_HOME")
    if home:
        return home
    return os.path.join(cfg.env.get("HOME") or cfg.cwd, ".codex")


def write_config(cfg: TurnConfig) -> str:
    """Write $CODEX_HOME/config.toml (top-level keys first: after a [table] they would belong to it)."""
    home = codex_home(cfg)
    extra = cfg.extra
    base_url = extra.get("base_url") or cfg.env.get("OPENAI_BASE_URL")
    model = cfg.model or extra.get("model")
    lines: List[str] = []
    if model:
        lines.append("model = %s" % _toml_str(str(model)))
    if base_url:
        lines.append('model_provider = "hangar"')
    lines.append("check_for_update_on_startup = false")
    if base_url:
        lines += [
            "",
            "[model_providers.hangar]",
            'name = "hangar"',
            "base_url = %s" % _toml_str(str(base_url)),
            'wire_api = "responses"',
            "env_key = %s" % _toml_str(str(extra.get("env_key") or "OPENAI_API_KEY")),
        ]
        for key in ("request_max_retries", "stream_max_retries", "stream_idle_timeout_ms"):
            if extra.get(key) is not None:
                lines.append("%s = %d" % (key, int(extra[key])))
    lines += [
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",  # this alone stops app-server's plugin sync with github.com / chatgpt.com
        "apps = false",
        "remote_plugin = false",
    ]
    lines += mcp_codex_toml(cfg.mcp_servers)  # the Environment's MCP servers (mcp.py)
    if extra.get("codex_config"):
        lines += ["", str(extra["codex_config"])]
    if not os.path.isdir(home):
        os.makedirs(home, 0o700)
    path = os.path.join(home, "config.toml")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o600)
    if cfg.run_as and os.getuid() == 0:
        uid = int(cfg.run_as["uid"])
        gid = int(cfg.run_as.get("gid", uid))
        os.chown(home, uid, gid)
        os.chown(tmp, uid, gid)
    os.rename(tmp, path)
    write_rules(cfg, home)
    return path


def write_rules(cfg: TurnConfig, home: str) -> None:
    """Under a policy other than auto: ``$CODEX_HOME/rules`` holds hangar's rules only, a "prompt" rule per
    known-safe command, so that every command reaches hangar. Any other ``*.rules`` file is removed: an
    "allow" rule there (one the agent wrote, say) would run a command without asking. Under auto hangar's
    file is removed, since approval policy ``never`` turns a "prompt" rule into a refusal."""
    rules_dir = os.path.join(home, "rules")
    ours = os.path.join(rules_dir, RULES_FILE)
    if cfg.approvals == "auto":
        if os.path.lexists(ours):
            os.unlink(ours)
        return
    if os.path.islink(rules_dir) or (os.path.lexists(rules_dir) and not os.path.isdir(rules_dir)):
        os.unlink(rules_dir)  # never follow a link the agent may have planted
    if not os.path.isdir(rules_dir):
        os.mkdir(rules_dir, 0o755)
    for name in os.listdir(rules_dir):
        if name.endswith(".rules") and name != RULES_FILE:
            os.unlink(os.path.join(rules_dir, name))
    text = "# Written by hangar before each turn: every command asks (approvals: %s).\n" % cfg.approvals
    text += "".join('prefix_rule(pattern=["%s"], decision="prompt")\n' % name for name in KNOWN_SAFE)
    tmp = ours + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # readable by the agent's uid; owned by the driver, so not the agent's to change
    os.rename(tmp, ours)


def fork_state_home(cfg: TurnConfig) -> str:
    """An empty state database directory for a fork's first turn. Codex's state database records each
    thread's rollout by absolute path; a cloned volume mounted at another path (the local pod runner's
    clones) carries the parent's, and thread/fork refuses it ("must be in Codex home directory"). Without
    the database Codex finds the rollout under $CODEX_HOME/sessions itself; later turns use the usual one."""
    path = os.path.join(codex_home(cfg), "fork-state")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, 0o700)
    if cfg.run_as and os.getuid() == 0:
        os.chown(path, int(cfg.run_as["uid"]), int(cfg.run_as.get("gid", cfg.run_as["uid"])))
    return path
