"""What the shell lexer and parser (``shell.py``) make: the parts of a word, words, operators, redirections,
here-documents, simple commands, pipelines and scripts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

PartKind = Literal["lit", "glob", "param", "tilde", "cmd", "proc", "arith"]


class ShellSyntaxError(ValueError):
    """The command is not something bash would run as written."""


class Part(NamedTuple):
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


class Word(NamedTuple):
    # Part and Word are named tuples, not frozen dataclasses: a long command makes thousands of them, and a
    # tuple is made several times faster.
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
# The operators that carry nothing but their text, made once: the parser only reads tokens.
_PLAIN_OPS = {
    o: Op(o)
    for o in (
        ";;&",
        ";;",
        ";&",
        "&&",
        "||",
        "|&",
        "&>",
        "&>>",
        "<<<",
        ">>",
        ">|",
        ">&",
        "<>",
        "<&",
        ";",
        "&",
        "|",
        "(",
        ")",
        "<",
        ">",
        "\n",
    )
}


@dataclass(frozen=True)
class Redirect:
    op: str  # one of REDIRECT_OPS
    fd: str | None
    target: Word | None  # the file, fd, here-string, or the here-document's delimiter word
    heredoc: Heredoc | None = None


def _redirect(op: str, fd: str | None, target: Word | None, heredoc: Heredoc | None) -> Redirect:
    """``Redirect(…)`` without a frozen dataclass's ``__init__`` (an ``object.__setattr__`` per field): a
    long script makes one per redirection."""
    r = object.__new__(Redirect)
    r.__dict__.update(op=op, fd=fd, target=target, heredoc=heredoc)
    return r


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
