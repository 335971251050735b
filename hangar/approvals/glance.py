"""What the rules' quick check needs of a plain (or ``quick.mask``-marked) script, read by a few C scans.

When no command of a script is one a rule looks at, the rules' walk of it (``ShellAnalysis.all_clear``)
needs only the distinct first words of its commands, its redirections (operator and target) and, when some
word may name a secret, its words: not the script's pipelines. ``plain.read`` makes those pipelines, a
Python step per run of words and operators (a 20,000-character script has ~1,250 runs); here two regex
scans find the commands' first words and the redirections, and the rest is sets of what they found.

:func:`read` and :func:`redirections` (two steps, so that a script whose names a rule looks at is
declined after the first) take only a script ``plain.read`` reads in the usual shape, and decline (None:
the caller reads it as before) anything else: a redirection before a command's name (``>out cmd``,
``2>x cmd``), ``function`` (``[[`` and here-documents are the caller's to leave), a reserved word where the
parser would take it as a name, a run of operators that is not one separator run or one redirection (``;>``,
``>>&``), a redirection without a target, and everything ``plain.read`` itself declines. What they give is
then what ``plain.read``'s pipelines hold (``tests/unit/test_shell_glance.py`` holds the two equal on
generated scripts): every command's first word (after ``!``, ``if``, ``then``… and assignments; ``for``,
``select`` and ``case`` are such words, their heads' words the command's arguments), the marks the parser
takes as assignments before it, and every redirection.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from .parser import _HEADS, _SKIP, _SKIP_CLAUSE
from .plain import MARK, group_pipe, plain_text
from .shell_types import _ASSIGN

_W = r"[^ \t\n;&|()<>]"  # a character of a word in a plain script
# What ends a reserved word or an assignment that the parser takes before a command's name: blanks, a
# separator's character (not consumed: the next scan starts there), the end. A "<", ">" or "&" right after
# one (`X=1>x`, `then&`) ends the span there, and read() declines it.
_AFTER = r"(?:[ \t]++|(?=[;|()\n]|\Z))"
_SKIPS = (
    r"!|\{|\}|if|then|el(?:se|if)|fi|do(?:ne)?|while|until|esac"  # _SKIP, as a trie: tried at each command
)
# _ASSIGN on one word (its brackets hold no blank and no operator's character), possessive: a word that is
# no assignment is given up after one look.
_ASSIGNMENT = r"[A-Za-z_][A-Za-z0-9_]*+(?:\[[^\] \t\n;&|()<>]*+\])?+\+?+="
# A command's span: from its start, the reserved words and assignments the parser takes before its name
# (possessive: never given back), the name ("" when the command has none) and the redirection's character
# right after it, if any: "<", ">", or the "&" of "&>" (the name may be an IO number, the command may start
# with a redirection). Never a separator's "&" (`x& y`): the next command's scan starts there. One group,
# so that the scan makes one string per command and a set of them is cheap to make.
_COMMAND = rf"[ \t]*+((?:(?:{_SKIPS}){_AFTER})*+(?:{_ASSIGNMENT}{_W}*+{_AFTER})*+{_W}*+(?:[<>]|&(?=>))?)"
_START = re.compile(_COMMAND)
# A command after a separator run: a run of separator characters only (the character before its first is
# not an operator's, and no "<" or ">" follows its last). Its first character leads the pattern so that the
# scan skips to those characters in C.
_AFTER_SEPARATOR = re.compile(rf"[;&|()\n](?<![;&|()<>\n][;&|()\n])[;&|()\n]*+(?![<>]){_COMMAND}")
# A redirection starting with "<", ">" or "&": the whole run of operator characters it starts (group 1; one
# operator when read() takes it), its target (group 2) and the character right after the target when it is
# "<" or ">" (group 3). One pattern for each first character, so that each scan skips to its literal in the
# regex engine's tight loop (a class of characters, "[<>&]", is tested at each position: 2x slower).
_TARGET = rf"[;&|()<>\n]*+)[ \t]*+({_W}*+)([<>]?)"
_REDIRECTIONS = (
    ("<", re.compile(rf"(<(?<![;&|()<>\n]<){_TARGET}")),
    (">", re.compile(rf"(>(?<![;&|()<>\n]>){_TARGET}")),
    ("&>", re.compile(rf"(&(?<![;&|()<>\n]&)(?=>){_TARGET}")),  # "&>", "&>>"
)
# The redirection operators read() takes (no here-document nor here-string: the caller leaves "<<"), and
# how many "<" or ">" each holds: every one of the script's must be in one of them.
_ANGLES = {">": 1, "<": 1, ">>": 2, ">|": 1, ">&": 1, "<>": 2, "<&": 1, "&>": 1, "&>>": 2}
_CLAUSES = _SKIP | _SKIP_CLAUSE


class Glance(NamedTuple):
    """What :func:`read` found: each as written (a mark for a word ``quick.mask`` took). It holds only when
    :func:`redirections` is not None."""

    firsts: set[str]  # the first words of the commands
    assignments: list[str]  # the marks that stand as assignments before a command's name


def read(src: str) -> Glance | None:
    """The first words, marked assignments and redirections of ``src`` (see the module's docstring), or None
    when it is not a plain script in the shape read here. ``src`` holds no here-document and no ``[[``."""
    if not plain_text(src):
        return None
    if "|" in src and group_pipe(src):
        return None  # a group next to a pipe: plain.read leaves it to the parser (one pipeline of the group)
    spans = set(_AFTER_SEPARATOR.findall(src))
    start = _START.match(src)
    assert start is not None  # it may match nothing
    spans.add(start.group(1))
    firsts: set[str] = set()
    assignments: list[str] = []
    for span in spans:
        after = span[-1:] if span.endswith(("<", ">", "&")) else ""
        words = (span[:-1] if after else span).split()
        # The command's name as plain.read finds it: after the reserved words it skips (only before an
        # assignment) and the assignments. The span ends with it, or it has none.
        first = ""
        assigned = False
        for i, w in enumerate(words):
            if not assigned and w in _SKIP:
                continue
            if _ASSIGN.match(w):
                assigned = True
                continue
            if i != len(words) - 1:
                return None  # not a span this reads (the scan ends one at its name)
            first = w
        if after and (not first or first.isdigit()):
            return None  # a redirection before the name (`>x cmd`, `2>x cmd`, `&>x cmd`), `X=1>x`, `fi&`
        if first in _CLAUSES and first not in _HEADS:
            # `function f`, or a reserved word the parser takes as a name (`X=1 fi`); a loop head or case
            # subject (`for x in …`, `X=1 for`) is a command named for, select or case (the parser's).
            return None
        if first:
            firsts.add(first)
        if MARK in span:
            assignments += [w for w in (words[:-1] if first else words) if MARK in w]
    return Glance(firsts, assignments)


def redirections(src: str) -> set[tuple[str, str]] | None:
    """The redirections of ``src`` (operator, target) when read() took it, or None when a run of operators
    holding a "<" or ">" is not one redirection with a target (then read() missed a command: `ls;>x rm`).
    Apart from read(), so that a script whose names some rule looks at is declined before this scan."""
    angles = 0
    redirects: set[tuple[str, str]] = set()
    for first, pattern in _REDIRECTIONS:
        if first not in src:
            continue
        for (op, target, after), n in Counter(pattern.findall(src)).items():
            count = _ANGLES.get(op)
            if count is None or not target or after:
                # Operators run together, no target, or a "<" or ">" right after the target (`>2>x`: the
                # target is the next one's IO number; `<x>y`): left to the caller's reading.
                return None
            angles += count * n
            redirects.add((op, target))
    if angles != src.count("<") + src.count(">"):
        return None  # a "<" or ">" in a run of operators the scan did not take (`;>`, `&&>`)
    return redirects
