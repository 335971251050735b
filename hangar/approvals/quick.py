"""The tokens of a line with simple quotes and expansions, by one regex scan instead of the lexer's steps.

What an agent writes on most lines (``echo "step $i: $(date +%s)" >> log.txt && grep -n 'retry' x``)
holds quotes and expansions, which ``plain.py`` leaves to the lexer (``shell._Lexer``), a Python step per
piece. Here one ``findall`` cuts the text into words and operators, and a word with quotes or expansions
is cut into its parts by one more: single-quoted text, double-quoted text holding only plain text and
simple expansions, ``$NAME``, ``$1``-style parameters, and ``$(…)`` / ``${…}`` with no quote, backslash,
``$`` or bracket of their kind inside. Anything else — a backslash, a backquote, ``$'…'``, ``$((…))``,
a nested or quoted substitution, a process substitution, a here-document, a comment, a ``~`` at a word's
start, an unterminated quote — makes :func:`tokens` give up (None) and the caller use the lexer.

The tokens are exactly the lexer's (``tests/unit/test_shell_quick.py`` holds them equal on generated
lines), so the parser and the rules see the same thing either way.
"""

from __future__ import annotations

import re

from .shell import _PLAIN_OPS, Op, Part, Token, Word

_P = r"[^ \t\n;&|()<>\\'\"`$]"  # plain text in a word (the lexer's _PLAIN)
# An expansion the lexer reads the same way whatever follows: a name, a special parameter, or a
# substitution / braced parameter with nothing inside that the lexer's scanners would step over.
_EXP = r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]|\([^()'\"`\\$]*\)|\{[^}'\"`\\$]*\})"
_DQ = rf"\"(?:[^\"\\$`]|{_EXP})*\""
_NP = rf"(?:'[^']*'|{_DQ}|{_EXP}){_P}*"  # a piece that is not plain text, and the plain text after it
# Each alternative starts with a character no other may start with, so the scan never backtracks.
_WORD = rf"{_P}+(?:{_NP})*|(?:{_NP})+"
_OPS = r";;&|&>>|;;|;&|&&|\|\||\|&|&>|>>|>\||>&|<>|<&|;|&|\||\(|\)|<(?!\()|>(?!\()|\n"
_END = r"(?=[ \t\n;&|()<>]|\Z)"  # what may follow a word
# Blanks, then a word of plain text (the usual one), another word, an operator, the end, or anything else
# (the lexer's). A word starting with "#" or "~" (a comment, a tilde expansion) is the lexer's too.
_TOKEN = re.compile(rf"([ \t]*)(?:(?![#~])(?:({_P}+){_END}|({_WORD}){_END})|({_OPS})|\Z|([\s\S]))")
_PIECE = re.compile(rf"({_P}+)|'([^']*)'|\"((?:[^\"\\$`]|{_EXP})*)\"|({_EXP})")
_DQ_PIECE = re.compile(rf"([^\"\\$`]+)|({_EXP})")


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


def tokens(src: str) -> list[Token] | None:
    """The lexer's tokens of ``src``, or None when it holds something only the lexer reads (see above)."""
    if "<<" in src:
        return None
    out: list[Token] = []
    new = tuple.__new__  # the named tuples made without their Python-level __new__, as shell._fast_tokens
    last_word: str | None = None  # the previous match's word, when nothing came between it and this one
    for blanks, glob, word, op, other in _TOKEN.findall(src):
        if glob:
            out.append(new(Word, ((new(Part, ("glob", glob, "")),),)))
            last_word = glob
        elif word:
            out.append(Word(_parts(word)))
            last_word = None
        elif op:
            if last_word is not None and not blanks and op[0] in "<>" and last_word.isdigit():
                out[-1] = Op(op, last_word)  # an IO number: 2>&1
            else:
                out.append(_PLAIN_OPS[op])
            last_word = None
        elif other:
            return None
    return out
