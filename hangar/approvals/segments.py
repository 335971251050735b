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
    out: list[Piece] = []
    for ok, lines in runs:
        text = "\n".join(lines)
        if ok:
            if len(runs) == 1:
                return None  # the caller's plain.read has declined it already
            plain_pipelines = plain.read(text)
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
