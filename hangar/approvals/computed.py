"""A command whose name is computed (``$X -rf /``, ``$(echo git) push -f``), and what a command prints.

The rules know a program by its name; a name that expands is worked out where the command line itself says
what it is:

- a variable assigned in the command line (``X=rm; $X -rf /``, ``for g in git; do $g push -f; done``,
  ``X=$(echo rm)``), each value it is given anywhere in it (which branch runs is not known: every value is
  a candidate), and a default (``${RM:-rm}``);
- a substitution of a command whose output is known (:func:`printed`): ``echo``/``printf`` of literal words,
  ``which rm``, ``command -v rm``, ``basename /bin/rm``;
- pieces of both (``r${X}m``), up to a few candidates.

A name that cannot be worked out (a variable from the environment, ``$(cat f)``) is read *as if* it were each
program whose danger is in its arguments (rm, git): ``$TOOL -rf /`` deletes the root if ``$TOOL`` is rm,
so it is flagged — with the rules' own verdict on those arguments, as an unknown recursive delete target is
(``rm -rf "$X"``). :func:`printed` also gives what ``echo '…' | sh`` hands a shell as its script.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from itertools import islice, product

from .argv import Cmd, program, unwrap_all
from .shell import Part, Redirect, ShellSyntaxError, Word, parse

MAX_CANDIDATES = 8  # names tried for one command; more are cut (a guard rail: a command line has few)
AS_IF = ("rm", "git")  # what an unknown name is read as: the programs whose arguments say their danger
GUESSED_RULES = frozenset({"rm-recursive", "force-push", "branch-delete", "taint-push"})  # what a guess keeps

# An assignment anywhere in the command line (``X=rm``, ``X='git push'``, ``X=$(echo rm)``, ``a=(git push)``)
# and a for loop's words: each value a variable is given.
_ASSIGNED = re.compile(
    r"""(?<![\w$])(\w+)=(?:\(([^()]*)\)|'([^']*)'|"([^"\\]*)"|\$\(([^()]*)\)|`([^`]*)`|([^\s;&|()<>'"`\\]*))"""
)
_FOR = re.compile(r"\bfor\s+(\w+)\s+in\s+([^;\n]*)")
# A function definition whose body holds no braces of its own: ``f() { …; }`` found from its ``()`` (a scan
# for one character; a pattern that began at the name tried every word of the line, ~0.2 µs a character),
# and ``function f { …; }``.
_FUNCTION_PARENS = re.compile(r"\(\s*\)\s*\{([^{}]*)\}")
_FUNCTION_KEYWORD = re.compile(r"\bfunction\s+([\w.:-]+)\s*\{([^{}]*)\}")
# The positional parameters a script or a function body reads: "$@", $*, ${1}, "$2" …
_POSITIONAL = re.compile(r'"\$\{?[@*]\}?"|\$\{?[@*]\}?|"\$\{?([0-9])\}?"|\$\{?([0-9])\}?')
_DEFAULT = re.compile(r"^(\w+)(?::?[-=])(.*)$", re.DOTALL)
_NAME = re.compile(r"^\w+(?:\[(?:@|\*|0)\])?$")


# The programs printed() knows the output of.
PRINTERS = frozenset({"echo", "printf", "cat", "which", "whence", "command", "type", "basename"})


