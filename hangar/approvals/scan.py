"""Where a quoted string or a substitution ends in shell source, and the value of ``$'…'``: the lexer's
(``shell.py``) scanning helpers. Each scanner returns the index just past the end, or None when it never
ends."""

from __future__ import annotations

import re


def _skip_single(s: str, i: int) -> int | None:
    j = s.find("'", i)
    return None if j < 0 else j + 1


# Each scanner jumps with one regex search to the next character that matters to it, so a scan is one pass
# in C over the text between them rather than a Python step per character.
_BACKQUOTE_STOP = re.compile(r"[\\`]")
_DOUBLE_STOP = re.compile(r"[\\\"`]|\$[({]")


def _skip_backquote(s: str, i: int) -> int | None:
    while True:
        m = _BACKQUOTE_STOP.search(s, i)
        if m is None:
            return None
        i = m.start()
        if s[i] == "\\":
            i += 2
            continue
        return i + 1


def _skip_double(s: str, i: int) -> int | None:
    while True:
        m = _DOUBLE_STOP.search(s, i)
        if m is None:
            return None
        i = m.start()
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
        else:
            j = _skip_backquote(s, i + 1)
        if j is None:
            return None
        i = j


_PAREN_STOP = re.compile(r"[\\'\"`()]")
_BRACE_STOP = re.compile(r"[\\'\"`$}]")


def _skip_group(s: str, i: int, depth: int, close: str) -> int | None:
    """The end of a group opened ``depth`` deep before ``i``: ``$(…)``, ``$((…))`` or a subshell's ``(…)``
    when ``close`` is ")", ``${…}`` when it is "}". Quotes and backquotes are skipped whole; only the group's
    own brackets count (a ``$(…)`` inside ``${…}`` is skipped as a group of its own)."""
    opener = "(" if close == ")" else "${"
    stop = _PAREN_STOP if close == ")" else _BRACE_STOP
    while True:
        m = stop.search(s, i)
        if m is None:
            return None
        i = m.start()
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


_HEX = {
    "x": re.compile("[0-9A-Fa-f]{1,2}"),
    "u": re.compile("[0-9A-Fa-f]{1,4}"),
    "U": re.compile("[0-9A-Fa-f]{1,8}"),
}
_OCTAL = re.compile("[0-7]{0,2}")


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
            m = _HEX[e].match(body, i)
            if m:
                out.append(chr(min(int(m.group(0), 16), 0x10FFFF)))
                i += len(m.group(0))
            else:
                out.append("\\" + e)
        elif e in "01234567":
            m = _OCTAL.match(body, i)
            digits = e + (m.group(0) if m else "")
            out.append(chr(int(digits, 8) & 0xFF))
            i += len(digits) - 1
        elif e == "c" and i < n:
            out.append(chr(ord(body[i]) & 0x1F))
            i += 1
        else:
            out.append(e)  # \\ \' \" \? and unknown escapes
    return "".join(out)
