"""Claude Code under a policy other than ``auto``: the settings that make every shell command and file edit
ask, and the ``allow_always`` grants the adapter keeps for the turn itself.

Standard library only, Python 3.8+.

Why ask rules
-------------
In its ``default`` mode Claude Code runs what it deems read-only (``ls``, ``pwd``, ``cat`` inside the tree,
``echo … && pwd && ls -a``) without calling the permission prompt tool, so hangar never saw those commands.
An ``ask`` rule for a whole tool, given with ``--settings``, makes every call of it ask (checked with Claude
Code 2.1.332; no ``--permission-mode`` does that). Claude evaluates deny, then ask, then allow rules, so
an ask rule also outranks any allow rule a repository's or user's settings bring.

Why the adapter keeps the grants
--------------------------------
For the same reason a session allow rule (what ``allow_always`` used to add) no longer applies to these
tools, and the CLI stops offering its own suggestions for them. So the adapter remembers what was allowed
always in this turn (``Grants``) and answers a matching request itself; the grants die with the turn, and
the next turn asks again. "Calls like this one" is, for a tool in ``ASK_TOOLS``:

* a shell command (``Bash``, ``Monitor``) that is one simple command ``program subcommand …`` (plain words
  only: no operator, redirection, expansion, glob or comment; the program not a wrapper such as ``sudo`` or
  ``env``; the subcommand a lowercase word): any such simple command with the same first two words, as
  Claude's own ``Bash(git init *)`` suggestion did; any other command: exactly the same command;
* ``Edit``, ``Write``, ``MultiEdit``: any of them on the same file; ``NotebookEdit``: the same notebook;
* anything else: the same tool with exactly the same input.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any, Dict, List, Optional, Set, Tuple

# The tools whose every call reaches hangar: shell commands and file edits (Monitor runs a command; the
# worktree tools run git and create or remove a checkout).
ASK_TOOLS = (
    "Bash",
    "Monitor",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "EnterWorktree",
    "ExitWorktree",
)
_SHELL_TOOLS = ("Bash", "Monitor")
_EDIT_TOOLS = ("Edit", "Write", "MultiEdit")

# A command with none of these is plain words: no operator, redirection, substitution, glob, ~ or comment.
_NOT_PLAIN = re.compile(r"[;&|<>()$`\\\n\r*?\[\]{}~!#]")
_PROGRAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*\Z")
# Programs that run another command: their "subcommand" is a program, so only the exact command is granted.
_WRAPPERS = frozenset(
    "sudo su doas pkexec run0 env xargs sh bash dash zsh ksh fish eval exec command builtin nohup timeout "
    "nice ionice time stdbuf setsid busybox chroot flock watch strace".split()
)

GrantKey = Tuple[str, ...]


def command_prefix(command: str) -> Optional[Tuple[str, str]]:
    """``(program, subcommand)`` when ``command`` is one simple command of plain words, else None."""
    if _NOT_PLAIN.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 2 or words[0] in _WRAPPERS:
        return None
    if not _PROGRAM.match(words[0]) or not _SUBCOMMAND.match(words[1]):
        return None
    return words[0], words[1]


def grant_key(tool: str, tool_input: Dict[str, Any]) -> GrantKey:
    """What an ``allow_always`` of this call covers; a later call is covered when its key is the same."""
    if tool in _SHELL_TOOLS and isinstance(tool_input.get("command"), str):
        command = str(tool_input["command"])
        prefix = command_prefix(command)
        if prefix is not None:
            return ("prefix", tool, prefix[0], prefix[1])
        return ("command", tool, command)
    if tool in _EDIT_TOOLS and isinstance(tool_input.get("file_path"), str):
        return ("file", os.path.normpath(str(tool_input["file_path"])))
    if tool == "NotebookEdit" and isinstance(tool_input.get("notebook_path"), str):
        return ("notebook", os.path.normpath(str(tool_input["notebook_path"])))
    return ("input", tool, json.dumps(tool_input, sort_keys=True, separators=(",", ":")))


class Grants:
    """The ``allow_always`` answers of one turn, for the tools in ``ASK_TOOLS``."""

    def __init__(self) -> None:
        self._keys: Set[GrantKey] = set()

    def add(self, tool: str, tool_input: Dict[str, Any]) -> None:
        self._keys.add(grant_key(tool, tool_input))

    def covers(self, tool: str, tool_input: Dict[str, Any]) -> bool:
        return tool in ASK_TOOLS and grant_key(tool, tool_input) in self._keys


def _settings_of(value: str) -> Dict[str, Any]:
    """An Environment's own ``--settings`` value: a JSON object, or the path of a file holding one."""
    text = value
    if not value.lstrip().startswith("{"):
        with open(value) as f:
            text = f.read()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("--settings is not a JSON object")
    return data


def ask_settings_args(extra_args: List[str]) -> List[str]:
    """``extra_args`` (the Environment's ``claude_args``) without any ``--settings``, followed by one
    ``--settings`` that adds the ask rules to the Environment's own. The CLI keeps only the last
    ``--settings`` it is given, so hangar's comes last and carries theirs; settings that cannot be read are
    dropped rather than let them drop the ask rules."""
    rest: List[str] = []
    settings: Dict[str, Any] = {}
    i = 0
    while i < len(extra_args):
        arg = extra_args[i]
        value: Optional[str] = None
        if arg == "--settings" and i + 1 < len(extra_args):
            value = extra_args[i + 1]
            i += 2
        elif arg.startswith("--settings="):
            value = arg[len("--settings=") :]
            i += 1
        else:
            rest.append(arg)
            i += 1
            continue
        try:
            settings = _settings_of(value)
        except (OSError, ValueError):
            settings = {}
    permissions = settings.get("permissions")
    permissions = dict(permissions) if isinstance(permissions, dict) else {}
    permissions.pop("defaultMode", None)  # hangar picks the mode (default: checks on)
    ask = permissions.get("ask")
    ask = [str(r) for r in ask] if isinstance(ask, list) else []
    permissions["ask"] = ask + [t for t in ASK_TOOLS if t not in ask]
    merged = dict(settings)
    merged["permissions"] = permissions
    return [*rest, "--settings", json.dumps(merged, separators=(",", ":"))]
