"""What the tests of the shell readers share: a Bash call to the engine and to the engine before issue 15
(``approvals_before/``, frozen), and the check that both find the same."""

from __future__ import annotations

from hangar.approvals import POLICIES, ToolCall, assess, decide
from tests.unit.approvals_before import rules as old_rules
from tests.unit.test_shell_equivalence import outcome

CWD, HOME, IO = "/workspace", "/home/agent", "/var/lib/hangar/io/t-1"


def calls(src: str, tainted: bool) -> tuple[ToolCall, old_rules.ToolCall]:
    """The same Bash call, as the engine and as the engine before issue 15 take it."""
    return (
        ToolCall("Bash", {"command": src}, src, CWD, HOME, IO, tainted),
        old_rules.ToolCall("Bash", {"command": src}, src, CWD, HOME, IO, tainted),
    )


def assert_as_before(src: str, tainted: bool) -> None:
    """The findings (in their order) and the verdict under every policy are the old engine's, unless the
    old engine overflowed the stack (then the new one flags it: ``test_approval_rules``)."""
    new, old = calls(src, tainted)
    before = outcome(old_rules.assess, old)
    if before == ("recursion",):
        return
    assert outcome(assess, new) == before
    for policy in POLICIES:
        assert outcome(decide, policy, new) == outcome(old_rules.decide, policy, old), policy
