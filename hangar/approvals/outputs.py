"""The files text, archive, key and environment tools are told to write: ``sort -o``, ``uniq IN OUT``, ``split``'s
and ``csplit``'s prefixes, ``patch``'s file (or ``-o``, ``-d``), ``zip``'s and ``7z``'s archive (``7z x``'s ``-o``
directory), ``cpio``'s directory, ``ssh-keygen -f``, ``openssl``'s ``-out``/``-keyout``, a virtualenv's directory
(``python3 -m venv DIR``, ``virtualenv DIR``), and git's ``worktree add``, ``bundle create``, ``archive -o`` and
``format-patch -o``.

As ``writers.py``'s, each is a write for the rule "file writes outside the repository and $HANGAR_IO"; what a
tool only reads (``sort in.txt``, ``patch --dry-run``, ``ssh-keygen -l -f``, ``7z l``) is not a target."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import _PYTHON, options
from .shell import Word

_SEVEN_ZIP = frozenset({"7z", "7za", "7zr"})
OUTPUT_WRITERS = (
    frozenset(
        {"sort", "uniq", "split", "csplit", "patch", "zip", "cpio", "ssh-keygen", "openssl", "virtualenv"}
    )
    | _SEVEN_ZIP
)
_SORT_VALUES = (
    "--output --buffer-size --temporary-directory --field-separator --key --files0-from --batch-size "
    "--compress-program --parallel --random-source"
).split()
_PATCH_VALUES = (
    "--strip --directory --output --input --prefix --ifdef --fuzz --reject-file --version-control "
    "--basename-prefix --suffix --get --quoting-style --read-only"
).split()
# git's commands that write a file or directory they are given, and how: the operand after the verb's
# operands skipped, or an option's value.
_GIT_OUTPUTS = {"worktree": ("add",), "bundle": ("create",)}


def written_by_tool(name: str, args: Sequence[Word]) -> list[Word | str]:
    """The files (words, or strings cut from an option) ``name args`` writes, for the tools above."""
    if name == "sort":
        return options(args, "oSTtk", _SORT_VALUES).given("-o", "--output")
    if name == "uniq":
        operands = options(args, "fsw", ("--skip-fields", "--skip-chars", "--check-chars")).operands
        return list(operands[1:2])
    if name == "split":
        operands = options(
            args, "abCln", ("--suffix-length", "--bytes", "--line-bytes", "--lines", "--number")
        ).operands
        # [INPUT [PREFIX]]: the pieces are PREFIXaa, PREFIXab … (default: x…, here)
        return list(operands[1:2])
    if name == "csplit":
        return options(args, "fbn", ("--prefix", "--suffix-format", "--digits")).given("-f", "--prefix")
    if name == "patch":
        return _patch(args)
    if name == "zip":
        parsed = options(args, "bntPOZ", ("--temp-path", "--suffixes", "--password", "--output-file"))
        return [*parsed.given("-O", "--output-file"), *parsed.operands[:1]]
    if name in _SEVEN_ZIP:
        return _seven_zip(args)
    if name == "cpio":
        parsed = options(args, "DEFHIMORs", ("--directory", "--file", "--format", "--pattern-file"))
        if parsed.has("-i", "--extract"):
            return parsed.given("-D", "--directory")
        if parsed.has("-p", "--pass-through"):
            return list(parsed.operands[:1])
        return parsed.given("-O", "-F", "--file")
    if name == "ssh-keygen":
        parsed = options(args, "abCDEfFIJjmMNnOPrstVwYzZ")
        if parsed.has("-l", "-y", "-F", "-B", "-Q"):
            return []  # shows a key's fingerprint, derives its public half, looks a host up
        return parsed.given("-f")
    if name == "openssl":
        # openssl's options are single-dash words: `-out FILE`, `-keyout FILE`.
        return [args[i + 1] for i, w in enumerate(args[:-1]) if w.literal in ("-out", "-keyout")]
    if name == "virtualenv" or (_PYTHON.match(name) and [w.literal for w in args[:2]] == ["-m", "venv"]):
        rest = args if name == "virtualenv" else args[2:]
        return list(
            options(rest, "p", ("--prompt", "--python", "--creator", "--seeder", "--activators")).operands
        )
    return []


def git_output(verb: str, rest: Sequence[Word]) -> list[Word | str]:
    """What git's ``worktree add``, ``bundle create``, ``archive`` and ``format-patch`` write (``rest``: the
    words after the verb)."""
    if verb in _GIT_OUTPUTS:
        parsed = options(rest, "bB", ("--reason",))
        operands = parsed.operands
        if not operands or operands[0].literal not in _GIT_OUTPUTS[verb]:
            return []
        return list(operands[1:2])  # `git worktree add PATH [BRANCH]`, `git bundle create FILE REFS`
    if verb == "archive":
        parsed = options(rest, "o", ("--output", "--format", "--prefix", "--remote", "--exec", "--add-file"))
        return parsed.given("-o", "--output")
    if verb == "format-patch":
        longs = ("--output-directory", "--output", "--subject-prefix", "--suffix", "--to", "--cc")
        return options(rest, "ov", longs).given("-o", "--output-directory", "--output")
    return []


def _patch(args: Sequence[Word]) -> list[Word | str]:
    parsed = options(args, "pdoiBDFrVYzg", _PATCH_VALUES)
    if parsed.has("--dry-run", "-C", "--check"):
        return []
    outputs = [o for o in parsed.given("-o", "--output") if (o if isinstance(o, str) else o.text) != "-"]
    out = [*parsed.given("-d", "--directory"), *outputs, *parsed.given("-r", "--reject-file")]
    if not parsed.has("-o", "--output"):
        out += parsed.operands[:1]  # [ORIGFILE [PATCHFILE]]: the file patched in place
    return out


def _seven_zip(args: Sequence[Word]) -> list[Word | str]:
    """``7z a|u|d ARCHIVE …`` writes the archive; ``7z x|e ARCHIVE -oDIR`` extracts into DIR."""
    if not args:
        return []
    command = args[0].literal
    operands: list[Word | str] = [w for w in args[1:] if not (w.literal or "").startswith("-")]
    if command in ("a", "u", "d", "rn"):
        return operands[:1]
    if command in ("x", "e"):
        return [lit[2:] for w in args[1:] if (lit := w.literal or "").startswith("-o") and len(lit) > 2]
    return []
