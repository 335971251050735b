"""A small POSIX shell lexer and parser, enough for the approvals rules to see what a command runs.

It is not a shell. It splits a command line into pipelines and simple commands (on ``;``, ``&&``,
``||``, ``|``, ``|&``, ``&``, newlines and parentheses), removes quotes, keeps expansions apart from
literal text (``$NAME``, ``${…}``, ``~``, ``$(…)``, backquotes, ``<(…)``, ``$((…))``) so the rules can
look inside them, and records redirections and here-documents. It never expands anything.

``parse(src)`` raises :class:`ShellSyntaxError` on input bash would refuse to run (an unterminated
quote, substitution or backquote, a redirection without a target). ``parse(src, lenient=True)`` never
raises: it closes whatever is open at the end of the input, which is the best-effort token scan the
rules fall back to (see ``rules.py``).

Here is the lexer and ``parse``; the parser proper is ``parser.py`` (``parse_tokens``), the scanners that find
where a quote or substitution ends ``scan.py``, and what they make ``shell_types.py`` (re-exported here).
"""

from __future__ import annotations

import re
from collections import deque

from .parser import _HEADS, _LOOPS, _SKIP, _SKIP_CLAUSE, REDIRECT_OPS, parse_tokens
from .scan import _ansi_c, _skip_backquote, _skip_group, _skip_single
from .shell_types import (
    _ASSIGN,
    _PLAIN_OPS,
    Command,
    Heredoc,
    Op,
    Part,
    PartKind,
    Pipeline,
    Redirect,
    Script,
    ShellSyntaxError,
    Token,
    Word,
    _redirect,
)

# What callers import from here: the lexer's and parser's own names, and shell_types' (re-exported).
__all__ = [
    "REDIRECT_OPS", "WRITE_OPS", "_ASSIGN", "_HEADS", "_LOOPS", "_OP", "_PLAIN_OPS", "_SKIP", "_SKIP_CLAUSE", "Command", "Heredoc",
    "Op", "Part", "PartKind", "Pipeline", "Redirect", "Script", "ShellSyntaxError", "Token", "Word", "_Lexer",
    "_fast_tokens", "_redirect", "double_quoted", "parse", "parse_tokens", "simple_command", "split_words",
    "tokenize",
]  # fmt: skip

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (
    ";;&", "&>>", "<<<", "<<-",
    ";;", ";&", "&&", "||", "|&", "&>", ">>", ">|", ">&", "<<", "<>", "<&",
    ";", "&", "|", "(", ")", "<", ">",
)  # fmt: skip
WRITE_OPS = frozenset({">", ">>", ">|", "<>", "&>", "&>>", ">&"})
_WORD_END = set(" \t\n;&|()<>")
# What the lexer may take in one step: characters that mean nothing where they stand (in a word that has
# begun, so ``#`` and ``~`` are plain there); inside double quotes; in an unquoted here-document's body.
_PLAIN = re.compile(r"[^ \t\n;&|()<>\\'\"`$]*")
_DQ_PLAIN = re.compile(r"[^\\\"$`]*")
_HEREDOC_PLAIN = re.compile(r"[^\\$`]*")
_TILDE = re.compile(r"~([A-Za-z0-9._-]*)")
_BLANKS = re.compile(r"[ \t]+")
_SPECIAL = frozenset(" \t\\\n#'\"`$;&|()<>~")  # what the lexer looks at; all else is plain text
_PLAIN_WORD_END = " \t\n;&|()"  # what ends a plain word; "<" and ">" may not (2>file, a<(cmd))
_OP = re.compile("|".join(re.escape(o) for o in _OPS))  # tried in _OPS's order: the longest first


def _plain_end(s: str, i: int) -> int:
    m = _PLAIN.match(s, i)
    return i if m is None else m.end()


# The ``$`` groups a word may hold: how each opens, what part it makes, how it closes, how deep it opens.
_GROUPS: tuple[tuple[str, PartKind, str, int], ...] = (
    ("$((", "arith", "))", 2),
    ("$(", "cmd", ")", 1),
    ("${", "param", "}", 1),
)


# ---------------------------------------------------------------------------------------------------
# the lexer


