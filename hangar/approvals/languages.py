"""How the other languages' interpreters get their program, for pipe-to-shell: Lua, Tcl, R, PowerShell, Deno
and Bun (``curl … | lua -``, ``irm URL | pwsh -c -``, ``deno run https://…``), and inline code that fetches
code and runs it (``python3 -c "exec(urlopen(URL).read())"``, ``pwsh -c "iex (irm URL)"``).

Each interpreter's options are read up to its program (what follows is the program's own arguments), with
the options that take a value skipped together with it. What :func:`source` gives is ``argv.program_source``'s
answer: ("code", None) for inline code, ("file", operand), ("stdin", None), or ("", None) if it runs no
program of its own (``deno fmt``, ``bun install``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Sequence

from .shell import Word

# A file that is the program's standard input: `bash /dev/stdin` reads its script from the pipe (argv.py's
# shells and these interpreters alike).
STDIN_FILES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
_STDIN = STDIN_FILES | {"-"}
# name: (the options that give inline code, the options that take a value); each reads its program from
# standard input when it is given none (or "-").
_PLAIN = {
    "lua": ({"-e"}, {"-e", "-l"}),
    "luajit": ({"-e"}, {"-e", "-l", "-j", "-O", "-b"}),
    "tclsh": (set(), {"-encoding"}),
    "Rscript": ({"-e", "--expr"}, {"-e", "--expr", "--default-packages"}),
}
_PWSH = frozenset({"pwsh", "powershell", "pwsh-preview"})
_PWSH_VALUES = frozenset(
    "-executionpolicy -ex -ep -workingdirectory -wd -configurationname -config -custompipename -inputformat -inf "
    "-if -outputformat -of -o -settingsfile -windowstyle -w -psconsolefile -version -v -mta -sta".split()
)
# deno's options whose value may be the next word (`--config deno.json`); the others take theirs with "=".
_DENO_VALUES = frozenset(
    {"--config", "-c", "--import-map", "--cert", "--location", "--seed", "--ext", "--v8-flags"}
)
_DENO_RUNS = frozenset({"run", "eval", "repl", "test", "bench", "serve", "task"})
_BUN_CODE = frozenset({"-e", "--eval", "-p", "--print"})
_BUN_VALUES = frozenset({"--cwd", "--config", "-c", "--preload", "-r", "--require", "--import", "--env-file"})
LANGUAGES = frozenset(_PLAIN) | _PWSH | {"deno", "bun"}
URL_RUNNERS = frozenset({"deno"})  # takes a URL for its script and fetches it (`deno run https://…/i.ts`)

# A way inline code fetches from the network (fetches_and_runs: with an evaluation, it runs what it fetched).
_FETCHES = re.compile(
    r"urlopen|urlretrieve|requests\.(?:get|post|put|patch|delete|head|request|Session)|"
    r"httpx\.(?:get|post|put|patch|delete|head|request|Client|AsyncClient)|http\.client|urllib3|aiohttp|axios|"
    r"\bfetch\s*\(|URI\.open|open-uri|Net::HTTP|LWP::Simple|"
    r"HTTP::Tiny|file_get_contents\s*\(\s*[\"']https?:|https?\.(?:get|request)\s*\(|\b(?:curl|wget)\s|"
    r"\b(?:iwr|irm|Invoke-WebRequest|Invoke-RestMethod)\b|DownloadString|DownloadFile|socket\.http|"
    r"\bsource\s*\(\s*[\"'](?:https?|ftp):",
    re.IGNORECASE,
)
_EVALUATES = re.compile(
    r"\b(?:exec|eval|execfile|instance_eval|loadstring|dofile|iex|Invoke-Expression)\b|\bnew\s+Function\b|"
    r"\bload\s*\(|\bsystem\s*\(|\bos\.(?:system|popen|exec\w*)\b|\bsubprocess\.|child_process|"
    r"\bsource\s*\(|\|\s*(?:ba|z|da|k)?sh\b",
    re.IGNORECASE,
)


# Asked twice of the same code (fetches_and_runs, inline_code); the search costs ~0.4 µs a character.
@functools.lru_cache(maxsize=16)
def fetches(code: str) -> bool:
    """Whether inline code names a way to fetch from the network."""
    return _FETCHES.search(code) is not None


def fetches_and_runs(code: str) -> bool:
    """Whether inline code both fetches from the network and evaluates or runs something."""
    return fetches(code) and _EVALUATES.search(code) is not None


def _program_at(args: Sequence[Word], code: Collection[str], values: Collection[str]) -> int | None:
    """Where the program starts in ``args`` (the first word after the leading options, the values of those
    in ``values`` skipped), or None when one of them (in ``code``; ``-eCODE`` too) gives inline code."""
    i = 0
    while i < len(args):
        lit = args[i].literal
        if lit is None or lit == "-" or not lit.startswith("-"):
            break
        i += 1
        if lit == "--":
            break
        key = lit.split("=", 1)[0]
        if key in code or any(lit.startswith(c) and len(lit) > 2 for c in code if len(c) == 2):
            return None
        if key in values and "=" not in lit:
            i += 1
    return i


def _operand(words: Sequence[Word]) -> tuple[str, Word | None]:
    if not words or words[0].literal in _STDIN:
        return ("stdin", None)
    return ("file", words[0])


def source(name: str, args: Sequence[Word]) -> tuple[str, Word | None]:
    """How ``name args`` gets its program, for the interpreters in ``LANGUAGES``."""
    if name in _PLAIN:
        at = _program_at(args, *_PLAIN[name])
        return ("code", None) if at is None else _operand(args[at:])
    if name in _PWSH:
        return _pwsh(args)
    if name == "deno":
        return _deno(args)
    if name == "bun":
        return _bun(args)
    return ("", None)


def _pwsh(args: Sequence[Word]) -> tuple[str, Word | None]:
    """``pwsh -c CODE`` and ``-EncodedCommand`` are inline code, ``-c -`` and ``-File -`` (or nothing) read
    standard input, ``-File F`` or a first operand is a script. Its option names are case-insensitive and
    may be cut short (``-c``, ``-com``, ``-f``)."""
    i = 0
    while i < len(args):
        lit = args[i].literal
        if lit is None or not lit.startswith("-") or lit == "-":
            return _operand(args[i:])
        key = lit.lower().split(":", 1)[0]
        i += 1
        if "-command".startswith(key) and len(key) > 1:
            rest = args[i : i + 1]
            return ("stdin", None) if rest and rest[0].literal == "-" else ("code", None)
        if key in ("-encodedcommand", "-e", "-ec", "-enc"):
            return ("code", None)
        if "-file".startswith(key) and len(key) > 1:
            return _operand(args[i:])
        if key in _PWSH_VALUES:
            i += 1
    return ("stdin", None)


def _deno(args: Sequence[Word]) -> tuple[str, Word | None]:
    """``deno eval CODE`` is inline code; ``deno run F`` (a path or a URL; ``-`` reads standard input) and
    ``deno F`` run a script; the other subcommands (fmt, lint, install …) run none."""
    words = list(args)
    if not words or words[0].literal is None:
        return ("", None)
    verb = words[0].literal
    if verb == "eval":
        return ("code", None)
    if verb in _DENO_RUNS:
        words = words[1:]
    elif verb.startswith("-") or ("/" not in verb and "." not in verb):
        return ("", None)
    at = _program_at(words, (), _DENO_VALUES)
    rest = words[at:] if at is not None else []
    return _operand(rest) if rest else ("", None)


def _bun(args: Sequence[Word]) -> tuple[str, Word | None]:
    """``bun -e CODE`` (``--eval``, ``-p``, ``--print``) is inline code; ``bun run -`` or ``bun -`` read
    standard input; ``bun F`` and ``bun run F`` run a script (``bun run NAME`` may be a package script; as
    a file, it is followed like one)."""
    at = _program_at(args, _BUN_CODE, _BUN_VALUES)
    if at is None:
        return ("code", None)
    words = list(args[at:])
    if words and words[0].literal == "run":
        words = words[1:]
        while words and (words[0].literal or "").startswith("-") and words[0].literal != "-":
            words = words[1:]
    elif not words or (
        words[0].literal is not None
        and words[0].literal != "-"
        and "/" not in words[0].literal
        and "." not in words[0].literal
    ):
        return ("", None)  # `bun install`, `bun x …`: no script of its own
    return _operand(words) if words else ("", None)
