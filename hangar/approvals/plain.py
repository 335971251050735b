"""The common shell script read without the lexer: plain words, blanks and operators.

A script with no quote, escape, expansion, here-document, process substitution, comment or ``~`` at a
word's start (``make test && pytest -q >> log.txt; git status``, a long generated chain of them) is
read here by two C scans (``re.split`` on the operator runs, ``str.split`` on each run of words) into
pipelines of :data:`PlainCommand` — strings, not the ``Word``/``Part``/``Command`` objects of
``shell.parse`` — so that the rules can look at a command's words without building anything
(``commands.ShellAnalysis.unclear``). :func:`read` returns None for anything else, and for anything
``shell.parse`` would refuse (a redirection without a target); the caller parses as before.
:func:`stages` writes a parsed pipeline the same way when all its words are plain text once quotes are
removed, for the same check.

What :func:`read` returns is exactly ``shell.parse(src)`` written in strings: :func:`pipeline` makes the
parser's objects again, and ``tests/unit/test_shell_plain.py`` holds the two equal on generated scripts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, NoReturn, overload

from .paths import Where, render
from .shell import (
    _ASSIGN,
    _HEADS,
    _LOOPS,
    _OP,
    _SKIP,
    _SKIP_CLAUSE,
    REDIRECT_OPS,
    Command,
    Part,
    Pipeline,
    Word,
    _redirect,
)

# A simple command of plain words, ``shell.Command`` with strings for words: (assignments, words,
# redirections as (operator, IO number, target)). A tuple: a long script makes one per command. Its lists
# are read, never changed: an empty one is NOTHING.
PlainCommand = tuple[list[str], list[str], list[tuple[str, str | None, str]]]


class _Nothing(list[Any]):
    """The empty list every PlainCommand without assignments (or redirections, or words) shares, so that a
    long script does not make two lists per command for nothing (the garbage collector's work grows with
    them); changing it raises."""

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a PlainCommand's lists are read-only")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]


NOTHING: list[Any] = _Nothing()


# Any of these sends a script to the lexer. Each is one C scan of the text (``in``), cheaper than one
# regex search that tries several alternatives at every character.
_NOT_PLAIN = ("\\", "'", '"', "`", "$", "<(", ">(")
# A comment or a tilde expansion starts only at a word's start: looked for only when "#" or "~" is there.
_WORD_START_MARK = re.compile(r"(?:^|[ \t\n;&|()<>])[#~]")
# What str.split() splits on besides the blanks the shell splits on (space, tab; a newline is an operator).
_ODD_SPACE = re.compile(r"[\x0b\x0c\r\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_ODD_ASCII_SPACE = "\x0b\x0c\r\x1c\x1d\x1e\x1f"  # those of them an ASCII text may hold: each one C scan
_RUNS = re.compile(r"([;&|()<>\n]+)")  # a run of operator characters
_HEREDOC = frozenset({"<<", "<<-"})
_PIPE = frozenset({"|", "|&"})
_CLAUSES = _SKIP | _SKIP_CLAUSE  # the reserved words shell.parse skips at a command's start
_CUR, _CLAUSE, _NOWHERE = range(3)  # where a redirection's target goes (read())

# A run of operator characters: its operators (longest first at each step, as the lexer takes them), and
# what the run is when it is one operator, the usual case: a redirection, a pipe or a separator.
_OTHER, _REDIRECTION, _PIPED, _SEPARATOR = range(4)
_RUN_OPS: dict[str, tuple[tuple[str, ...], int]] = {}


def _ops(run: str) -> tuple[tuple[str, ...], int]:
    out: list[str] = []
    i = 0
    while i < len(run):
        if run[i] == "\n":
            out.append("\n")
            i += 1
            continue
        m = _OP.match(run, i)
        assert m is not None  # every character of a run starts an operator
        out.append(m.group())
        i = m.end()
    ops = tuple(out)
    kind = _OTHER
    if len(ops) == 1:
        op = ops[0]
        if op in REDIRECT_OPS:
            kind = _OTHER if op in _HEREDOC else _REDIRECTION
        else:
            kind = _PIPED if op in _PIPE else _SEPARATOR
    if len(_RUN_OPS) < 512:  # runs are few (" && ", ">>", ";"): a script of odd ones cannot grow it
        _RUN_OPS[run] = (ops, kind)
    return ops, kind


class Quoted(NamedTuple):
    """A pipeline in which ``quick.read`` put a mark word (``MARK`` in it) for a word with quotes or
    expansions: the marks are written here as they stand (``quick.read``'s map gives the words)."""

    stages: list[PlainCommand]


# A pipe into a group or a loop or out of one (`| (`, `| {`, `| while`, `) |`, `} |`, `done |`; `||` too, and a
# `done` that is an argument, which cost only a decline): read() leaves such a script to the parser, which
# makes the group's commands stages of the pipeline. Each kind is looked for apart, by a pattern that starts
# with one literal ("|", ")", "}", "done"), the others only when the script holds their literal: the regex
# engine skips to a literal in a tight loop, where a class of characters ("[|)}d]", one pattern for all) is
# tested at each position (3-5x slower on a long script, which each step of its quick check pays).
_PIPE_INTO = re.compile(r"\|&?\s*(?:[({]|(?:while|until|for|select)\b)")
_PIPE_FROM = (
    (")", re.compile(r"\)\s*\|")),
    ("}", re.compile(r"\}\s*\|")),
    ("done", re.compile(r"done(?<!\wdone)\s*\|")),
)


def group_pipe(src: str) -> bool:
    """Whether ``src`` pipes into a group or a loop or out of one (above); ``src`` holds a "|"."""
    if _PIPE_INTO.search(src) is not None:
        return True
    return any(end in src and after.search(src) is not None for end, after in _PIPE_FROM)


MARK = "\x02"  # in a word quick.read put for a word with quotes or expansions


def plain_text(src: str) -> bool:
    """Whether ``src`` has none of what sends a script to the lexer: quotes, escapes, expansions, process
    substitutions, a comment or a ``~`` at a word's start, a blank ``str.split`` splits on and the shell does
    not (:func:`read` may still decline it: a here-document, a redirection without a target)."""
    for mark in _NOT_PLAIN:
        if mark in src:
            return False
    if ("#" in src or "~" in src) and _WORD_START_MARK.search(src) is not None:
        return False
    if src.isascii():  # known without a scan (CPython keeps it with the string)
        return not any(space in src for space in _ODD_ASCII_SPACE)
    return _ODD_SPACE.search(src) is None


@overload
def read(src: str, marked: Literal[False] = False) -> list[list[PlainCommand]] | None: ...
@overload
def read(src: str, marked: bool) -> list[list[PlainCommand] | Quoted] | None: ...
def read(
    src: str, marked: bool = False
) -> list[list[PlainCommand]] | list[list[PlainCommand] | Quoted] | None:
    """The pipelines of a plain script (see the module's docstring), or None when it needs the parser.
    ``marked``: ``src`` is ``quick.mask``'s, and a pipeline with a mark word in it is :class:`Quoted`."""
    if not plain_text(src):
        return None
    pieces = _RUNS.split(src)  # words, operators, words, …: runs of words at the even places
    pieces.append("\n")  # so that every run of words has operators after it; a newline at the end is none
    pipelines: list[list[PlainCommand] | Quoted] = []
    stages: list[PlainCommand] = []
    quoted = False  # a mark word is in the pipeline (marked)
    assigns: list[str] = NOTHING
    words: list[str] = NOTHING
    redirects: list[tuple[str, str | None, str]] = NOTHING
    skipping = False  # as shell.parse: after "function", whose name is dropped
    # As shell.parse: the clause read apart (a loop head, a case subject, a test), a stage of its own.
    clause_words: list[str] | None = None
    clause_redirects: list[tuple[str, str | None, str]] = NOTHING
    test = False  # the clause is a test: it ends at its "]]", and operators in it are its own
    # A redirection whose target is the next word: operator, IO number, and where the target goes (_CUR,
    # _CLAUSE, or nowhere: a function's name is being dropped).
    pending: tuple[str, str | None, int] | None = None
    run_ops = _RUN_OPS
    # A group next to a pipe (`… | (sh)`, `… | { sh; }`, `(a; b) | sh`) is the parser's: it makes the group's
    # commands stages of the pipeline. The last token was a pipe; a group's end (")" or a last word "}").
    piped = closed = False
    it = iter(pieces)
    for text, run in zip(it, it, strict=True):
        ws = text.split()
        if ws:
            if piped and (ws[0] == "{" or ws[0] in _LOOPS):
                return None
            piped = False
            closed = ws[-1] == "}" or ws[-1] == "done"
        if marked and MARK in text:
            quoted = True
        ops, kind = run_ops.get(run) or _ops(run)
        fd: str | None = None
        if ws and run[0] in "<>" and text[-1] not in " \t" and ws[-1].isdigit():
            fd = ws.pop()  # an IO number (2>/dev/null): the lexer's word ran into the redirection
        if pending is not None:
            if not ws:
                return None  # a redirection without a target: the parser refuses it
            where = pending[2]
            if where == _CUR:
                if redirects:
                    redirects.append((pending[0], pending[1], ws[0]))
                else:
                    redirects = [(pending[0], pending[1], ws[0])]
                del ws[0]
            elif where == _CLAUSE and not test:
                if clause_redirects:
                    clause_redirects.append((pending[0], pending[1], ws[0]))
                else:
                    clause_redirects = [(pending[0], pending[1], ws[0])]
                del ws[0]
            elif where != _CLAUSE:
                del ws[0]
            # (In a test the "target" is an operand, `[[ a < b ]]`: it stays, one of the test's words.)
            pending = None
        if ws:
            if (
                clause_words is None
                and not skipping
                and (words or ("=" not in ws[0] and (assigns or ws[0] not in _CLAUSES)))
            ):
                # The usual case: a command's name and arguments, or more arguments of one that has begun.
                if words:
                    words += ws
                else:
                    words = ws
            else:
                for w in ws:
                    if clause_words is not None:
                        clause_words.append(w)
                        if test and w == "]]":
                            stages.append((NOTHING, clause_words, clause_redirects))
                            clause_words, clause_redirects, test = None, NOTHING, False
                        continue
                    if skipping:
                        skipping = False
                        continue
                    if not words:
                        if _ASSIGN.match(w):
                            if assigns:
                                assigns.append(w)
                            else:
                                assigns = [w]
                            continue
                        if not assigns and w in _SKIP:
                            continue
                        if not assigns and w in _SKIP_CLAUSE:
                            if w in _HEADS:
                                clause_words = [w]
                                test = w == "[["
                            else:
                                skipping = True
                            continue
                    if words:
                        words.append(w)
                    else:
                        words = [w]
        target = _CLAUSE if clause_words is not None else _NOWHERE if skipping else _CUR
        if kind == _REDIRECTION:
            pending = (ops[0], fd, target)
            piped = closed = False
            continue
        if kind == _SEPARATOR:
            if piped and ops[0] == "(":
                return None
            if piped and ops[0] == "\n":
                continue  # `curl … |` at a line's end: the pipeline goes on on the next line
            piped = False
            closed = ops[0] == ")"
            if not test:
                if clause_words is not None:
                    stages.append((NOTHING, clause_words, clause_redirects))
                    clause_words, clause_redirects = None, NOTHING
                skipping = False
                if assigns or words or redirects:
                    stages.append((assigns, words, redirects))
                    assigns = words = redirects = NOTHING
                if stages:
                    pipelines.append(Quoted(stages) if quoted else stages)
                    stages = []
                quoted = False
            continue
        for j, op in enumerate(ops):
            if op in _PIPE:
                if closed:
                    return None
                piped = True
            elif piped and op == "(":
                return None
            elif piped and op == "\n":
                continue  # as above: a newline after a pipe
            else:
                piped = False
            closed = op == ")"
            if op in REDIRECT_OPS:
                if op in _HEREDOC or j != len(ops) - 1:
                    return None  # a here-document, or a redirection whose next token is an operator
                pending = (op, fd, target)  # an IO number is before a run's first operator
                continue
            if test:
                continue
            if clause_words is not None:
                stages.append((NOTHING, clause_words, clause_redirects))
                clause_words, clause_redirects = None, NOTHING
            skipping = False
            target = _CUR
            if assigns or words or redirects:
                stages.append((assigns, words, redirects))
                assigns = words = redirects = NOTHING
            if op not in _PIPE:
                if stages:
                    pipelines.append(Quoted(stages) if quoted else stages)
                    stages = []
                quoted = False
    if pending is not None:
        return None
    if clause_words is not None:
        stages.append((NOTHING, clause_words, clause_redirects))
    if assigns or words or redirects:
        stages.append((assigns, words, redirects))
    if stages:
        pipelines.append(Quoted(stages) if quoted else stages)
    return pipelines


def word(text: str) -> Word:
    """The parser's ``Word`` of a plain word."""
    return Word((Part("glob", text),))


def command(cmd: PlainCommand, make: Callable[[str], Word] = word) -> Command:
    """The parser's ``Command`` for a plain command (``make``: the ``Word`` of each word as written here,
    when some are ``quick.read``'s marks)."""
    assigns, words, redirects = cmd
    return Command(
        [make(w) for w in assigns],
        [make(w) for w in words],
        [_redirect(op, fd, make(t), None) for op, fd, t in redirects],
    )


def pipeline(stages: list[PlainCommand], make: Callable[[str], Word] = word) -> Pipeline:
    """The parser's ``Pipeline`` for a plain pipeline, or a ``Quoted`` one's (see :func:`command`)."""
    return Pipeline([command(c, make) for c in stages])


def text(word: Word) -> str | None:
    """The word's value when it is plain text (quoted or not), else None."""
    parts = word.parts
    if len(parts) == 1:
        part = parts[0]
        return part.text if part.kind == "glob" or part.kind == "lit" else None
    return word.literal


def stages(pipe: Pipeline, where: Where) -> tuple[list[PlainCommand], bool] | None:
    """A parsed pipeline in strings, when every command's name, assignment and redirection target in it is
    plain text (quotes removed) and it has no here-document; else None. An argument with an expansion is
    written as the rules' ``files()`` reads it (``render``: known variables filled in, the rest unknown), and
    the flag says some word has one: what it runs (``$(…)``) is still to be walked."""
    out: list[PlainCommand] = []
    expanded = False
    for cmd in pipe.commands:
        assigns = [text(w) for w in cmd.assigns]
        words: list[str | None] = []
        for w in cmd.words:
            value = text(w)
            if value is None and words:  # an argument (never the name) with an expansion
                value = render(w, where)
                expanded = True
            words.append(value)
        redirects: list[tuple[str, str | None, str]] = []
        for r in cmd.redirects:
            target = None if r.heredoc is not None or r.target is None else text(r.target)
            if target is None:
                return None
            redirects.append((r.op, r.fd, target))
        if None in assigns or None in words:
            return None
        out.append((assigns, words, redirects))  # type: ignore[arg-type]  # no None in them: checked
    return out, expanded
