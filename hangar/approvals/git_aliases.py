"""git's global options (:func:`global_options`, read for every rule that looks at git) and its aliases: ``git -c alias.p='push -f' p`` and ``git config alias.p 'push -f' && git p origin main`` run
``git push -f``; an alias that starts with "!" runs a shell command (``git -c alias.x='!rm -rf /' x``).

An alias set in the command line (``-c`` on the same git, or ``git config [--global] alias.NAME VALUE`` earlier
in it) is expanded before the rules look at git. One set before the command line ran (in a config file) is
not known: the rules read the words given.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from .shell import Part, Word

# git's global options that take the next word as their value (``-C DIR``, ``-c name=value``).
GLOBAL_VALUES = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}
)
_CONFIG_VALUES = frozenset({"-f", "--file", "--blob", "--type", "--default", "--comment"})


def global_options(args: Sequence[Word]) -> tuple[int, list[tuple[str, Word]]]:
    """Where git's subcommand is in ``args`` (after its global options and their values), and each global
    option given its value as the next word, in order (``("-C", DIR)``, ``("-c", "name=value")``)."""
    i = 0
    given: list[tuple[str, Word]] = []
    while i < len(args):
        lit = args[i].literal
        if lit is None or not lit.startswith("-"):
            break
        takes = lit in GLOBAL_VALUES and not (lit.startswith("--") and "=" in lit)
        if takes and i + 1 < len(args):
            given.append((lit, args[i + 1]))
        i += 2 if takes else 1
    return i, given


def subcommand_at(args: Sequence[Word]) -> int:
    """Where git's subcommand is in ``args``: after its global options and their values."""
    return global_options(args)[0]


def alias_set(args: Sequence[Word]) -> tuple[str, str] | None:
    """(name, value) when ``git args`` sets an alias: ``git config [--global] alias.NAME VALUE`` (or ``git
    config set alias.NAME VALUE``)."""
    at = subcommand_at(args)
    if at >= len(args) or args[at].literal != "config":
        return None
    operands: list[str] = []
    rest = list(args[at + 1 :])
    while rest:
        lit = rest.pop(0).literal
        if lit is None:
            return None
        if lit.startswith("-"):
            if lit in _CONFIG_VALUES and rest:
                rest.pop(0)
            continue
        operands.append(lit)
    if operands[:1] == ["set"]:
        operands = operands[1:]
    if len(operands) >= 2 and operands[0].lower().startswith("alias."):
        return operands[0][len("alias.") :], operands[1]
    return None


def expanded(args: Sequence[Word], aliases: dict[str, str]) -> list[Word] | str | None:
    """``git args`` with its subcommand's alias expanded: git's words (a git alias), or a shell command (an
    alias starting with "!", given the words after it); None when the subcommand is no alias known here."""
    at, options = global_options(args)
    sub = args[at].literal if at < len(args) else None
    if sub is None:
        return None
    given = dict(aliases)
    for option, word in options:
        value = word.literal if option == "-c" else None
        if value is not None and value.lower().startswith("alias.") and "=" in value:
            key, _, text = value.partition("=")
            given[key[len("alias.") :]] = text
    value = given.get(sub)
    if value is None:
        return None
    rest = args[at + 1 :]
    if value.startswith("!"):
        return " ".join([value[1:], *(shlex.quote(w.text) for w in rest)])
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    return [*args[:at], *(Word((Part("lit", w),)) for w in words), *rest]