class _Lexer:
    def __init__(self, src: str, lenient: bool, stop_at_op: bool = False) -> None:
        self.s = src
        self.n = len(src)
        self.i = 0
        self.lenient = lenient
        self.tokens: list[Token] = []
        self.parts: list[Part] = []
        self.buf: list[str] = []
        self.started = False
        self.awaiting: deque[Heredoc] = deque()  # here-documents whose delimiter word comes next
        self.pending: list[Heredoc] = []  # here-documents whose body starts after the next newline
        self.comment = False
        self.stop_at_op = stop_at_op  # raise _Chained at the first operator (simple_command)

    def fail(self, msg: str) -> None:
        if not self.lenient:
            raise ShellSyntaxError(msg)

    # word building

    def flush(self) -> None:
        if self.buf:
            self.parts.append(Part("glob", "".join(self.buf)))
            self.buf = []

    def add(self, part: Part) -> None:
        self.flush()
        self.parts.append(part)
        self.started = True

    def end_word(self) -> None:
        self.flush()
        if not self.started:
            return
        word = Word(tuple(self.parts))
        self.parts = []
        self.started = False
        self.push(word)

    def push(self, word: Word) -> None:
        if self.awaiting:
            hd = self.awaiting.popleft()
            hd.delimiter = "".join(p.text for p in word.parts)
            hd.quoted = any(p.kind == "lit" for p in word.parts)
            self.pending.append(hd)
        self.tokens.append(word)

    # pieces

    def single(self) -> None:
        j = _skip_single(self.s, self.i + 1)
        if j is None:
            self.fail("unterminated single quote")
            j = self.n + 1
        self.add(Part("lit", self.s[self.i + 1 : j - 1]))
        self.i = min(j, self.n)

    def double(self, stop: str | None = '"') -> list[Part]:
        """Read double-quoted text from self.i (just after the opening quote) up to ``stop``."""
        out: list[Part] = []
        text: list[str] = []

        def lit() -> None:
            if text:
                out.append(Part("lit", "".join(text)))
                text.clear()

        s, n = self.s, self.n
        plain = _DQ_PLAIN if stop is not None else _HEREDOC_PLAIN
        while self.i < n:
            m = plain.match(s, self.i)
            if m is not None and m.end() > self.i:
                text.append(m.group())
                self.i = m.end()
                continue
            c = s[self.i]
            if stop is not None and c == stop:
                self.i += 1
                lit()
                return out
            if c == "\\" and self.i + 1 < n:
                e = s[self.i + 1]
                if e == "\n":
                    pass
                elif e in '$`"\\':
                    text.append(e)
                else:
                    text.append("\\" + e)
                self.i += 2
                continue
            if c == "$" or c == "`":
                part = self.dollar() if c == "$" else self.backquote()
                if part is None:
                    text.append(c)
                    self.i += 1
                else:
                    lit()
                    out.append(part)
                continue
            text.append(c)
            self.i += 1
        if stop is not None:
            self.fail("unterminated double quote")
        lit()
        return out

    def backquote(self) -> Part:
        j = _skip_backquote(self.s, self.i + 1)
        if j is None:
            self.fail("unterminated backquote")
            j = self.n + 1
        raw = self.s[self.i + 1 : j - 1]
        self.i = min(j, self.n)
        inner = re.sub(r"\\([\\`$])", r"\1", raw)
        return Part("cmd", "$(" + inner + ")", inner)

    def dollar(self) -> Part | None:
        """An expansion starting at self.i (a ``$``), or None when the ``$`` is literal."""
        s, i = self.s, self.i
        for prefix, kind, close, depth in _GROUPS:
            if s.startswith(prefix, i):
                j = _skip_group(s, i + len(prefix), depth, close[0])
                if j is None:
                    self.fail(f"unterminated {prefix}")
                    j = self.n + len(close)
                self.i = min(j, self.n)
                inner = s[i + len(prefix) : j - len(close)]
                return Part(kind, prefix + inner + close, inner)
        m = _NAME.match(s, i + 1)
        if m:
            self.i = m.end()
            return Part("param", "$" + m.group(0), m.group(0))
        if i + 1 < self.n and s[i + 1] in "0123456789@*#?$!-":
            self.i = i + 2
            return Part("param", s[i : i + 2], s[i + 1])
        return None

    def heredocs(self) -> None:
        """Read the bodies of the here-documents opened on the line that just ended."""
        for hd in self.pending:
            body: list[str] = []
            while self.i < self.n:
                j = self.s.find("\n", self.i)
                end = self.n if j < 0 else j
                line = self.s[self.i : end]
                self.i = min(end + 1, self.n)
                if hd.strip_tabs:
                    line = line.lstrip("\t")
                if line == hd.delimiter:
                    break
                body.append(line + "\n")
            hd.body = "".join(body)
        self.pending = []

    def operator(self) -> None:
        s, i = self.s, self.i
        fd: str | None = None
        if s[i] in "<>" and self.started and not self.parts and self.buf and "".join(self.buf).isdigit():
            fd = "".join(self.buf)  # an IO number: 2>/dev/null
            self.buf = []
            self.started = False
        else:
            self.end_word()
        m = _OP.match(s, i)
        assert m is not None  # called on one of _WORD_END's operator characters
        op = m.group()
        self.i = i + len(op)
        if op in ("<<", "<<-"):
            hd = Heredoc(strip_tabs=op == "<<-")
            self.awaiting.append(hd)
            self.tokens.append(Op(op, fd, hd))
        elif fd is not None:
            self.tokens.append(Op(op, fd))
        else:
            self.tokens.append(_PLAIN_OPS[op])
        m = _BLANKS.match(s, self.i)
        if m is not None:
            self.i = m.end()  # no word is open: the blanks after an operator end nothing
        if self.stop_at_op:
            raise _Chained

    def run(self) -> list[Token]:
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c not in _SPECIAL:
                # An ordinary character, and those after it up to the next one that means something.
                end = _plain_end(s, self.i + 1)
                if not self.started and (end >= n or s[end] in _PLAIN_WORD_END):
                    # The whole word is plain text (the most common word by far): made at once, and the
                    # blanks after it skipped with it.
                    self.push(Word((Part("glob", s[self.i : end]),)))
                    m = _BLANKS.match(s, end)
                    if m is not None:
                        end = m.end()
                else:
                    self.buf.append(s[self.i : end])
                    self.started = True
                self.i = end
            elif c in " \t":
                self.end_word()
                m = _BLANKS.match(s, self.i)
                self.i = m.end() if m is not None else self.i + 1
            elif c == "\\":
                if self.i + 1 < n and s[self.i + 1] == "\n":
                    self.i += 2  # line continuation
                elif self.i + 1 < n:
                    self.add(Part("lit", s[self.i + 1]))
                    self.i += 2
                else:
                    self.buf.append("\\")
                    self.started = True
                    self.i += 1
            elif c == "\n":
                self.end_word()
                self.tokens.append(_PLAIN_OPS["\n"])
                if self.stop_at_op:
                    raise _Chained
                self.i += 1
                self.heredocs()
            elif c == "#" and not self.started:
                self.comment = True
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
            elif c == "'":
                self.single()
            elif c == '"':
                self.i += 1
                parts = self.double()
                self.flush()
                self.parts.extend(parts)
                self.started = True
            elif c == "`":
                self.add(self.backquote())
            elif c == "$":
                if s.startswith("$'", self.i):
                    j = self.i + 2
                    while j < n and s[j] != "'":
                        j += 2 if s[j] == "\\" else 1
                    if j >= n:
                        self.fail("unterminated $'")
                    self.add(Part("lit", _ansi_c(s[self.i + 2 : min(j, n)])))
                    self.i = min(j + 1, n)
                elif s.startswith('$"', self.i):
                    self.i += 2
                    parts = self.double()
                    self.flush()
                    self.parts.extend(parts)
                    self.started = True
                else:
                    part = self.dollar()
                    if part is None:
                        self.buf.append("$")
                        self.started = True
                        self.i += 1
                    else:
                        self.add(part)
            elif c in "<>" and self.i + 1 < n and s[self.i + 1] == "(":
                closed = _skip_group(s, self.i + 2, 1, ")")
                if closed is None:
                    self.fail(f"unterminated {c}(")
                    closed = n + 1
                inner = s[self.i + 2 : closed - 1]
                self.add(Part("proc", c + "(" + inner + ")", inner))
                self.i = min(closed, n)
            elif c in _WORD_END:
                self.operator()
            elif c == "~" and not self.started:
                m = _TILDE.match(s, self.i)
                assert m is not None
                end = m.end()
                if end >= n or s[end] == "/" or s[end] in _WORD_END:
                    self.add(Part("tilde", m.group(0), m.group(1)))
                    self.i = end
                else:
                    self.buf.append(c)
                    self.started = True
                    self.i += 1
            else:
                # "#" or "~" inside a word: plain, as what follows up to the next character that means something.
                end = _plain_end(s, self.i + 1)
                self.buf.append(s[self.i : end])
                self.started = True
                self.i = end
        self.end_word()
        if self.pending:
            self.heredocs()
        return self.tokens


