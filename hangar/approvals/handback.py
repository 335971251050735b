"""The hand-back exemption: hangar's own ``hangar-agent`` reports are not asked about.

Under every policy but auto, a shell call that is exactly one simple command

    hangar-agent done|progress|ask [message …]
    hangar-agent result '<json>'

is allowed by the policy at once (recorded as resolved by: policy). These only write the turn's files
under $HANGAR_IO. "Exactly" means: the program is the bare name ``hangar-agent``; nothing is chained
with ``;``, ``&&``, ``||``, ``|``, ``&`` or a newline; no redirection or here-document; no ``$(…)``,
backquotes, ``<(…)`` or ``$((…))`` anywhere; no environment prefix; no comment; no argument starting
with ``@`` (a file to read). ``result`` takes exactly one argument, a literal that parses as JSON.
``hangar-agent artifact``, ``result @FILE``, ``env``, ``svc``, the computer commands and anything
chained to an allowed one (``hangar-agent done ok; rm -rf ~``) are not exempt.

Codex sends every command as ``/bin/bash -lc '…'``: exactly one such level is unwrapped.
"""

from __future__ import annotations

import json
import re

from .shell import Word, simple_command

HANDBACK_SUBCOMMANDS = frozenset({"done", "progress", "ask", "result"})
_SIMPLE_PARAM = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])$")


def _words(command: str) -> list[Word] | None:
    """The words of exactly one simple command with no operator, redirection or comment; else None."""
    found = simple_command(command.strip())
    if found is None:
        return None
    words, comment = found
    if comment or not words:
        return None
    return words


def _unwrap_bash_lc(words: list[Word]) -> str | None:
    """The script of ``bash -lc 'script'`` (or ``/bin/bash -c …``), else None."""
    if len(words) != 3:
        return None
    prog, flag, script = (w.literal for w in words)
    if prog is None or prog.rsplit("/", 1)[-1] != "bash" or (prog != "bash" and not prog.startswith("/")):
        return None
    if flag not in ("-lc", "-c") or script is None:
        return None
    return script


def _is_direct(words: list[Word]) -> bool:
    if len(words) < 2 or words[0].literal != "hangar-agent":
        return False
    sub = words[1].literal
    if sub not in HANDBACK_SUBCOMMANDS:
        return False
    args = words[2:]
    for w in args:
        for p in w.parts:
            if p.kind in ("cmd", "proc", "arith"):
                return False
            if p.kind == "param" and not _SIMPLE_PARAM.match(p.text):
                return False
        if w.text.startswith("@"):
            return False
    if sub == "result":
        if len(args) != 1 or args[0].literal is None:
            return False
        try:
            json.loads(args[0].literal)
        except ValueError:
            return False
    return True


def is_handback(command: str) -> bool:
    """True when ``command`` is exactly one hand-back command (see the module's docstring)."""
    words = _words(command)
    if words is None:
        return False
    if _is_direct(words):
        return True
    script = _unwrap_bash_lc(words)
    if script is None:
        return False
    inner = _words(script)
    return inner is not None and _is_direct(inner)
