"""A script with simple quotes and expansions read as a plain one: each such word stands in for by a mark.

What an agent writes on most lines (``echo "step $i: $(date +%s)" >> log.txt && grep -n 'retry' x``)
holds quotes and expansions, which ``plain.read`` leaves to the lexer (``shell._Lexer``), a Python step per
piece. Here one regex substitution (:func:`mask`) puts a plain word — a *mark*: the word's plain start and
``plain.MARK`` with a number — in the place of every word with single-quoted text, double-quoted text holding
only plain text and simple expansions, ``$NAME``, ``$1``-style parameters, and ``$(…)`` / ``${…}`` with no
quote, backslash, ``$`` or bracket of their kind inside; ``plain.read`` then reads the marked script by its
two C scans, and says which pipelines hold a mark (``plain.Quoted``). Anything else — a backslash, a
backquote, ``$'…'``, ``$((…))``, a nested or quoted substitution, a process substitution, a here-document,
a comment, a ``~`` at a word's start, an unterminated quote — is left in place, where ``plain.read`` declines
it (None), and the caller uses the lexer.

A mark reads as its word does: it ends where the word ends, starts with the word's plain text (so an
assignment, ``X='a b'``, is still one), is never a reserved word nor an IO number (neither is such a word,
except one whose quotes are all ``""``: ``if""``, or one starting with ``""`` that the lexer reads as an
assignment or an IO number, ``""X=1``, ``""2>x`` — then :func:`read` declines). The pipelines are exactly
``shell.parse``'s with each mark the word it stands for (``tests/unit/test_shell_quick.py`` holds them equal
on generated lines); :func:`word` gives a mark's ``Word``, made as the lexer makes it.
"""

from __future__ import annotations

import functools
import re

from .paths import _SIMPLE_PARAM, UNKNOWN, Where
from .plain import MARK, PlainCommand, Quoted
from .plain import read as plain_read
from .shell import _SKIP, _SKIP_CLAUSE, Part, Word