# The common script: plain words (nothing quoted, expanded, escaped or commented; not starting with ``~``),
# blanks and operators, but no here-document (``<<``), no process substitution (``<(``, ``>(``) and no word
# running straight into a redirection (``2>x``, whose word may be an IO number). Such a script is tokenised
# by one regex scan; anything else (the ``x`` group) sends the whole script to the lexer above. The word
# alternative needs the character after the word to end it, as the lexer's plain-word case does. The scan
# stays linear: a word is read once (possessive: a shorter one is never followed by what ends a word), and
# the ``x`` group takes the rest of the script, so that findall() stops there rather than reading every
# word after it again from each of its characters (a 4,000-character word run into ">" took a second).
_FAST = re.compile(
    r"[ \t]*+(?:"
    r"([^ \t\n;&|()<>\\'\"`$#~][^ \t\n;&|()<>\\'\"`$]*+)(?=[ \t\n;&|()]|\Z)"
    r"|(;;&|&>>|<<<|;;|;&|&&|\|\||\|&|&>|>>|>\||>&|<>|<&|;|&|\||\(|\)|<(?![<(])|>(?!\()|\n)"
    r"|\Z|([\s\S]+))"
)


# What rules the one-scan tokeniser out, found by one search that stops at the first: quotes, escapes,
# expansions, here-documents, process substitutions, a comment or tilde at a word's start. Searched first
# so that a here-document's long body costs one C scan, not a findall over all of it.
_NOT_FAST = re.compile(r"[\\'\"`$]|(?<!<)<<(?!<)|[<>]\(|(?:^|[ \t\n;&|()<>])[#~]")


