"""The approvals policy engine: what happens to one tool call under a session's policy.

Pure logic, standard library only. The control plane builds a :class:`ToolCall` from the driver's
permission request and calls :func:`decide`; the :class:`Verdict` says allow, deny or ask, why, and which
rule decided.

Policies (spec "Tool approvals"):

- ``auto``: nothing is asked; everything is allowed (rule ``auto``).
- ``ask``: a person answers every call. Hand-back commands are allowed by the policy at once (rule
  ``handback``). The verdict's reason says why a call was flagged: a taint-risky call carries "after
  reading untrusted content"; otherwise it starts with "approvals: ask".
- ``deny-risky``: hangar answers at once: what the rules below flag is denied (the reason is what the
  agent is told), everything else is allowed (rule ``default``).
- ``governed``: what the rules flag waits for Tower (decision ``ask``, ``governed`` set); the rest is
  allowed at once.

The rules (:data:`~hangar.approvals.program_rules.RULE_ORDER`, ids in brackets): force-pushes [force-push] and
remote branch deletion [branch-delete]; sudo, su, doas [sudo]; a download piped into a shell
[pipe-to-shell]; recursive deletes of the working tree or anything outside it [rm-recursive]; system
commands such as mkfs, ``dd of=/dev/…``, shutdown, or a redirection onto a device [system]; reading or
writing credentials and hangar's files, except the turn's own $HANGAR_IO [credentials]; file writes
outside the repository and $HANGAR_IO [write-outside]; what is more than the rules follow [nesting]: shells
nested more than MAX_DEPTH deep, quoting nested deeper than Python's recursion, or a shell command longer
than MAX_COMMAND characters (the rules' time grows with the command's length, and the operator waits on
them).
Once the turn is tainted (and only under ask, deny-risky and governed): any ``git push`` and
``gh pr create`` [taint-push], curl, wget or nc to a host other than the sandbox [taint-network], and the
environment's MCP write tools [taint-mcp-write].

This is a guard rail against mistakes, not a sandbox. Paths are resolved against the turn's working
directory, so ``cd /elsewhere && rm -r x`` gets past the rules; so does a command assembled at run time.

A shell command the parser cannot read (an unbalanced quote: bash would refuse that line) is still
scanned token by token: once with whatever is open closed at the end, once with the quote characters
taken out (in case the parser misread where a quote starts). Under deny-risky and governed it is denied
(or sent to Tower) only if a rule matches that scan, like any other command, and allowed otherwise: the
policy denies what its rules match, not what it fails to read. Under ask a person sees it anyway, and the
reason says it could not be parsed. It is never a hand-back command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from .commands import MAX_COMMAND, ShellAnalysis
from .handback import is_handback
from .paths import Where, credential, expand_string, holds_credentials, locate, normalize
from .program_rules import Finding, first, writable

Policy = Literal["auto", "ask", "deny-risky", "governed"]
Decision = Literal["allow", "deny", "ask"]
POLICIES: tuple[Policy, ...] = ("auto", "ask", "deny-risky", "governed")

# Tools whose input is a shell command (Claude Code's Bash, Codex's exec_command and its approvals).
SHELL_TOOLS = frozenset({"Bash", "exec_command", "shell", "shell_command", "local_shell", "commandExecution"})
# Tools that write the files they name.
WRITE_TOOLS = frozenset(
    {"Edit", "Write", "MultiEdit", "NotebookEdit", "fileChange", "apply_patch", "applyPatch"}
)
# Tools that only read the files they name: only the credentials rule applies to them.
READ_TOOLS = frozenset({"Read", "NotebookRead", "Grep", "Glob", "LS"})

_PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class ToolCall:
    """One tool call the agent wants to make, and the turn it is made in."""

    tool: str  # "Bash", "Edit", "Write", "Read", "exec_command", "fileChange", "mcp__<server>__<tool>" …
    input: Mapping[str, Any]  # the CLI's tool input
    command: str | None  # the shell command when it is a shell call (Codex: "/bin/bash -lc '…'")
    cwd: str  # the turn's working directory (the repository checkout)
    home: str  # the agent's HOME
    hangar_io: str  # the turn's $HANGAR_IO directory
    tainted: bool = False


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str  # deny: what the agent is told; ask: why it was flagged; allow: why it may run
    rule: str  # stable rule id: "auto", "ask", "default", "handback" or one of RULE_ORDER
    resolved_by: Literal["policy"] | None = None  # "policy": hangar answered at once
    taint: bool = False  # the taint gate flagged it ("after reading untrusted content")
    governed: bool = False  # governed policy: Tower decides (decision is "ask")


@dataclass(frozen=True)
class Assessment:
    """What the rules found in one call (the most serious finding first) and whether all of it parsed."""

    findings: tuple[Finding, ...] = ()
    unparsed: bool = False
    shell: bool = False

    @property
    def finding(self) -> Finding | None:
        return first(self.findings)


def shell_command(call: ToolCall) -> str | None:
    """The shell command of a call: ``call.command``, else the command in a shell tool's input."""
    if call.command is not None:
        return call.command
    if call.tool not in SHELL_TOOLS:
        return None
    action = call.input.get("action")  # the Responses API's local_shell_call: {"action": {"command": [...]}}
    for data in (call.input, action if isinstance(action, Mapping) else {}):
        for key in ("command", "cmd"):
            value = data.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
                return shlex.join(value)
    return None


