"""The files more programs write, beyond the copy and create commands ``ProgramRules.write_targets`` reads
itself: a change of a file's mode, owner or attributes (``chmod``, ``chown``, ``chgrp``, ``chattr``,
``setfacl``), an in-place edit (``sed -i``, ``perl -i``), the destination of ``rsync``, what ``tar`` extracts into or
archives to, ``unzip -d``, the directory ``git clone`` or ``git init`` makes, the file ``git config`` changes,
what ``shred`` overwrites, and a compiler's output (``cc -o``, ``go build -o``, ``rustc -o``/``--out-dir``).

Each is a write for the rule "file writes outside the repository and $HANGAR_IO": ``chmod -R 777 /`` or
``sed -i … /etc/hosts`` changes the sandbox outside the checkout as surely as a redirection does. What is
only read (a ``--reference`` file, a sed script file, an archive extracted) is not a target. An operand that
is not a path (a mode, an owner, a sed script) is left out where the command's syntax says which it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from .argv import Parsed, options
from .git_aliases import global_options
from .outputs import OUTPUT_WRITERS, git_output, written_by_tool
from .paths import remote_path
from .shell_types import Part, Word

# chmod/chown/chgrp: the operands after the mode or owner (none skipped with --reference).
_OWNERS = frozenset({"chmod", "chown", "chgrp"})
# A mode given as a short option (`chmod -w f`, `chmod -rwx f`): then every operand is a file.
_MODE_LETTERS = frozenset("rwxXst")
# C and C++ compilers: `-o FILE` or `-oFILE` (no other of their options starts with "-o").
_CC = frozenset({"cc", "gcc", "g++", "c++", "clang", "clang++", "tcc"})
WRITERS = (
    _OWNERS
    | {"chattr", "setfacl", "sed", "perl", "rsync", "tar", "unzip", "git", "shred"}
    | _CC
    | {"go", "rustc"}
    | OUTPUT_WRITERS
)

# rsync's options that take a separate value (so that the value is not taken for a source or destination).
_RSYNC_SHORT = "efTBM"
_RSYNC_LONG = (
    "--rsh",
    "--rsync-path",
    "--filter",
    "--exclude",
    "--exclude-from",
    "--include",
    "--include-from",
    "--files-from",
    "--chmod",
    "--chown",
    "--usermap",
    "--groupmap",
    "--log-file",
    "--log-file-format",
    "--out-format",
    "--backup-dir",
    "--suffix",
    "--partial-dir",
    "--temp-dir",
    "--compare-dest",
    "--copy-dest",
    "--link-dest",
    "--block-size",
    "--max-size",
    "--min-size",
    "--max-delete",
    "--timeout",
    "--contimeout",
    "--port",
    "--password-file",
    "--bwlimit",
    "--remote-option",
    "--modify-window",
    "--compress-choice",
    "--compress-level",
    "--checksum-choice",
    "--sockopts",
    "--outbuf",
    "--iconv",
    "--info",
    "--debug",
    "--only-write-batch",
    "--write-batch",
    "--read-batch",
)
# tar's short options that take a value, and its long ones.
_TAR_SHORT = "bCfFgHIKLNTVX"
_TAR_LONG = (
    "--file",
    "--directory",
    "--blocking-factor",
    "--info-script",
    "--new-volume-script",
    "--listed-incremental",
    "--format",
    "--use-compress-program",
    "--starting-file",
    "--tape-length",
    "--newer",
    "--after-date",
    "--files-from",
    "--label",
    "--exclude-from",
    "--exclude",
    "--owner",
    "--group",
    "--mode",
    "--mtime",
    "--transform",
    "--xform",
)
_TAR_WRITES_ARCHIVE = (
    "-c",
    "--create",
    "-r",
    "--append",
    "-u",
    "--update",
    "-A",
    "--catenate",
    "--concatenate",
)
_TAR_EXTRACTS = ("-x", "--extract", "--get")
_GIT_CLONE_SHORT = "bocju"
_GIT_CLONE_LONG = (
    "--branch",
    "--origin",
    "--config",
    "--depth",
    "--reference",
    "--reference-if-able",
    "--separate-git-dir",
    "--upload-pack",
    "--template",
    "--jobs",
    "--filter",
    "--shallow-since",
    "--shallow-exclude",
    "--server-option",
    "--bundle-uri",
    "--ref-format",
)


def written_by(name: str, args: Sequence[Word]) -> list[Word | str]:
    """The files (as words, or strings cut from an option) ``name args`` writes; [] for a program not in
    :data:`WRITERS` or an invocation of it that writes nothing (``sed`` without ``-i``, ``tar -t``)."""
    if name in _OWNERS:
        return _owners(name, args)
    if name == "chattr":
        return list(options(args, "vp").operands)
    if name == "setfacl":
        long = ("--modify", "--modify-file", "--remove", "--remove-file", "--set", "--set-file")
        return list(options(args, "mMxX", long).operands)
    if name == "sed":
        return _sed(args)
    if name == "perl":
        return _perl(args)
    if name == "rsync":
        parsed = options(args, _RSYNC_SHORT, _RSYNC_LONG)
        if len(parsed.operands) < 2:
            return []  # one operand lists it
        dest = parsed.operands[-1]
        return [] if remote_path(dest.text)[0] else [dest]
    if name == "tar":
        return _tar(args)
    if name == "unzip":
        return list(options(args, "dx").values.get("-d", []))
    if name == "git":
        return _git(args)
    if name == "shred":  # overwrites its files in place (a device: the system rule)
        return list(options(args, "ns", ("--iterations", "--size", "--random-source")).operands)
    if name in _CC or name in ("go", "rustc"):
        return _compiled(name, args)
    return written_by_tool(name, args)


def _compiled(name: str, args: Sequence[Word]) -> list[Word | str]:
    """The output a compiler is told to write: ``-o FILE`` (``-oFILE`` for cc, ``-o=FILE`` for go),
    rustc's ``--out-dir DIR``. ``go`` writes one only when building (``go build``, ``go test -c``)."""
    if name == "go" and not any(w.literal in ("build", "test") for w in args[:1]):
        return []
    out: list[Word | str] = []
    for i, word in enumerate(args):
        lit = word.literal
        if lit is None or not lit.startswith("-"):
            continue
        if lit in ("-o", "--out-dir") and i + 1 < len(args):
            out.append(args[i + 1])
        elif lit.startswith(("-o=", "--out-dir=")):
            out.append(lit.split("=", 1)[1])
        elif name in _CC and lit.startswith("-o") and len(lit) > 2:
            out.append(lit[2:])
    return out