def _fast_tokens(src: str) -> list[Token] | None:
    """The tokens of a common script (see ``_FAST``), or None when it needs the lexer."""
    if _NOT_FAST.search(src) is not None:
        return None
    tokens: list[Token] = []
    append = tokens.append
    ops = _PLAIN_OPS
    new = (
        tuple.__new__
    )  # the named tuples made without their Python-level __new__: a long script has thousands
    for word, op, other in _FAST.findall(src):
        if word:
            append(new(Word, ((new(Part, ("glob", word, "")),),)))
        elif op:
            append(ops[op])
        elif other:
            return None
    return tokens


def tokenize(src: str, *, lenient: bool = False) -> tuple[list[Token], bool]:
    """The tokens of ``src`` and whether a comment was dropped."""
    fast = _fast_tokens(src)
    if fast is not None:
        return fast, False
    lexer = _Lexer(src, lenient)
    tokens = lexer.run()
    return tokens, lexer.comment


class _Chained(Exception):
    """The lexer met an operator, and was asked to stop there."""


def simple_command(src: str) -> tuple[list[Word], bool] | None:
    """The words of ``src`` and whether a comment was dropped, when it is one simple command with no
    operator (no chaining, newline, redirection or here-document); None when it has one or would not run.
    It stops reading at the first operator, so a long script costs nothing."""
    lexer = _Lexer(src, False, stop_at_op=True)
    try:
        tokens = lexer.run()
    except (_Chained, ShellSyntaxError, RecursionError):
        return None
    return [t for t in tokens if isinstance(t, Word)], lexer.comment


def split_words(src: str) -> list[Word]:
    """The words of a string that is split like a command line (``env -S``), leniently."""
    tokens, _ = tokenize(src, lenient=True)
    return [t for t in tokens if isinstance(t, Word)]


def double_quoted(src: str) -> list[Part]:
    """The parts of ``src`` read as the inside of double quotes (an unquoted here-document's body)."""
    lexer = _Lexer(src, True)
    return lexer.double(stop=None)


# ---------------------------------------------------------------------------------------------------
# the parser


def parse(src: str, *, lenient: bool = False) -> Script:
    tokens, comment = tokenize(src, lenient=lenient)
    return parse_tokens(tokens, comment, lenient=lenient)
