"""A script read a group of lines at a time: the plain lines by ``plain.py``, the others by ``quick.py`` or
the parser.

A script that neither ``plain.read`` nor ``quick.read`` takes whole (one backslash, backquote or nested
substitution anywhere) would go to the lexer, which is several times slower a character. Here it is cut at
the newlines where the lexer and the parser are sure to be at the top level — nothing quoted, substituted or
escaped open, no here-document body to come, no ``[[ … ]]`` the parser is reading apart — into runs of plain
lines and runs of the others; each run is read on its own, in order. The pipelines of the runs, one after another, are those of ``shell.parse(src)``: the
parser ends every pipeline at a top-level newline and carries nothing past it.

Where a cut is not sure to be at the top level the lines stay together: a line ending in a backslash
takes the next one with it, and a run the lexer cannot close on its own (a quote that goes on to a later
line) makes :func:`read` give up (None), so that the caller reads the whole script as before. A script
with a here-document (``<<``) or a ``[[`` is left to the caller whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TypeVar

from . import plain, quick
from .plain import PlainCommand, Quoted
from .shell import Pipeline, ShellSyntaxError, parse

# What may leave the lexer inside something at a line's end, or make a line's words other than plain
# text: a line with none of these is read by plain.read (or by quick.read when that declines).
_MARKS = ("\\", "'", '"', "`", "$", "<(", ">(")

# A pipeline as the rules' walk takes it: in strings (plain.read's, or quick.read's of a line with quotes
# and expansions), or as the parser's objects (a line only the lexer reads).
Item = list[PlainCommand] | Quoted | Pipeline
_T = TypeVar("_T")


def _lined(line: str) -> bool:
    """Whether the lexer is at the top level after this line whatever it holds (none of ``_MARKS``)."""
    for mark in _MARKS:
        if mark in line:
            return False
    return True


# A pipe into a group or out of one, or a pipe at a line's end: the parser makes one pipeline across them.
_PIPE_AT_END = re.compile(r"\|&?[ \t]*(?:#[^\n]*)?\n")

_BREAK = "\x01"  # a word a script holding no \x01 cannot have: the line between the runs read at once
_BREAK_PIPELINE: list[PlainCommand] = [([], [_BREAK], [])]  # as either reader reads that line


def _at_once(
    texts: list[str], src: str, reader: Callable[[str], list[_T] | None]
) -> Iterator[list[_T]] | None:
    """The pipelines of each run, from one ``reader`` call on them all with a line of ``_BREAK`` between (a
    call per run costs more than the run when plain and other lines alternate); None when it declines (some
    run has what it does not read, or a run's quote takes the break in) or ``src`` holds the break's
    character."""
    if len(texts) < 2 or _BREAK in src:
        return None
    pipelines = reader(("\n" + _BREAK + "\n").join(texts))
    if pipelines is None:
        return None
    # Every run ends at a newline, where the parser ends every pipeline: the break is one of its own (a plain
    # word, so a plain pipeline to either reader), unless a run's quote or substitution took it in.
    groups: list[list[_T]] = []
    start = 0
    for _ in range(len(texts) - 1):
        try:
            k = pipelines.index(_BREAK_PIPELINE, start)  # type: ignore[arg-type]  # compared, never kept
        except ValueError:
            return None  # a quote or a substitution went on past a break: the runs are read one by one
        groups.append(pipelines[start:k])
        start = k + 1
    groups.append(pipelines[start:])
    return iter(groups)


def read(src: str, marks: dict[str, str], quoted: dict[str, str]) -> list[Item] | None:
    """The script's pipelines, in order; None when it is to be read whole (see above). ``marks`` and
    ``quoted`` are ``quick.read``'s."""
    if "<<" in src or "[[" in src:
        return None  # a here-document's body, or a test the parser reads apart, may go on past a newline
    if "|" in src and (plain.group_pipe(src) or _PIPE_AT_END.search(src) is not None):
        # A group a pipe feeds, or whose output is piped on, and a pipe at a line's end: one pipeline across
        # lines.
        return None
    runs: list[tuple[bool, list[str]]] = []
    joined = False  # the last line ended in a backslash: the next one belongs to its run
    for line in src.split("\n"):
        ok = not joined and _lined(line)
        if runs and runs[-1][0] == ok:
            runs[-1][1].append(line)
        else:
            runs.append((ok, [line]))
        joined = line.endswith("\\")
    texts = ["\n".join(lines) for _, lines in runs]
    # A script of one plain run: the caller's plain.read has declined it already.
    plain_texts = [t for (ok, _), t in zip(runs, texts, strict=True) if ok] if len(runs) > 1 else []
    plain_runs = _at_once(plain_texts, src, plain.read)
    others = [t for (ok, _), t in zip(runs, texts, strict=True) if not ok]

    def quick_read(text: str) -> list[list[PlainCommand] | Quoted] | None:
        read = quick.read(text, marks, quoted)
        return None if read is None else read[0]

    quick_runs = _at_once(others, src, quick_read)
    out: list[Item] = []
    for (ok, _), text in zip(runs, texts, strict=True):
        if ok and len(runs) > 1:
            plain_pipelines = next(plain_runs) if plain_runs is not None else plain.read(text)
            if plain_pipelines is not None:
                out += plain_pipelines
                continue
        elif not ok and quick_runs is not None:
            out += next(quick_runs)
            continue
        read = quick_read(text)
        if read is not None:
            out += read
        elif len(runs) == 1:
            return None  # the lexer's all through: the caller's own reading is this one
        else:
            try:
                out += parse(text).pipelines
            except ShellSyntaxError:
                return None  # an open quote goes on past this run, or the script would not run: read whole
    return out