def printed(words: Sequence[Word], redirects: Sequence[Redirect] = ()) -> str | None:
    """What a command prints when its words say it (``words``: the command as it runs, wrappers taken off):
    ``echo``/``printf`` of literal words, ``cat`` of a here-document or here-string, ``which X`` (and
    ``command -v X``, ``type -P X``) as X, ``basename P``; None for anything else."""
    if not words or words[0].literal is None:
        return None
    lits = [w.literal for w in words]
    name = program(words[0])
    if name == "cat" and len(words) == 1:
        for r in redirects:
            if r.heredoc is not None:
                return r.heredoc.body
            if r.op == "<<<" and r.target is not None and r.target.literal is not None:
                return r.target.literal + "\n"
        return None
    if any(x is None for x in lits):
        return None
    args = [str(x) for x in lits[1:]]
    if name == "echo":
        escapes = False
        while args and re.fullmatch(r"-[neE]+", args[0]):
            escapes = escapes or "e" in args[0]
            args = args[1:]
        text = " ".join(args)
        return _unescape(text) if escapes else text
    if name == "printf" and args:
        return _printf(args[0], args[1:])
    if name in ("which", "whence") and len(args) == 1:
        return args[0]
    if name in ("command", "type") and len(args) == 2 and args[0] in ("-v", "-p", "-P"):
        return args[1]
    if name == "basename" and len(args) == 1:
        return args[0].rstrip("/").rsplit("/", 1)[-1]
    return None


def printed_by(src: str) -> str | None:
    """:func:`printed` of a script that is one simple command (a substitution's ``$(echo rm)``)."""
    try:
        pipelines = parse(src).pipelines
    except ShellSyntaxError:
        return None
    if len(pipelines) != 1 or len(pipelines[0].commands) != 1:
        return None
    command = pipelines[0].commands[0]
    return printed(command.words, command.redirects)


def _unescape(text: str) -> str:
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def _printf(fmt: str, args: list[str]) -> str:
    """printf's output for the usual formats (%s, %b, %d, %%, backslash escapes), the format reused while
    arguments are left, as printf does."""
    out: list[str] = []
    rest = list(args)
    while True:
        used = 0

        def one(m: re.Match[str]) -> str:
            nonlocal used
            if m.group(0) == "%%":
                return "%"
            used += 1
            return rest.pop(0) if rest else ""

        out.append(_unescape(re.sub(r"%%|%[-+ #0-9.]*[sbdiqc]", one, fmt)))
        if not rest or not used:
            return "".join(out)


class Values:
    """The values the command line ``top`` gives each variable, read in one pass when first asked (each
    computed name is then a lookup: a script of many stays linear in its length)."""

    def __init__(self, top: str) -> None:
        self.top = top
        self._found: dict[str, list[str | None]] | None = None
        self._functions: dict[str, str] | None = None

    def function(self, name: str) -> str | None:
        """The body of the function ``name`` the command line defines (the last one), if it does."""
        if self._functions is None:
            top, found = self.top, []
            for m in _FUNCTION_PARENS.finditer(top):
                end = m.start()
                while end > 0 and top[end - 1] in " \t":
                    end -= 1
                start = end
                while start > 0 and (top[start - 1].isalnum() or top[start - 1] in "_.:-"):
                    start -= 1
                if start < end:
                    found.append((start, top[start:end], m.group(1)))
            if "function" in top:
                found += [(m.start(), m.group(1), m.group(2)) for m in _FUNCTION_KEYWORD.finditer(top)]
            self._functions = {name: body for _, name, body in sorted(found)}  # the last definition wins
        return self._functions.get(name)

    def of(self, name: str) -> list[str | None]:
        """The values given ``name`` (None for one the rules cannot know: ``X=$(cat f)``, ``X=$Y``)."""
        if self._found is None:
            self._found = self._read()
        return self._found.get(name, [])

    def _read(self) -> dict[str, list[str | None]]:
        found: dict[str, list[str | None]] = {}
        for m in _ASSIGNED.finditer(self.top):
            name, array, single, double, sub, back, bare = m.groups()
            value: str | None
            if sub is not None or back is not None:
                value = printed_by(sub if sub is not None else back)
            elif single is not None:
                value = single
            else:
                value = next(x for x in (array, double, bare) if x is not None)
                value = None if "$" in value or "`" in value else value  # `X=$Y`, `X="$(cat f)"`
            found.setdefault(name, []).append(value)
        for m in _FOR.finditer(self.top):
            words = m.group(2).split()
            found.setdefault(m.group(1), []).extend(
                None if "$" in w or "`" in w else w.strip("'\"") for w in words
            )
        return found


