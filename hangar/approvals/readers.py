"""What reads its program from a pipeline (``curl … | sh``): a shell or interpreter reading standard input,
xargs handing what it reads to ``sh -c``, a process substitution feeding a shell (``tee >(sh)``), and a loop
that runs each line it reads (``… | while read l; do eval "$l"; done``)."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import Cmd, _cmd, program_source, xargs_replace
from .shell import ShellSyntaxError, Word, parse


def xargs_script(cmd: Cmd, script: Word | None) -> bool:
    """Whether the lines xargs reads become (part of) the script of the shell it runs with ``-c``: the
    script itself when none is given, or where ``-I``'s string stands in it."""
    if script is None:
        return True
    replace = xargs_replace(cmd.words, len(cmd.argv))
    return replace is not None and replace in script.text


def feeds_a_shell(cmd: Cmd) -> bool:
    """Whether what ``cmd`` writes goes to a shell as its script through a process substitution
    (``tee >(sh)``, ``> >(bash)``): the substitution's first command reads its program from stdin."""
    for word in (*cmd.words, *(r.target for r in cmd.redirects if r.target is not None)):
        for part in word.parts:
            if part.kind == "proc" and part.text.startswith(">(") and reads_its_program(part.inner):
                return True
    return False


LINE_READERS = frozenset({"read", "mapfile", "readarray"})


def runs_a_variable(cmd: Cmd) -> bool:
    """Whether ``cmd`` runs a variable's value as a command: ``eval "$l"``, ``bash -c "$l"``, ``$l``. In a
    pipeline that reads lines (``curl … | while read l; do eval "$l"; done``) that runs what was read."""
    if cmd.name == "eval":
        words: Sequence[Word] = cmd.args
    else:
        mode, operand = program_source(cmd.name, cmd.args)
        words = [operand] if mode == "c" and operand is not None else cmd.argv[:1]
    return any(part.kind == "param" for word in words for part in word.parts)


def reads_its_program(src: str) -> bool:
    try:
        pipelines = parse(src).pipelines
    except ShellSyntaxError:
        return False
    if not pipelines or not pipelines[0].commands:
        return False
    first = _cmd(pipelines[0].commands[0])
    return program_source(first.name, first.args)[0] == "stdin"
