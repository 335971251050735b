"""A small POSIX shell lexer and parser, enough for the approvals rules to see what a command runs.

It is not a shell. It splits a command line into pipelines and simple commands (on ``;``, ``&&``,
``||``, ``|``, ``|&``, ``&``, newlines and parentheses), removes quotes, keeps expansions apart from
literal text (``$NAME``, ``${…}``, ``~``, ``$(…)``, backquotes, ``<(…)``, ``$((…))``) so the rules can
look inside them, and records redirections and here-documents. It never expands anything.

``parse(src)`` raises :class:`ShellSyntaxError` on input bash would refuse to run (an unterminated
quote, substitution or backquote, a redirection without a target). ``parse(src, lenient=True)`` never
raises: it closes whatever is open at the end of the input, which is the best-effort token scan the
rules fall back to (see ``rules.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

PartKind = Literal["lit", "glob", "param", "tilde", "cmd", "proc", "arith"]


class ShellSyntaxError(ValueError):
    """The command is not something bash would run as written."""


@dataclass(frozen=True)
class Part:
    """One piece of a word.

    - ``lit``: quoted or backslash-escaped text (``text`` is the value)
    - ``glob``: unquoted text, where ``*``, ``?`` and ``[`` are patterns (``text`` is the value)
    - ``param``: ``$NAME`` / ``${…}`` (``text`` is the source, ``inner`` the name or the braces' content)
    - ``tilde``: a leading ``~`` or ``~user`` (``inner`` is the user, empty for one's own home)
    - ``cmd``: ``$(…)`` or a backquoted command (``inner`` is the command)
    - ``proc``: ``<(…)`` or ``>(…)`` (``inner`` is the command)
    - ``arith``: ``$((…))`` (``inner`` is the expression)
    """

    kind: PartKind
    text: str
    inner: str = ""


@dataclass(frozen=True)
class Word:
    parts: tuple[Part, ...]

    @property
    def literal(self) -> str | None:
        """The value with quotes removed, or None when the word has an expansion."""
        out: list[str] = []
        for p in self.parts:
            if p.kind not in ("lit", "glob"):
                return None
            out.append(p.text)
        return "".join(out)

    @property
    def text(self) -> str:
        """Quotes removed, expansions written back as shell source (``$HOME``, ``$(…)``, ``~``)."""
        return "".join(p.text for p in self.parts)

    @property
    def nested(self) -> tuple[str, ...]:
        """Commands this word runs when it is expanded: substitutions (and what ``${…}`` holds)."""
        out: list[str] = []
        for p in self.parts:
            if p.kind in ("cmd", "proc", "arith"):
                out.append(p.inner)
            elif p.kind == "param" and ("$" in p.inner or "`" in p.inner):
                out.append(p.inner)
        return tuple(out)

    @property
    def has_glob(self) -> bool:
        return any(p.kind == "glob" and any(c in p.text for c in "*?[") for p in self.parts)

    @property
    def is_assignment(self) -> bool:
        return bool(self.parts) and self.parts[0].kind == "glob" and bool(_ASSIGN.match(self.parts[0].text))


@dataclass
class Heredoc:
    """A here-document: its body is read at the end of the line that opened it."""

    delimiter: str = ""
    quoted: bool = False
    strip_tabs: bool = False
    body: str = ""


@dataclass
class Op:
    text: str
    fd: str | None = None
    heredoc: Heredoc | None = None


Token = Word | Op


@dataclass(frozen=True)
class Redirect:
    op: str  # one of REDIRECT_OPS
    fd: str | None
    target: Word | None  # the file, fd, here-string, or the here-document's delimiter word
    heredoc: Heredoc | None = None


@dataclass
class Command:
    """A simple command: assignments, words (argv), redirections."""

    assigns: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.assigns or self.words or self.redirects)


@dataclass
class Pipeline:
    commands: list[Command]


@dataclass
class Script:
    pipelines: list[Pipeline]
    comment: bool = False  # a comment was dropped somewhere


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (
    ";;&", "&>>", "<<<", "<<-",
    ";;", ";&", "&&", "||", "|&", "&>", ">>", ">|", ">&", "<<", "<>", "<&",
    ";", "&", "|", "(", ")", "<", ">",
)  # fmt: skip
REDIRECT_OPS = frozenset({"<", ">", ">>", ">|", "<>", ">&", "<&", "&>", "&>>", "<<", "<<-", "<<<"})
WRITE_OPS = frozenset({">", ">>", ">|", "<>", "&>", "&>>", ">&"})
_WORD_END = set(" \t\n;&|()<>")
# Reserved words that only shape control flow; the command after them is what runs.
_SKIP = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"})
# Reserved words whose own line is not a command (loop heads, case subjects, tests).
_SKIP_CLAUSE = frozenset({"for", "select", "case", "[[", "function"})


# ---------------------------------------------------------------------------------------------------
# scanning helpers: find where a quoted string or substitution ends (None: it never does)


def _skip_single(s: str, i: int) -> int | None:
    j = s.find("'", i)
    return None if j < 0 else j + 1


def _skip_backquote(s: str, i: int) -> int | None:
    n = len(s)
    while i < n:
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == "`":
            return i + 1
        i += 1
    return None


def _skip_double(s: str, i: int) -> int | None:
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        if s.startswith("$(", i):
            j = _skip_group(s, i + 2, 1, ")")
        elif s.startswith("${", i):
            j = _skip_group(s, i + 2, 1, "}")
        elif c == "`":
            j = _skip_backquote(s, i + 1)
        else:
            i += 1
            continue
        if j is None:
            return None
        i = j
    return None


# The ``$`` groups a word may hold: how each opens, what part it makes, how it closes, how deep it opens.
_GROUPS: tuple[tuple[str, PartKind, str, int], ...] = (
    ("$((", "arith", "))", 2),
    ("$(", "cmd", ")", 1),
    ("${", "param", "}", 1),
)


def _skip_group(s: str, i: int, depth: int, close: str) -> int | None:
    """The end of a group opened ``depth`` deep before ``i``: ``$(…)``, ``$((…))`` or a subshell's ``(…)``
    when ``close`` is ")", ``${…}`` when it is "}". Quotes and backquotes are skipped whole; only the group's
    own brackets count (a ``$(…)`` inside ``${…}`` is skipped as a group of its own)."""
    opener = "(" if close == ")" else "${"
    n = len(s)
    while i < n:
        c = s[i]
        j: int | None
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = _skip_single(s, i + 1)
        elif c == '"':
            j = _skip_double(s, i + 1)
        elif c == "`":
            j = _skip_backquote(s, i + 1)
        elif close == "}" and s.startswith("$(", i):
            j = _skip_group(s, i + 2, 1, ")")
        elif s.startswith(opener, i):
            depth += 1
            i += len(opener)
            continue
        else:
            if c == close:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
            continue
        if j is None:
            return None
        i = j
    return None


_ANSI = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def _ansi_c(body: str) -> str:
    """The value of ``$'…'``."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _ANSI:
            out.append(_ANSI[e])
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            m = re.match(f"[0-9A-Fa-f]{{1,{width}}}", body[i:])
            if m:
                out.append(chr(min(int(m.group(0), 16), 0x10FFFF)))
                i += len(m.group(0))
            else:
                out.append("\\" + e)
        elif e in "01234567":
            m = re.match(r"[0-7]{0,2}", body[i:])
            digits = e + (m.group(0) if m else "")
            out.append(chr(int(digits, 8) & 0xFF))
            i += len(digits) - 1
        elif e == "c" and i < n:
            out.append(chr(ord(body[i]) & 0x1F))
            i += 1
        else:
            out.append(e)  # \\ \' \" \? and unknown escapes
    return "".join(out)


# ---------------------------------------------------------------------------------------------------
# the lexer


class _Lexer:
    def __init__(self, src: str, lenient: bool) -> None:
        self.s = src
        self.n = len(src)
        self.i = 0
        self.lenient = lenient
        self.tokens: list[Token] = []
        self.parts: list[Part] = []
        self.buf: list[str] = []
        self.started = False
        self.awaiting: list[Heredoc] = []  # here-documents whose delimiter word comes next
        self.pending: list[Heredoc] = []  # here-documents whose body starts after the next newline
        self.comment = False

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
        if self.awaiting:
            hd = self.awaiting.pop(0)
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
        while self.i < n:
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
        op = next(o for o in _OPS if s.startswith(o, i))
        self.i = i + len(op)
        hd: Heredoc | None = None
        if op in ("<<", "<<-"):
            hd = Heredoc(strip_tabs=op == "<<-")
            self.awaiting.append(hd)
        self.tokens.append(Op(op, fd, hd))

    def run(self) -> list[Token]:
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in " \t":
                self.end_word()
                self.i += 1
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
                self.tokens.append(Op("\n"))
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
                end = _skip_group(s, self.i + 2, 1, ")")
                if end is None:
                    self.fail(f"unterminated {c}(")
                    end = n + 1
                inner = s[self.i + 2 : end - 1]
                self.add(Part("proc", c + "(" + inner + ")", inner))
                self.i = min(end, n)
            elif c in _WORD_END:
                self.operator()
            elif c == "~" and not self.started:
                m = re.compile(r"~([A-Za-z0-9._-]*)").match(s, self.i)
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
                self.buf.append(c)
                self.started = True
                self.i += 1
        self.end_word()
        if self.pending:
            self.heredocs()
        return self.tokens


def tokenize(src: str, *, lenient: bool = False) -> tuple[list[Token], bool]:
    """The tokens of ``src`` and whether a comment was dropped."""
    lexer = _Lexer(src, lenient)
    tokens = lexer.run()
    return tokens, lexer.comment


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
    pipelines: list[Pipeline] = []
    stages: list[Command] = []
    cur = Command()
    skipping: str | None = None  # inside a clause that runs nothing ("for x in …", "[[ … ]]")

    def end_command() -> None:
        nonlocal cur
        if not cur.empty():
            stages.append(cur)
        cur = Command()

    def end_pipeline() -> None:
        nonlocal stages
        end_command()
        if stages:
            pipelines.append(Pipeline(stages))
        stages = []

    k = 0
    while k < len(tokens):
        tok = tokens[k]
        k += 1
        if isinstance(tok, Op):
            if tok.text in REDIRECT_OPS:
                target = tokens[k] if k < len(tokens) and isinstance(tokens[k], Word) else None
                if target is None:
                    if not lenient:
                        raise ShellSyntaxError(f"redirection {tok.text} without a target")
                else:
                    k += 1
                if skipping is None:
                    assert target is None or isinstance(target, Word)
                    cur.redirects.append(Redirect(tok.text, tok.fd, target, tok.heredoc))
                continue
            if skipping == "[[":
                continue
            skipping = None
            if tok.text in ("|", "|&"):
                end_command()
            else:
                end_pipeline()
            continue
        if skipping is not None:
            if (skipping == "[[" and tok.literal == "]]") or skipping == "function":
                skipping = None  # "function NAME": only the name is skipped
            continue
        if not cur.words:
            if tok.is_assignment:
                cur.assigns.append(tok)
                continue
            lit = tok.literal if all(p.kind == "glob" for p in tok.parts) else None
            if not cur.assigns and lit in _SKIP:
                continue
            if not cur.assigns and lit in _SKIP_CLAUSE:
                skipping = lit
                continue
        cur.words.append(tok)
    end_pipeline()
    return Script(pipelines, comment)
