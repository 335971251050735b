"""What the tests of the shell readers share: a Bash call to the engine and to the engine before issue 15
(``approvals_before/``, frozen), the check that both find the same, and the check of a fast reader's
``script()`` against the walk of every parsed pipeline."""

from __future__ import annotations

from hangar.approvals import POLICIES, ToolCall, assess, commands, decide, shell
from hangar.approvals.paths import Where
from tests.unit.approvals_before import rules as old_rules
from tests.unit.test_shell_equivalence import findings_as_strict, outcome, verdict_as_strict

CWD, HOME, IO = "/workspace", "/home/agent", "/var/lib/hangar/io/t-1"


def calls(src: str, tainted: bool) -> tuple[ToolCall, old_rules.ToolCall]:
    """The same Bash call, as the engine and as the engine before issue 15 take it."""
    return (
        ToolCall("Bash", {"command": src}, src, CWD, HOME, IO, tainted),
        old_rules.ToolCall("Bash", {"command": src}, src, CWD, HOME, IO, tainted),
    )


def assert_as_before(src: str, tainted: bool) -> None:
    """The findings (in their order) and the verdict under every policy are the old engine's, unless the
    old engine overflowed the stack (then the new one flags it: ``test_approval_rules``), or the script has
    a clause whose words the old engine walked past (then the new one is as strict or stricter:
    ``test_shell_equivalence.STRICTER_ON``)."""
    new, old = calls(src, tainted)
    before = outcome(old_rules.assess, old)
    if before == ("recursion",):
        return
    after = outcome(assess, new)
    if after != before:
        assert after[0] == before[0] == "ok"
        assert findings_as_strict(src, assess(new), old_rules.assess(old)), src
    for policy in POLICIES:
        after = outcome(decide, policy, new)
        if after != outcome(old_rules.decide, policy, old):
            assert verdict_as_strict(src, decide(policy, new), old_rules.decide(policy, old)), policy


def assert_script_as_walked(src: str, *, too_deep_is_skipped: bool = False) -> None:
    """What ``script()`` returns (the programs run) and finds, in order, against ``walk()`` of every pipeline
    ``shell.parse`` makes of ``src`` (the path that makes every object). A script the parser refuses is not
    compared; nor, with ``too_deep_is_skipped``, one whose walk overflows the stack."""
    where = Where(CWD, HOME, IO)
    try:
        pipelines = shell.parse(src).pipelines
    except shell.ShellSyntaxError:
        return
    full = commands.ShellAnalysis(where, True)
    full.top = src  # the command line, as script() sets it: what a computed name's values are read from
    full.stack.append(set())
    try:
        for p in pipelines:
            full.walk(p, 0)
    except RecursionError:
        if not too_deep_is_skipped:
            raise
        return
    fast = commands.ShellAnalysis(where, True)
    assert fast.script(src) == frozenset(full.stack[-1])
    assert fast.findings == full.findings, (src, fast.findings, full.findings)
