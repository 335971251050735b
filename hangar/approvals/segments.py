"""A script read a group of lines at a time: the plain lines by ``plain.py``, only the others by the parser.

One quote or ``$`` anywhere sends a whole script past ``plain.read`` to the lexer, which is several times
slower a character. Here the script is cut at the newlines where the lexer and the parser are sure to be
at the top level — nothing quoted, substituted or escaped open, no here-document body to come, no
``[[ … ]]`` the parser is skipping — into runs of plain lines and runs of the others; each run is read on
its own, in order. The pipelines of the runs, one after another, are those of ``shell.parse(src)``: the
parser ends every pipeline at a top-level newline and carries nothing past it.

Where a cut is not sure to be at the top level the lines stay together: a line ending in a backslash
takes the next one with it, and a run the lexer cannot close on its own (a quote that goes on to a later
line) makes :func:`read` give up (None), so that the caller reads the whole script as before. A script
with a here-document (``<<``) or a ``[[`` is left to the caller whole.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import plain, quick
from .plain import PlainCommand
from .shell import Pipeline, ShellSyntaxError, parse, parse_tokens

# What may leave the lexer inside something at a line's end, or make a line's words other than plain
# text: a line with none of these is read by plain.read (or parsed on its own when that declines).
_MARKS = ("\\", "'", '"', "`", "$", "<(", ">(")

# A run of lines read one way: (plain pipelines, []) or (None, parsed pipelines).
Piece = tuple[list[list[PlainCommand]] | None, list[Pipeline]]


def _lined(line: str) -> bool:
    """Whether the lexer is at the top level after this line whatever it holds (none of ``_MARKS``)."""
    for mark in _MARKS:
        if mark in line:
            return False
    return True


_BREAK = "\x01"  # a word a script holding no \x01 cannot have: the line between the plain runs read at once


def _plain_runs(texts: list[str], src: str) -> Iterator[list[list[PlainCommand]]] | None:
    """The pipelines of each plain run, from one ``plain.read`` of them all with a line of ``_BREAK`` between
    (a call per run costs more than the run when plain and other lines alternate); None when it declines
    (some run has what only the parser reads) or ``src`` holds the break's character."""
    if len(texts) < 2 or _BREAK in src:
        return None
    pipelines = plain.read(("\n" + _BREAK + "\n").join(texts))
    if pipelines is None:
        return None
    groups: list[list[list[PlainCommand]]] = [[]]
    for pipeline in pipelines:
        # Every run ends at a newline, where the parser ends every pipeline: the break is one of its own.
        if len(pipeline) == 1 and pipeline[0][1] == [_BREAK]:
            groups.append([])
        else:
            groups[-1].append(pipeline)
    return iter(groups)


def read(src: str) -> list[Piece] | None:
    """The script's pipelines, run by run, in order; None when it is to be read whole (see above)."""
    if "<<" in src or "[[" in src:
        return None  # a here-document's body, or a test the parser skips, may go on past a newline
    runs: list[tuple[bool, list[str]]] = []
    joined = False  # the last line ended in a backslash: the next one belongs to its run
    for line in src.split("\n"):
        ok = not joined and _lined(line)
        if runs and runs[-1][0] == ok:
            runs[-1][1].append(line)
        else:
            runs.append((ok, [line]))
        joined = line.endswith("\\")
    if len(runs) == 1 and runs[0][0]:
        return None  # the caller's plain.read has declined it already
    texts = ["\n".join(lines) for _, lines in runs]
    plain_runs = _plain_runs([t for (ok, _), t in zip(runs, texts, strict=True) if ok], src)
    out: list[Piece] = []
    for (ok, _), text in zip(runs, texts, strict=True):
        if ok:
            plain_pipelines = next(plain_runs) if plain_runs is not None else plain.read(text)
            if plain_pipelines is not None:
                out.append((plain_pipelines, []))
                continue
        tokens = quick.tokens(text)
        try:
            if tokens is not None:
                out.append((None, parse_tokens(tokens, False).pipelines))
            elif len(runs) == 1:
                return None  # the lexer's all through: the caller's own reading is this one
            else:
                out.append((None, parse(text).pipelines))
        except ShellSyntaxError:
            return None  # an open quote goes on past this run, or the script would not run: read it whole
    return out