def _owners(name: str, args: Sequence[Word]) -> list[Word | str]:
    parsed = options(args, "", ("--reference", "--from"))
    operands: list[Word | str] = list(parsed.operands)
    mode_as_option = name == "chmod" and any(f[1:] in _MODE_LETTERS for f in parsed.flags if len(f) == 2)
    if parsed.has("--reference") or mode_as_option:
        return operands
    return operands[1:]


def _sed(args: Sequence[Word]) -> list[Word | str]:
    in_place = script_given = False
    operands: list[Word | str] = []
    i, done = 0, False
    while i < len(args):
        w = args[i]
        i += 1
        lit = w.literal
        if done or lit is None or not lit.startswith("-") or lit == "-":
            operands.append(w)
        elif lit == "--":
            done = True
        elif lit.startswith("--"):
            name, eq, _ = lit.partition("=")
            if name == "--in-place":
                in_place = True
            elif name in ("--expression", "--file", "--line-length"):
                script_given = script_given or name != "--line-length"
                i += 0 if eq else 1
        else:
            letter, i = _in_place_cluster(lit, "efl", i)
            in_place = in_place or letter == "i"
            script_given = script_given or letter in ("e", "f")
    if not in_place:
        return []
    return operands if script_given else operands[1:]


def _perl(args: Sequence[Word]) -> list[Word | str]:
    """``perl -i`` (``-pi -e …``, ``-i.bak``) edits its file operands in place; without ``-e``/``-E`` the
    first operand is the program's file."""
    in_place = code_given = False
    operands: list[Word | str] = []
    i, done = 0, False
    while i < len(args):
        w = args[i]
        i += 1
        lit = w.literal
        if done or lit is None or not lit.startswith("-") or lit == "-":
            operands.append(w)
            done = True  # perl's options end at its first operand (the program, or a file)
        elif lit == "--":
            done = True
        elif not lit.startswith("--"):
            letter, i = _in_place_cluster(lit, "eEIMm", i)
            in_place = in_place or letter == "i"
            code_given = code_given or letter in ("e", "E")
    if not in_place:
        return []
    return operands if code_given else operands[1:]


def _in_place_cluster(lit: str, takes_value: str, i: int) -> tuple[str, int]:
    """A short-option cluster of ``sed`` or ``perl`` (``-ni``, ``-i.bak``, ``-pe``): the letter that ends it,
    ``i`` (what follows is the backup's suffix) or one of ``takes_value`` ("" for neither), and the index of
    the next word, past the value when the letter ends the cluster (else the value is the cluster's rest)."""
    for k, ch in enumerate(lit[1:]):
        if ch == "i":
            return ch, i
        if ch in takes_value:
            return ch, i + 1 if k == len(lit) - 2 else i
    return "", i


def tar_options(args: Sequence[Word]) -> Parsed:
    """tar's options and operands, in either style."""
    words = list(args)
    first = words[0].literal if words else None
    if first and first.isalpha():  # the old style (`tar czf out.tgz .`): each letter an option, values after
        letters, rest = first, words[1:]
        words = []
        for ch in letters:
            words.append(Word((Part("glob", "-" + ch),)))
            if ch in _TAR_SHORT and rest:
                words.append(rest.pop(0))
        words += rest
    return options(words, _TAR_SHORT, _TAR_LONG)


COPIERS = frozenset({"cp", "mv", "ln", "install"})