def _where(call: ToolCall) -> Where:
    home = call.home.rstrip("/") or call.home
    where = Where(cwd=call.cwd or "/", home=home, hangar_io="")
    return Where(
        cwd=normalize(where.cwd, where),
        home=normalize(home, where) if home else "",
        hangar_io=normalize(call.hangar_io, where) if call.hangar_io else "",
    )


def _paths(call: ToolCall) -> list[str]:
    """The file paths a file tool's input names."""
    data = call.input
    out: list[str] = []
    for key in ("file_path", "notebook_path", "path", "grantRoot", "grant_root", "move_path", "movePath"):
        value = data.get(key)
        if isinstance(value, str) and value:
            out.append(value)
    # Glob's pattern and Grep's glob are read from their directory (``path``, else the turn's): a pattern
    # may reach a secret the directory alone does not name (`.s*/*` from HOME).
    pattern = (
        data.get("pattern") if call.tool == "Glob" else data.get("glob") if call.tool == "Grep" else None
    )
    if isinstance(pattern, str) and pattern:
        base = data.get("path")
        if isinstance(base, str) and base and not pattern.startswith(("/", "~")):
            pattern = f"{base.rstrip('/')}/{pattern}"
        out.append(pattern)
    for key in ("changes", "fileChanges", "file_changes"):
        changes = data.get(key)
        if isinstance(changes, Mapping):
            out += [str(k) for k in changes]
            changes = list(changes.values())
        if isinstance(changes, Sequence) and not isinstance(changes, str):
            for change in changes:
                if isinstance(change, Mapping):
                    for sub in ("path", "move_path", "movePath"):
                        value = change.get(sub)
                        if isinstance(value, str) and value:
                            out.append(value)
                    kind = change.get("kind")
                    if isinstance(kind, Mapping):
                        for sub in ("move_path", "movePath"):
                            value = kind.get(sub)
                            if isinstance(value, str) and value:
                                out.append(value)
    for key in ("input", "patch"):
        patch = data.get(key)
        if isinstance(patch, str):
            out += [m.group(1).strip() for m in _PATCH_PATH.finditer(patch)]
    return out


def _mcp_write(tool: str, mcp_write_tools: Mapping[str, Sequence[str]]) -> tuple[str, str] | None:
    """(server, tool) when ``tool`` is ``mcp__<server>__<tool>`` and the tool's name matches one of the
    server's write_tools patterns (fnmatch, case-sensitive; a pattern may also name the full tool).

    The server is the environment's MCP entry name, as written or as Claude Code spells it in tool names
    (every character other than letters, digits, ``_`` and ``-`` becomes ``_``); the longest match wins.
    """
    if not tool.startswith("mcp__"):
        return None
    best: tuple[int, str, str] | None = None
    for server, patterns in mcp_write_tools.items():
        names = [patterns] if isinstance(patterns, str) else list(patterns)
        for spelled in {server, re.sub(r"[^A-Za-z0-9_-]", "_", server)}:
            prefix = f"mcp__{spelled}__"
            name = tool[len(prefix) :]
            if not tool.startswith(prefix) or not name or (best is not None and best[0] >= len(spelled)):
                continue
            if any(fnmatchcase(name, p) or fnmatchcase(tool, p) for p in names):
                best = (len(spelled), server, name)
    return None if best is None else (best[1], best[2])