def forks_itself(name: str, body: str) -> bool:
    """Whether a function's body runs the function again in a pipeline or in the background (``:(){ :|:& };:``,
    a fork bomb): each call starts more, without end."""
    return re.search(r"(?<![\w.:-])" + re.escape(name) + r"\s*(?:\|(?!\|)|&(?!&))", body) is not None


def with_positional(script: str, params: Sequence[str]) -> str | None:
    """``script`` with the positional parameters it reads given ``params`` (``$0`` first), as ``sh -c
    SCRIPT a b`` and a function call give them: ``"$@"`` is the words from ``$1`` on. None when it reads
    none (it runs the same with any)."""

    def given(m: re.Match[str]) -> str:
        digit = m.group(1) or m.group(2)
        if digit is None:
            return " ".join(shlex.quote(p) for p in params[1:])
        n = int(digit)
        return shlex.quote(params[n]) if n < len(params) else "''"

    out = _POSITIONAL.sub(given, script)
    return None if out == script else out


def names(word: Word, values: Values) -> list[list[str]] | None:
    """The words a computed command word may expand to (each candidate split as the shell splits an unquoted
    word), or None when a piece of it cannot be worked out (see the module's docstring)."""
    pieces: list[list[str]] = []
    for part in word.parts:
        if part.kind in ("lit", "glob"):
            pieces.append([part.text])
        elif part.kind == "param":
            given = _param(part.inner, values)
            if not given:
                return None
            pieces.append(given)
        elif part.kind == "cmd":
            out = printed_by(part.inner)
            if out is None:
                return None
            pieces.append([out])
        else:
            return None
    found: list[list[str]] = []
    for combo in islice(product(*pieces), 8 * MAX_CANDIDATES):  # bounded, however many values each piece has
        split = "".join(combo).split()
        if split and split not in found:
            found.append(split)
        if len(found) >= MAX_CANDIDATES:
            break
    return found or None


def _param(inner: str, values: Values) -> list[str]:
    """The values ``${inner}`` may have: those the command line assigns, and its default; none when one of
    them cannot be known."""
    default: str | None = None
    m = _DEFAULT.match(inner)
    if m is not None:
        inner, default = m.group(1), m.group(2)
    if not _NAME.match(inner):
        return []
    given = values.of(inner.split("[", 1)[0])
    if any(v is None for v in given):
        return []
    out = [v for v in given if v is not None]
    if default is not None:
        if "$" in default or "`" in default:
            return []
        out.append(default.strip("'\""))
    return list(dict.fromkeys(out))


def candidates(cmd: Cmd, values: Values) -> tuple[list[Cmd], bool]:
    """What a command whose name expands may run: one command for each name :func:`names` works out from the
    command line (``values``), with its arguments and redirections; else each of ``AS_IF``'s (then True: they
    are guesses, whose findings the walker keeps only where the arguments alone say the danger)."""
    last = cmd.argv[0].parts[-1]
    if last.kind in ("lit", "glob") and "/" in last.text:  # `$(npm bin)/eslint`, `$HOME/bin/rm`: it is known
        return [Cmd(last.text.rsplit("/", 1)[-1], cmd.argv, cmd.redirects, cmd.words, cmd.wrappers)], False
    found = names(cmd.argv[0], values)
    guessed = found is None
    heads = [[name] for name in AS_IF] if found is None else found
    out: list[Cmd] = []
    for head in heads:
        argv, wrappers = unwrap_all([*(Word((Part("lit", t),)) for t in head), *cmd.args])
        out.append(
            Cmd(program(argv[0]) if argv else "", argv, cmd.redirects, cmd.words, cmd.wrappers + wrappers)
        )
    return out, guessed