_P = r"[^ \t\n;&|()<>\\'\"`$]"  # plain text in a word (the lexer's _PLAIN)
# An expansion the lexer reads the same way whatever follows: a name, a special parameter, or a
# substitution / braced parameter with nothing inside that the lexer's scanners would step over.
_EXP = r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]|\([^()'\"`\\$]*\)|\{[^}'\"`\\$]*\})"
_DQ = rf"\"(?:[^\"\\$`]|{_EXP})*\""
_NP = rf"(?:'[^']*'|{_DQ}|{_EXP}){_P}*"  # a piece that is not plain text, and the plain text after it
_END = r"(?=[ \t\n;&|()<>]|\Z)"  # what may follow a word
# A word with quotes or expansions, and the blank or operator's character before it (group 1: the scan of a
# long script then stops only at those; mask() puts a blank before the script's first word): not starting
# with "#" or "~" (a comment, a tilde expansion), its plain start (group 2), then such pieces, up to the
# word's end. The plain start is taken whole (*+: never given back) and a quote or "$" must follow, so the
# scan leaves a plain word after one look at it.
_QUOTED = re.compile(rf"([ \t\n;&|()<>])(?![#~])({_P}*+)(?=['\"$])(?:{_NP})+{_END}")
_PIECE = re.compile(rf"({_P}+)|'([^']*)'|\"((?:[^\"\\$`]|{_EXP})*)\"|({_EXP})")
_DQ_PIECE = re.compile(rf"([^\"\\$`]+)|({_EXP})")
_RESERVED = _SKIP | _SKIP_CLAUSE
# A word starting with "" and then plain text that the lexer, which keeps no part for an empty "", reads as
# if the quotes were not there: an assignment (`""X=1`) or an IO number (`""2>x`), where a mark, which
# starts with the word's plain start (none), is a word. Bash takes neither (quoted text makes a word), but
# the parser's reading is the one that flags more (the next word is the program's name): mask() declines.
_MISREAD = re.compile(r'(?:"")+(?:[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=|[0-9]+$)')


def _expansion(text: str) -> Part:
    """The part the lexer makes of one of ``_EXP``'s expansions."""
    if text[1] == "(":
        return Part("cmd", text, text[2:-1])
    if text[1] == "{":
        return Part("param", text, text[2:-1])
    return Part("param", text, text[1:])


def _parts(word: str) -> tuple[Part, ...]:
    parts: list[Part] = []
    for m in _PIECE.finditer(word):
        k = m.lastindex or 0  # which kind of piece: plain, '…', "…" or an expansion (each may be empty but 1)
        text = m.group(k)
        if k == 1:
            parts.append(Part("glob", text))
        elif k == 2:
            parts.append(Part("lit", text))
        elif k == 3:
            for lit, inner in _DQ_PIECE.findall(text):  # "" adds no part, as in the lexer
                parts.append(Part("lit", lit) if lit else _expansion(inner))
        else:
            parts.append(_expansion(text))
    return tuple(parts)


_VALUE_PIECE = re.compile(rf"'([^']*)'|\"((?:[^\"\\$`]|{_EXP})*)\"|({_EXP})")
_EXPANSION = re.compile(_EXP)
_QUOTE = re.compile(r"'([^']*)'|\"([^\"]*)\"")  # in a word of mask()'s with no "$": quotes hold plain text


def value(raw: str, where: Where) -> tuple[str | None, str, tuple[str, ...]]:
    """A word :func:`mask` took (as written): its value when it is plain text once quotes are removed
    (else None), as ``paths.render`` writes it (known variables filled in, the rest ``UNKNOWN``), and the
    commands it runs (``Word.nested``) — what ``plain.text``, ``render`` and ``nested`` of :func:`word`
    give, without making its parts."""
    if "$" not in raw:
        if "'" not in raw or '"' not in raw:  # quotes of one kind: none is inside the other's
            text = raw.replace('"', "").replace("'", "")
        else:
            text = _QUOTE.sub(r"\1\2", raw)
        return text, text, ()
    if "'" not in raw:
        # No single quote: every '"' is a quote and every "$" starts one of _EXP's expansions (plain text and
        # double-quoted text hold no bare "$"), so one C split finds them, and no Python call per piece.
        pieces = _EXP_SPLIT.split(raw)
        if len(pieces) == 3:  # one expansion, the usual word ("$HOME/x", "step: $(date +%s)")
            known, run = _expanded(pieces[1], where)
            rendered = pieces[0].replace('"', "") + known + pieces[2].replace('"', "")
            return None, rendered, (() if run is None else (run,))
        runs: list[str] = []
        for i in range(1, len(pieces), 2):
            pieces[i], run = _expanded(pieces[i], where)
            if run is not None:
                runs.append(run)
        for i in range(0, len(pieces), 2):
            pieces[i] = pieces[i].replace('"', "")
        return None, "".join(pieces), tuple(runs)
    nested: list[str] = []
    expanded = False

    def expansion(e: str) -> str:
        nonlocal expanded
        expanded = True
        if e[1] == "(":
            nested.append(e[2:-1])
            return UNKNOWN
        inner = e[2:-1] if e[1] == "{" else e[1:]
        if "$" in inner:
            nested.append(inner)  # $$: Word.nested names it, as it would a ${…} with a $ inside
        m = _SIMPLE_PARAM.match(e)
        known = where.known(m.group(1)) if m else None
        return known if known is not None else UNKNOWN

    def piece(m: re.Match[str]) -> str:
        single, double, exp = m.groups()
        if single is not None:
            return single
        if exp is not None:
            return expansion(exp)
        return _EXPANSION.sub(lambda d: expansion(d.group()), double)

    rendered = _VALUE_PIECE.sub(piece, raw)
    return (None if expanded else rendered), rendered, tuple(nested)


_EXP_SPLIT = re.compile(f"({_EXP})")


@functools.lru_cache(maxsize=1024)
def _expanded(e: str, where: Where) -> tuple[str, str | None]:
    """One of ``_EXP``'s expansions as :func:`value` renders it, and the command it runs (``Word.nested``):
    the same few (``$(date +%s)``, ``$HOME``) recur in a long script's words."""
    if e[1] == "(":
        return UNKNOWN, e[2:-1]
    inner = e[2:-1] if e[1] == "{" else e[1:]
    m = _SIMPLE_PARAM.match(e)
    known = where.known(m.group(1)) if m else None
    return (known if known is not None else UNKNOWN), (inner if "$" in inner else None)


def word(raw: str) -> Word:
    """The lexer's ``Word`` of a word :func:`mask` took (as written)."""
    return Word(_parts(raw))


def mask(
    src: str, marks: dict[str, str], quoted: dict[str, str], order: list[str] | None = None
) -> str | None:
    """``src`` with a mark in the place of each word of simple quotes and expansions (see above), or None
    when ``src`` has ``plain.MARK`` in it or such a word is a reserved word once its ``""`` are removed. ``marks`` maps each
    word (as written) to its mark, ``quoted`` each mark to its word; a word met again gets its mark again.
    ``order``: each mark placed is appended to it, in the script's order."""
    if MARK in src:
        return None
    reserved = False  # a word the parser reads otherwise than its mark (see _MISREAD)

    def place(m: re.Match[str]) -> str:
        nonlocal reserved
        before, raw = m.group(1, 0)
        raw = raw[1:]
        mark = marks.get(raw)
        if mark is None:
            if raw.replace('""', "") in _RESERVED or _MISREAD.match(raw):
                reserved = True
                return before + raw  # never given a mark: it is looked at again wherever it is met
            mark = marks[raw] = m.group(2) + MARK + str(len(marks))
            quoted[mark] = raw
        if order is not None:
            order.append(mark)
        return before + mark

    out = _QUOTED.sub(place, " " + src)[1:]
    return None if reserved else out


def read(
    src: str, marks: dict[str, str], quoted: dict[str, str], marked: str | None = None
) -> tuple[list[list[PlainCommand] | Quoted], str] | None:
    """The pipelines ``shell.parse(src)`` makes, written in strings (``plain.read``'s): a pipeline with a word
    of quotes or expansions as ``plain.Quoted``, that word as its mark (``quoted`` gives the word, as
    written); and the marked script they were read from. None when :func:`mask` or ``plain.read`` declines,
    or the script has a here-document or a ``[[`` (the parser's test skips up to a ``]]`` that a quoted word
    may be). ``marked``: :func:`mask`'s of ``src`` with these maps, when made already."""
    if "<<" in src or "[[" in src:
        return None
    if marked is None:
        marked = mask(src, marks, quoted)
    pipelines = None if marked is None else plain_read(marked, True)
    return None if pipelines is None or marked is None else (pipelines, marked)