def assess(call: ToolCall, mcp_write_tools: Mapping[str, Sequence[str]] | None = None) -> Assessment:
    """Every rule that matches the call (the taint gate only when the call is tainted)."""
    where = _where(call)
    command = shell_command(call)
    if command is not None:
        if len(command) > MAX_COMMAND:
            # The rules cost time in proportion to the command, and the operator waits on them: past the
            # cap the command is not read, and is flagged as one hangar does not follow.
            what = f"a command of {len(command):,} characters, more than the {MAX_COMMAND:,} hangar reads"
            return Assessment((Finding("nesting", what),), shell=True)
        analysis = ShellAnalysis(where, call.tainted)
        try:
            analysis.script(command)
        except RecursionError:
            # Quotes and substitutions nested thousands deep: as unreadable as shells nested too deep.
            analysis.findings.append(Finding("nesting", "quoting nested deeper than hangar reads"))
        return Assessment(tuple(analysis.findings), analysis.unparsed, shell=True)
    if call.tool in SHELL_TOOLS:
        # Fail closed: a shell call whose command is not where hangar looks is not let through unread.
        what = f"a shell call ({call.tool}) whose command hangar cannot find in its input"
        return Assessment((Finding("nesting", what),), unparsed=True, shell=True)
    findings: list[Finding] = []
    label = call.tool
    if call.tool == "Grep" and not call.input.get("glob") and not call.input.get("type"):
        # Grep searches a directory's whole tree: HOME (or /) holds the credentials kept under it. A glob or
        # a file type narrows it to those files (the glob is checked as a path below).
        where_searched = str(call.input.get("path") or where.cwd)
        path = locate(expand_string(where_searched, where), where)
        held = holds_credentials(path, where) if path is not None else None
        if held is not None:
            findings.append(Finding("credentials", f"Grep reads {held}, the whole tree: {where_searched}"))
    if call.tool in WRITE_TOOLS or call.tool in READ_TOOLS:
        writes = call.tool in WRITE_TOOLS
        for raw in _paths(call):
            expanded = expand_string(raw, where)
            kind = credential(normalize(expanded, where), where)
            if kind is not None:
                verb = "writes" if writes else "reads"
                findings.append(Finding("credentials", f"{label} {verb} {kind}: {raw}"))
                continue
            path = locate(expanded, where)
            if writes and (path is None or not writable(path, where)):
                findings.append(
                    Finding("write-outside", f"{label} writes outside the repository and $HANGAR_IO: {raw}")
                )
    if call.tainted:
        hit = _mcp_write(call.tool, mcp_write_tools or {})
        if hit is not None:
            findings.append(Finding("taint-mcp-write", f"MCP write tool {hit[1]} on {hit[0]}", taint=True))
    return Assessment(tuple(findings))


def risky(call: ToolCall, mcp_write_tools: Mapping[str, Sequence[str]] | None = None) -> Verdict | None:
    """The deny-risky rule set and the taint gate: a deny verdict for the most serious rule the call
    trips (its reason is the finding, with "after reading untrusted content" for the taint gate's), or
    None when the call is harmless. The hand-back exemption is not applied here (see :func:`decide`)."""
    finding = assess(call, mcp_write_tools).finding
    if finding is None:
        return None
    return Verdict("deny", finding.reason, finding.rule, "policy", taint=finding.taint)


def _handback(call: ToolCall) -> bool:
    command = shell_command(call)
    return command is not None and is_handback(command)


def decide(
    policy: Policy, call: ToolCall, *, mcp_write_tools: Mapping[str, Sequence[str]] | None = None
) -> Verdict:
    """What happens to ``call`` under ``policy`` (see the module's docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown approvals policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if policy == "auto":
        return Verdict("allow", "approvals: auto", "auto")
    if _handback(call):
        return Verdict("allow", "hangar-agent hand-back command", "handback", "policy")
    found = assess(call, mcp_write_tools)
    finding = found.finding
    if policy == "ask":
        if finding is not None:
            return Verdict(
                "ask", f"approvals: ask; flagged: {finding.reason}", finding.rule, taint=finding.taint
            )
        reason = "approvals: ask"
        if found.unparsed:
            reason += " (the command could not be parsed)"
        return Verdict("ask", reason, "ask")
    if finding is None:
        reason = "no rule matched"
        if found.unparsed:
            reason += " (the command could not be parsed; it was scanned token by token)"
        return Verdict("allow", reason, "default", "policy")
    if policy == "deny-risky":
        return Verdict(
            "deny",
            f"Denied by hangar (approvals: deny-risky): {finding.reason}",
            finding.rule,
            "policy",
            finding.taint,
        )
    return Verdict("ask", f"governed: {finding.reason}", finding.rule, taint=finding.taint, governed=True)