def copy_options(name: str, args: Sequence[Word]) -> Parsed:
    """The options and operands of cp, mv, ln or install (``-t DIR``, install's ``-m MODE`` …)."""
    short = "tSmogZ" if name == "install" else "tS"
    return options(args, short, ("--target-directory", "--suffix", "--mode", "--owner", "--group"))


def tar_extracts(args: Sequence[Word]) -> tuple[list[Word | str], list[Word | str]] | None:
    """The archives (``-f``) and directories (``-C``) of a tar that extracts; None when it does not."""
    parsed = tar_options(args)
    if not parsed.has(*_TAR_EXTRACTS):
        return None
    return parsed.given("-f", "--file"), parsed.given("-C", "--directory")


def _tar(args: Sequence[Word]) -> list[Word | str]:
    parsed = tar_options(args)
    out: list[Word | str] = []
    if parsed.has(*_TAR_WRITES_ARCHIVE):
        out += [v for v in parsed.given("-f", "--file") if _local_file(v)]
    if parsed.has(*_TAR_EXTRACTS):
        out += parsed.given("-C", "--directory")
    return out


def _git(args: Sequence[Word]) -> list[Word | str]:
    i, given = global_options(args)
    chdir = [word for option, word in given if option == "-C"]  # git -C DIR: each a step from the one before
    if i >= len(args) or args[i].literal not in ("clone", "init", "config"):
        outputs = git_output(args[i].literal or "", args[i + 1 :]) if i < len(args) else []
        if not (chdir and outputs):
            return outputs
        # `git -C /tmp/r archive -o a.tar HEAD` writes /tmp/r/a.tar.
        return _from_chdir(chdir, [o if isinstance(o, Word) else Word((Part("glob", o),)) for o in outputs])
    sub = args[i].literal
    if sub == "config":
        return _git_config(args[i + 1 :], chdir)
    if sub == "init":
        parsed = options(args[i + 1 :], "b", ("--template", "--separate-git-dir", "--initial-branch"))
        made = parsed.operands[:1]
    else:
        parsed = options(args[i + 1 :], _GIT_CLONE_SHORT, _GIT_CLONE_LONG)
        made = parsed.operands[1:2]
    # Without -C the directory made is where the operand says (none: the turn's directory, or the remote's
    # name in it); with -C it is that far from -C's directory (`git -C /tmp/x init` makes /tmp/x/.git).
    return [*parsed.values.get("--separate-git-dir", []), *(_from_chdir(chdir, made) if chdir else made)]


def _git_config(args: Sequence[Word], chdir: list[Word]) -> list[Word | str]:
    """The file ``git config`` changes, when it changes one: ``~/.gitconfig`` (``--global``),
    ``/etc/gitconfig`` (``--system``), ``--file``'s; the repository's own (``--local``, the default) only
    when ``-C`` puts it elsewhere. A read (``--get…``, ``--list``, ``get``, ``list``, or a key alone) writes
    nothing."""
    parsed = options(args, "f", _GIT_CONFIG_VALUES)
    flags = parsed.flags
    verb = parsed.operands[0].literal if parsed.operands else None
    if verb in _GIT_CONFIG_VERBS:
        writes = _GIT_CONFIG_VERBS[verb]
    elif flags & _GIT_CONFIG_READS or any(f.startswith("--get") for f in flags):
        writes = False
    else:
        writes = bool(flags & _GIT_CONFIG_WRITES) or len(parsed.operands) >= 2
    if not writes:
        return []
    files = parsed.given("-f", "--file")
    if files:
        return files
    if "--global" in flags:
        return ["~/.gitconfig"]
    if "--system" in flags:
        return ["/etc/gitconfig"]
    return _from_chdir(chdir, []) if chdir else []  # the repository's .git/config: where -C points


_GIT_CONFIG_VALUES = ("--file", "--blob", "--type", "--default", "--comment", "--value")
_GIT_CONFIG_READS = frozenset({"--list", "-l", "--get-color", "--get-colorbool"})
_GIT_CONFIG_WRITES = frozenset(
    {
        "--add",
        "--unset",
        "--unset-all",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "-e",
        "--edit",
    }
)
# git 2.46's subcommands: whether each writes.
_GIT_CONFIG_VERBS = {
    "get": False,
    "list": False,
    "set": True,
    "unset": True,
    "rename-section": True,
    "remove-section": True,
    "edit": True,
}


def _from_chdir(chdir: list[Word], made: list[Word]) -> list[Word | str]:
    """The directory ``git -C …`` makes: the operand read from the -C directories, or the last of them when
    there is no operand. When a step is not a literal path, each -C directory and the operand are judged
    where they stand (a write in any of them is one outside if it is outside)."""
    steps = [w.literal for w in chdir] + [w.literal for w in made]
    if any(not s for s in steps):
        return [*chdir, *made]
    path = ""
    for step in steps:
        assert step is not None
        path = step if step.startswith(("/", "~")) or not path else path.rstrip("/") + "/" + step
    return [path]


def _local_file(value: Word | str) -> bool:
    text = value.text if isinstance(value, Word) else value
    return text != "-" and not remote_path(text)[0]
