"""The text of another language's inline code, and the values read from it as shell text.

Where each bracket of the code closes (string literals skipped), a string literal's text, and a value (a list
of pieces: ``("text", t)`` literal text, ``("var", NAME)`` a shell variable, ``("home", "~")``) written as one
shell word (:func:`as_word`) or as a command line (:func:`as_command`). ``code_values.py`` reads the values.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
from typing import Literal

Piece = tuple[Literal["text", "var", "home"], str]
Value = list[Piece]

MAX_ALTERNATIVES = 8
MAX_SPAN = 4000  # how far the end of a Ruby string is looked for
KNOWN = {"HOME", "PWD", "HANGAR_IO"}  # names the rules resolve: a code's own variable is not one of them

_ESC = re.compile(r"\\(.)", re.S)
_SQ = r"'((?:[^'\\\n]|\\.)*)'"
_DQ = r'"((?:[^"\\\n]|\\.)*)"'
_BQ = r"`((?:[^`\\]|\\.)*)`"
LITERAL = re.compile(r"([rRbBuUfF]{0,2})(?:" + _SQ + "|" + _DQ + "|" + _BQ + ")")


def unknown(name: str = "") -> list[Value]:
    """A value hangar cannot know, named for the code that computes it (``tempfile.mkdtemp()``: ``$mkdtemp``;
    a code's own ``HOME`` is ``$code_HOME``, not the shell's)."""
    last = re.sub(r"\W", "", re.split(r"\.|::|->", name)[-1]) if name else ""
    if not last or last[0].isdigit():
        return [[("var", "code_value")]]
    return [[("var", "code_" + last if last in KNOWN else last)]]


def unescape(s: str, raw: bool = False) -> str:
    if raw or "\\" not in s:
        return s
    return _ESC.sub(lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), s)


_BRACKET_OR_QUOTE = re.compile(r"[()\[\]{}'\"`]")
_PAIRS = {"(": ")", "[": "]", "{": "}"}


@functools.lru_cache(maxsize=64)
def _brackets(code: str) -> dict[int, int]:
    """Each bracket of ``code`` that is closed, by its index: the index after its closing bracket. String
    literals are skipped; a closing bracket that matches no open one leaves the open ones unclosed. One pass,
    so that every reading of a call's arguments finds their end at once."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while (m := _BRACKET_OR_QUOTE.search(code, i)) is not None:
        i, c = m.start(), m.group(0)
        if c in "'\"`":
            lit = LITERAL.match(code, i)
            i = lit.end() if lit else i + 1
            continue
        if c in _PAIRS:
            stack.append(i)
        elif stack and _PAIRS[code[stack[-1]]] == c:
            pairs[stack.pop()] = i + 1
        else:
            stack.clear()
        i += 1
    return pairs


def closing(code: str, at: int) -> int | None:
    """The index after the bracket that closes the one at ``at``; None if it is not closed."""
    return _brackets(code).get(at)


_RUBY_STRING_STOP = re.compile(r'[\\"#]')
_BRACE = re.compile(r"[{}]")


def ruby_string_end(code: str, at: int) -> int | None:
    """The index after Ruby's double-quoted string that begins at ``at``: its ``#{…}`` may hold quotes."""
    i = at + 1
    while (m := _RUBY_STRING_STOP.search(code, i, min(len(code), at + MAX_SPAN))) is not None:
        i = m.start()
        if m.group(0) == '"':
            return i + 1
        if m.group(0) == "\\":
            i += 2
        elif code.startswith("{", i + 1):
            # Its braces counted alone: the quotes inside (`#{ENV["HOME"]}`) are not the string's end.
            depth, j = 0, i + 1
            while (b := _BRACE.search(code, j, min(len(code), at + MAX_SPAN))) is not None:
                depth += 1 if b.group(0) == "{" else -1
                j = b.end()
                if depth == 0:
                    break
            if depth:
                return None
            i = j
        else:
            i += 1
    return None


def product(parts: list[list[Value]]) -> list[Value]:
    """Each way of taking one value of each part, joined (the first ``MAX_ALTERNATIVES``)."""
    combos = itertools.islice(itertools.product(*parts), MAX_ALTERNATIVES)
    return [list(itertools.chain.from_iterable(c)) for c in combos]


def home_first(value: Value) -> Value:
    """``expanduser``: a leading ``~`` of the value's literal text is the home directory."""
    if value and value[0][0] == "text" and value[0][1].startswith("~"):
        head, sep, rest = value[0][1].partition("/")
        if head == "~":
            return [("home", "~"), ("text", sep + rest), *value[1:]]
    return value


def joined(args: list[list[Value]]) -> list[Value]:
    """os.path.join's value: each argument after a slash; an absolute one starts the path afresh."""
    out: list[Value] = []
    for combo in itertools.islice(itertools.product(*args), MAX_ALTERNATIVES):
        last = max(
            (
                i
                for i, b in enumerate(combo)
                if b and (b[0][0] == "home" or (b[0][0] == "text" and b[0][1].startswith("/")))
            ),
            default=0,
        )
        joined: Value = []
        for b in combo[last:]:
            joined += [("text", "/"), *b] if joined else b
        out.append(joined)
    return out


def as_word(value: Value) -> str:
    """The value as one shell word: literal text quoted, a variable as ``"$NAME"``, a leading ``~`` bare."""
    out = []
    for i, (kind, text) in enumerate(value):
        if kind == "text":
            out.append(shlex.quote(text) if text else "")
        elif kind == "home":
            out.append("~" if i == 0 else '"$HOME"')
        else:
            out.append(f'"${text}"')
    return "".join(out) or "''"


def as_command(value: Value) -> str:
    """The value as a shell command line: its literal text as it is, a variable spliced in where the text's
    quoting leaves it (inside single quotes it closes them: ``'…'"$d"'…'``)."""
    out: list[str] = []
    quote = ""  # the quote the text so far leaves open
    for i, (kind, text) in enumerate(value):
        if kind == "text":
            escaped = False
            for c in text:
                if escaped:
                    escaped = False
                elif c == "\\" and quote != "'":
                    escaped = True
                elif c in "'\"" and quote in ("", c):
                    quote = "" if quote else c
            out.append(text)
            continue
        name = "HOME" if kind == "home" else text
        after = value[i + 1][1][:1] if i + 1 < len(value) else ""
        ref = f"${{{name}}}" if re.match(r"\w", after) else f"${name}"  # braces only where a name would go on
        if kind == "home" and not quote and (i == 0 or out[-1][-1:] in (" ", "\t", "")):
            out.append("~")
        elif quote == "'":
            out.append(f"'\"{ref}\"'")
        else:
            out.append(ref)
    return "".join(out)
