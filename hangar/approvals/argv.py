"""What a simple command actually runs: wrappers and environment prefixes taken off (``unwrap``), a
program given by path known by its name (``program``), GNU-style options (``options``), how an interpreter
gets its program (``program_source``), and the command as the rules see it (:class:`Cmd`)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from . import languages
from .languages import STDIN_FILES
from .shell import _ASSIGN as _ASSIGNMENT_START
from .shell import Command, Redirect, Word, split_words

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish"})
DOWNLOADERS = frozenset({"curl", "wget"})
# What fetches a URL to its standard output, for pipe-to-shell: curl and wget, and HTTPie's clients
# (`http URL | sh`, `xh URL | bash`), which print a response's body when piped.
FETCHERS = DOWNLOADERS | {"http", "https", "xh", "xhs"}
_PYTHON = re.compile(r"^python[0-9.]*$")


def program(word: Word) -> str:
    """The program a command word names: ``/usr/bin/sudo`` is ``sudo``; an expansion is ``""``."""
    lit = word.literal
    if lit is None:
        return ""
    return lit.rsplit("/", 1)[-1]


def shown(words: Sequence[Word], limit: int = 160) -> str:
    """Words as a person reads them: quoted again only where a literal holds whitespace (or is empty)."""
    text = " ".join(
        shlex.quote(w.text) if w.literal is not None and (not w.text or re.search(r"\s", w.text)) else w.text
        for w in words
    )
    return shown_cut(text, limit)


# ---------------------------------------------------------------------------------------------------
# options


@dataclass
class Parsed:
    operands: list[Word] = field(default_factory=list)
    values: dict[str, list[Word | str]] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)

    def has(self, *names: str) -> bool:
        return any(n in self.flags or n in self.values for n in names)

    def given(self, *names: str) -> list[Word | str]:
        """The values of these options, in the order of the names (each a word, or a string cut from ``-ofile``)."""
        return [v for n in names for v in self.values.get(n, [])]

    def texts(self, *names: str) -> list[str]:
        """The values of these options as written (a separate word's text, or the string cut from ``-ofile``)."""
        return [v if isinstance(v, str) else v.text for n in names for v in self.values.get(n, [])]


def options(args: Sequence[Word], short_args: str = "", long_args: Iterable[str] = ()) -> Parsed:
    """GNU-style option parsing: options anywhere until ``--``; ``-abc`` clusters; ``--name=value``.

    ``short_args`` are the letters that take a value, ``long_args`` the long options that do.
    Values are kept as words (a separate argument) or strings (``-ofile``, ``--output=file``).
    """
    long_set = set(long_args)
    out = Parsed()
    i = 0
    done = False
    while i < len(args):
        w = args[i]
        i += 1
        lit = w.literal
        if done or lit is None or not lit.startswith("-") or lit == "-":
            out.operands.append(w)
            continue
        if lit == "--":
            done = True
            continue
        if lit.startswith("--"):
            name, eq, value = lit.partition("=")
            if eq:
                out.values.setdefault(name, []).append(value)
            elif name in long_set and i < len(args):
                out.values.setdefault(name, []).append(args[i])
                i += 1
            else:
                out.flags.add(name)
            continue
        letters = lit[1:]
        for k, ch in enumerate(letters):
            if ch in short_args:
                rest = letters[k + 1 :]
                if rest:
                    out.values.setdefault("-" + ch, []).append(rest)
                elif i < len(args):
                    out.values.setdefault("-" + ch, []).append(args[i])
                    i += 1
                else:
                    out.flags.add("-" + ch)
                break
            out.flags.add("-" + ch)
    return out


# ---------------------------------------------------------------------------------------------------
# wrappers: what actually runs


def _skip_options(args: list[Word], short_args: str, long_args: Iterable[str] = ()) -> list[Word]:
    """Drop leading options (with their values); what is left starts with the wrapped command."""
    long_set = set(long_args)
    i = 0
    while i < len(args):
        lit = args[i].literal
        if lit is None or not lit.startswith("-") or lit == "-":
            break
        i += 1
        if lit == "--":
            break
        if lit.startswith("--"):
            if "=" not in lit and lit in long_set:
                i += 1
            continue
        letters = lit[1:]
        for k, ch in enumerate(letters):
            if ch in short_args:
                if k == len(letters) - 1:
                    i += 1
                break
    return args[i:]


def _env(args: list[Word]) -> list[Word]:
    out: list[Word] = []
    i = 0
    while i < len(args):
        lit = args[i].literal
        if lit is None or not lit.startswith("-"):
            break
        i += 1
        if lit == "--":
            break
        if lit in ("-u", "-C", "-P", "--unset", "--chdir"):
            i += 1
        elif lit in ("-S", "--split-string") and i < len(args):
            out = split_words(args[i].text)
            i += 1
        elif lit.startswith("--split-string="):
            out = split_words(lit.partition("=")[2])
        elif lit.startswith("-S") and len(lit) > 2:
            out = split_words(lit[2:])
    rest = out + args[i:]
    return rest[_assignments(rest) :]


def _assignments(words: Sequence[Word]) -> int:
    """How many of the words, from the first, are assignments (``FOO=1``)."""
    k = 0
    while k < len(words) and words[k].is_assignment:
        k += 1
    return k


def _timeout(args: list[Word]) -> list[Word]:
    rest = _skip_options(args, "sk", ("--signal", "--kill-after"))
    return rest[1:]  # the duration


def _command(args: list[Word]) -> list[Word]:
    rest = _skip_options(args, "")
    flags = {w.literal for w in args[: len(args) - len(rest)]}
    if any(f and ("v" in f or "V" in f) for f in flags if f != "--"):
        return []  # command -v: a lookup, nothing runs
    return rest


# What may follow `coproc NAME`: bash takes a NAME only before a compound command.
_COMPOUND = frozenset({"{", "while", "until", "if", "for", "select", "case", "[["})
# The reserved words that open a compound command and are not part of what it runs first (the parser skips
# them at a command's start; after coproc they are its words).
_OPENERS = frozenset({"{", "while", "until", "if", "!"})


def _coproc(args: list[Word]) -> list[Word]:
    """``coproc [NAME] command``: the command, run in the background like any other."""
    rest = args[1:] if len(args) > 1 and args[1].literal in _COMPOUND else args
    while rest and rest[0].literal in _OPENERS:
        rest = rest[1:]
    return rest


_WRAPPERS: dict[str, Callable[[list[Word]], list[Word]]] = {
    "command": _command,
    "coproc": _coproc,  # a reserved word: coproc rm -rf / runs rm
    "builtin": lambda a: a,
    "env": _env,
    "nice": lambda a: _skip_options(a, "n", ("--adjustment",)),
    "timeout": _timeout,
    "xargs": lambda a: _skip_options(
        a,
        "adEILnPs",
        ("--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars", "--max-lines"),
    ),
    "nohup": lambda a: _skip_options(a, ""),
    "exec": lambda a: _skip_options(a, "a"),
    "time": lambda a: _skip_options(a, "fo", ("--format", "--output")),
    "stdbuf": lambda a: _skip_options(a, "ioe", ("--input", "--output", "--error")),
    "ionice": lambda a: _skip_options(a, "cnpPtu", ("--class", "--classdata", "--pid", "--pgid", "--uid")),
    "setsid": lambda a: _skip_options(a, ""),
    "busybox": lambda a: a,  # busybox rm -rf / is rm
}


def unwrap_all(words: Sequence[Word]) -> tuple[list[Word], tuple[str, ...]]:
    """The command that actually runs (env prefixes and wrappers taken off; ``[]``: nothing runs),
    and the wrappers that were taken off, outermost first."""
    rest = list(words)
    if rest:
        parts = rest[0].parts
        if len(parts) == 1 and parts[0].kind == "glob" and not _ASSIGNMENT_START.match(parts[0].text):
            name = parts[0].text.rsplit("/", 1)[-1]  # program(), inlined for the usual first word
            if name not in _WRAPPERS:
                return rest, ()  # no assignment, no wrapper: the words are the command (most commands)
    wrappers: list[str] = []
    for _ in range(32):
        rest = rest[_assignments(rest) :]
        if not rest:
            break
        name = program(rest[0])
        wrapper = _WRAPPERS.get(name)
        if wrapper is None:
            break
        wrappers.append(name)
        rest = wrapper(rest[1:])
    return rest, tuple(wrappers)


def xargs_replace(words: Sequence[Word], kept: int) -> str | None:
    """The string ``xargs`` replaces with each line it reads (``-I R``, ``-iR``, ``-i``, ``--replace[=R]``;
    ``{}`` when none is given) in the command it runs, or None when it appends what it reads instead.
    ``words``: a command as written (``Cmd.words``), whose last ``kept`` are the command its wrappers run
    (``Cmd.argv``): xargs' options are the words between it and those."""
    end = len(words) - kept
    start = next((i + 1 for i in range(end) if program(words[i]) == "xargs"), None)
    if start is None:
        return None
    replace: str | None = None
    i = start
    while i < end:
        lit = words[i].literal or ""
        i += 1
        if lit == "--replace":
            replace = "{}"
        elif lit.startswith("--replace="):
            replace = lit.partition("=")[2]
        elif lit.startswith("-") and not lit.startswith("--"):
            for k, ch in enumerate(lit[1:], 1):
                if ch in "Ii":
                    replace = lit[k + 1 :] or ("{}" if ch == "i" else None)
                    if replace is None and i < end:
                        replace, i = words[i].literal or "{}", i + 1
                    break
                if ch in "adELnPs":
                    break  # the rest of the cluster is that option's value
    return replace or None


def unwrap(words: Sequence[Word]) -> list[Word]:
    """The command that actually runs: env prefixes and wrappers taken off (``[]``: nothing runs)."""
    return unwrap_all(words)[0]


@dataclass
class Cmd:
    """A simple command as it runs: ``argv`` after unwrapping; the redirections of the whole command."""

    name: str
    argv: list[Word]
    redirects: list[Redirect]
    words: list[Word]  # every word as written, wrappers and assignments included
    wrappers: tuple[str, ...] = ()  # what was taken off: ("timeout", "xargs")

    @property
    def args(self) -> list[Word]:
        return self.argv[1:]

    def shown(self) -> str:
        text = shown(self.argv or self.words)
        for r in self.redirects:
            target = r.target.text if r.target is not None else ""
            text += f" {r.fd or ''}{r.op}{'' if r.op in ('>&', '<&') else ' '}{target}"
        return shown_cut(text)


def _cmd(command: Command) -> Cmd:
    argv, wrappers = unwrap_all(command.words)
    name = program(argv[0]) if argv else ""
    return Cmd(name, argv, command.redirects, command.assigns + command.words, wrappers)


def program_source(name: str, args: Sequence[Word]) -> tuple[str, Word | None]:
    """How an interpreter gets its program: ("c", script) for ``sh -c script``, ("code", …) for
    another language's inline code, ("file", operand), ("stdin", None), or ("", None) if not one."""
    if name in SHELLS:
        i = 0
        c_mode = s_mode = False
        while i < len(args):
            lit = args[i].literal
            if lit is None:
                break
            if lit in ("-", "--"):
                i += 1
                break
            if lit.startswith("--"):
                i += 2 if lit in ("--rcfile", "--init-file") else 1
                continue
            if len(lit) > 1 and lit[0] in "-+":
                letters = lit[1:]
                c_mode = c_mode or (lit[0] == "-" and "c" in letters)
                s_mode = s_mode or (lit[0] == "-" and "s" in letters)
                i += 2 if ("o" in letters or "O" in letters) else 1
                continue
            break
        operands = list(args[i:])
        if c_mode:
            return ("c", operands[0] if operands else None)
        if s_mode or not operands or operands[0].literal in STDIN_FILES:
            return ("stdin", None)
        return ("file", operands[0])
    if _PYTHON.match(name) or name in ("perl", "ruby", "node", "nodejs", "php"):
        code_flags = {"python": "cm"}.get("python" if _PYTHON.match(name) else "", "eEpr")
        i = 0
        while i < len(args):
            lit = args[i].literal
            if lit is None or not lit.startswith("-") or lit == "-":
                break
            if lit == "--":
                i += 1
                break
            if lit.startswith("--"):
                if lit in ("--eval", "--print"):
                    return ("code", None)
                i += 1
                continue
            if any(ch in code_flags for ch in lit[1:]):
                return ("code", None)
            i += 1
        operands = list(args[i:])
        if not operands or operands[0].literal == "-" or operands[0].literal in STDIN_FILES:
            return ("stdin", None)
        return ("file", operands[0])
    if name in ("source", ".") and args and args[0].literal in STDIN_FILES:
        return ("stdin", None)  # `… | source /dev/stdin`
    if name in AWKS and _awk_runs_input(args):
        return ("stdin", None)  # `… | awk '{system($0)}'`: each line it reads is run as a command
    if name in languages.LANGUAGES:
        return languages.source(name, args)  # `… | lua -`, `pwsh -c -`, `deno run URL`
    return ("", None)


AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
# An awk program that runs the lines it reads: system($0) or system($2 …), `$0 | getline`, `print | "sh"`.
_AWK_RUNS = re.compile(
    r"system\s*\(\s*\$|\$[\w(]*\)?\s*\|&?\s*getline|\|&?\s*\"(?:/usr)?(?:/bin/)?(?:sh|bash|zsh|dash|ksh|ash)\b"
)


def _awk_runs_input(args: Sequence[Word]) -> bool:
    """Whether awk's program (its first operand, or each ``-e``/``--source`` text) runs its input."""
    longs = ("--file", "--field-separator", "--assign", "--exec", "--include", "--load", "--source")
    parsed = options(args, "efFvEil", longs)
    texts = parsed.texts("-e", "--source")
    if not texts and not parsed.has("-f", "--file", "-E", "--exec") and parsed.operands:
        texts.append(parsed.operands[0].text)
    return any(_AWK_RUNS.search(t) for t in texts)


def shown_cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_DOWNLOAD_OUTPUTS = {
    # curl -O writes the URL's file name into the working directory: nothing to check.
    "curl": ("-o", "--output", "--output-dir"),
    "wget": (
        "-O",
        "--output-document",
        "-P",
        "--directory-prefix",
        "-o",
        "--output-file",
        "-a",
        "--append-output",
    ),
    "aria2c": ("-d", "--dir", "-o", "--out"),
}
_CURL_SHORT = "AbcCdDeEFHKmoPQrtTuUwxXYyz"
_CURL_LONG = (
    "--data --data-raw --data-binary --data-urlencode --data-ascii --json --form --form-string --header "
    "--proxy-header --output --output-dir --user --request --user-agent --referer --cookie --cookie-jar "
    "--upload-file --proxy --preproxy --max-time --connect-timeout --write-out --config --cert --key --cacert "
    "--capath --cert-type --key-type --range --continue-at --retry --retry-delay --retry-max-time --resolve "
    "--connect-to --time-cond --limit-rate --proxy-user --url --oauth2-bearer --interface --dns-servers "
    "--dump-header --stderr --trace --trace-ascii --max-filesize --max-redirs --speed-limit --speed-time "
    "--telnet-option --quote --ftp-port --expect100-timeout --keepalive-time --local-port --noproxy --pass "
    "--unix-socket --abstract-unix-socket --socks4 --socks4a --socks5 --socks5-hostname --doh-url --aws-sigv4 "
    "--variable --url-query --hsts --alt-svc --etag-save --etag-compare --ciphers --tls-max --pinnedpubkey "
    "--proto --proto-redir --proto-default --mail-from --mail-rcpt --mail-auth --netrc-file --create-file-mode"
).split()
_WGET_SHORT = "OoaePUTtwQlADRXIiB"
_WGET_LONG = (
    "--output-document --output-file --append-output --execute --directory-prefix --user-agent --timeout "
    "--tries --wait --quota --level --accept --reject --domains --exclude-directories --include-directories "
    "--input-file --base --header --post-data --post-file --body-data --body-file --method --user --password "
    "--http-user --http-password --proxy-user --proxy-password --referer --load-cookies --save-cookies "
    "--ca-certificate --ca-directory --certificate --private-key --bind-address --dns-timeout "
    "--connect-timeout --read-timeout --limit-rate --waitretry --config --default-page"
).split()
