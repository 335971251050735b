"""Commands that read a whole directory tree: ``grep -r``, ``rg``, ``cp -r``, ``tar c``, ``zip -r``, ``rsync -a``
and ``scp -r`` of a local source. Given a directory that holds credentials below it (``grep -r token ~``,
``tar czf /work/repo/h.tgz ~``, ``cp -r ~ ./h``), they read the credentials as surely as ``cat`` of each file:
the rule "reading credentials" (``paths.holds_credentials`` says which directories hold some).

:func:`trees_read` gives the words such a command reads recursively; a command that does not recurse
(``grep token notes.txt``, ``cp a b``) reads none here. :func:`may_read_tree` tells, from a command line's
text, whether any word of it can name such a directory: when none can, these commands are cleared with the
rest (most scripts: ``grep -rn TODO src``), not walked.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Sequence

from .argv import options
from .paths import Where, holds_credentials, remote_path, secret_places, turn_places
from .program_rules import _HERE
from .remotes import _SCP_VALUES
from .shell import Word
from .writers import _RSYNC_LONG, _RSYNC_SHORT, tar_options

_GREPS = frozenset({"grep", "egrep", "fgrep", "rgrep", "ugrep"})
_SEARCHERS = frozenset({"rg", "ag", "ack", "ack-grep"})  # recursive by default
TREE_READERS = _GREPS | _SEARCHERS | {"cp", "tar", "bsdtar", "zip", "rsync", "scp"}
_GREP_LONG = (
    "--regexp --file --max-count --after-context --before-context --context --directories --devices "
    "--include --exclude --exclude-dir --exclude-from --label --color --colour --binary-files --group-separator"
).split()
_RG_SHORT = "efgGtTmABCjMrEd"
_RG_LONG = (
    "--regexp --file --glob --iglob --type --type-not --max-count --after-context --before-context --context "
    "--threads --max-columns --replace --encoding --max-depth --type-add --ignore-file --pre --sort --sortr"
).split()


def trees_read(name: str, args: Sequence[Word]) -> list[Word]:
    """The operands ``name args`` reads recursively (``.`` for a search given no path)."""
    if name in _GREPS:
        parsed = options(args, "efmABCdD", _GREP_LONG)
        directories = parsed.texts("-d", "--directories")
        if parsed.has("--include") or not (
            name == "rgrep"
            or parsed.has("-r", "-R", "--recursive", "--dereference-recursive")
            or "recurse" in directories
        ):
            return []  # not recursive, or only the files --include names (`--include='*.py'`)
        given = parsed.has("-e", "--regexp", "-f", "--file")
        paths = list(parsed.operands if given else parsed.operands[1:])
        return paths or [_HERE]
    if name in _SEARCHERS:
        parsed = options(args, _RG_SHORT, _RG_LONG)
        if parsed.has("-g", "--glob", "--iglob", "-t", "--type", "-G", "--file-search-regex"):
            return []  # only the files a glob or a type names (`rg -t py`, `rg -g '*.py'`)
        given = parsed.has("-e", "--regexp", "-f", "--file")
        paths = list(parsed.operands if given else parsed.operands[1:])
        return paths or [_HERE]
    if name == "cp":
        parsed = options(args, "tS", ("--target-directory", "--suffix", "--backup", "--reflink", "--sparse"))
        if not parsed.has("-r", "-R", "-a", "--recursive", "--archive"):
            return []
        into = parsed.has("-t", "--target-directory")
        return list(parsed.operands if into else parsed.operands[:-1])
    if name in ("tar", "bsdtar"):
        parsed = tar_options(args)
        creates = parsed.has("-c", "--create", "-r", "--append", "-u", "--update")
        return list(parsed.operands) if creates else []
    if name == "zip":
        parsed = options(args, "bntPOZ", ("--temp-path", "--suffixes", "--password", "--output-file"))
        return list(parsed.operands[1:]) if parsed.has("-r", "--recurse-paths") else []
    if name == "rsync":
        parsed = options(args, _RSYNC_SHORT, _RSYNC_LONG)
        if not parsed.has("-r", "-a", "--recursive", "--archive"):
            return []
        return [w for w in parsed.operands[:-1] if not remote_path(w.text)[0]]
    if name == "scp":
        parsed = options(args, _SCP_VALUES)
        if not parsed.has("-r"):
            return []
        return [w for w in parsed.operands[:-1] if not remote_path(w.text)[0]]
    return []


_WORD_START = r"[\s;&|()<>=\"']"  # what may stand before a word
_WORD_END = r"(?=[\s;&|()<>\"']|\Z)"


_HOME_WORD = re.compile(r"\$\{?HOME\b")
_TILDE_WORD = re.compile(rf"~(?<={_WORD_START}~)")


@functools.lru_cache(maxsize=64)
def _slash_naming(where: Where) -> re.Pattern[str]:
    """A word that names a directory above one of the secrets' places (``/``, ``/home``, HOME …: any number
    of slashes between the names, and after). Written to start at its "/" and look behind from there, so that
    the scan of a long script skips to each "/" in the regex engine's tight loop."""
    above: set[str] = set()
    for place in secret_places(turn_places(where)):
        while place not in ("", "/"):
            place = posixpath.dirname(place)
            if place != "/":
                above.add(place)
    names = sorted(("/+".join(map(re.escape, p.strip("/").split("/"))) for p in above), key=len, reverse=True)
    rest = rf"(?:/*(?:{'|'.join(names)}))?/*{_WORD_END}" if names else rf"/*{_WORD_END}"
    return re.compile(rf"/(?:(?<={_WORD_START}/)|(?<=\A/)){rest}")


def _naming(src: str, where: Where) -> bool:
    """Whether a word of ``src`` names a directory above one of the secrets' places (:func:`_slash_naming`),
    starts ``~``, is ``$HOME``, or goes up (``..``): each looked for apart, by a substring search or a pattern
    starting with one literal character (a class of them tried at each position of a 20,000-character
    script, "[/~$.]", took ~0.3 ms on a slow machine)."""
    return (
        ".." in src
        or ("HOME" in src and _HOME_WORD.search(src) is not None)
        or ("~" in src and (src.startswith("~") or _TILDE_WORD.search(src) is not None))
        or ("/" in src and _slash_naming(where).search(src) is not None)
    )


def may_read_tree(src: str, where: Where) -> bool:
    """Whether a tree reader in ``src`` can read a directory that holds credentials: the working directory
    holds some, or a word can name one (:func:`_naming`)."""
    return _cwd_holds(where) or _naming(src, where)


@functools.lru_cache(maxsize=64)
def _cwd_holds(where: Where) -> bool:
    return holds_credentials(turn_places(where).cwd, where) is not None
