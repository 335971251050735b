"""The deny-risky rules and the taint gate, applied to a shell command.

A command is parsed (``shell.py``) into pipelines of simple commands. Each simple command is looked at
as what actually runs: environment prefixes (``FOO=1 git push -f``) and wrappers (``command``, ``env``,
``nice``, ``timeout``, ``xargs``, ``nohup``, ``exec``, ``time``, ``stdbuf``, ``ionice``, ``setsid``,
``builtin``, ``busybox``) are taken off, a program given by path (``/usr/bin/sudo``) is known by its
name, and the rules look inside what a command would run in turn: ``bash -lc '…'`` and ``sh -c "…"``
(recursively), ``eval``, ``$(…)``, backquotes, ``<(…)``, here-documents fed to a shell, ``find -exec``.

This is a guard rail against mistakes, not a sandbox: paths are resolved against the turn's working
directory (``paths.py``), so ``cd /elsewhere && rm -r x`` gets past the rules, as does anything that
builds a command at run time in a way the rules cannot read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from . import plain
from .paths import (
    MAYBE_SECRET,
    UNKNOWN,
    Where,
    credential,
    dev_kind,
    expand_string,
    host_of,
    is_sandbox_host,
    locate,
    normalize,
    relative_safe,
    render,
    turn_places,
    within,
)
from .plain import PlainCommand
from .shell import (
    _ASSIGN as _ASSIGNMENT_START,
)
from .shell import (
    WRITE_OPS,
    Command,
    Part,
    Pipeline,
    Redirect,
    ShellSyntaxError,
    Word,
    double_quoted,
    parse,
    split_words,
)

# Rule ids, most serious first: when a call trips several, the first in this order is reported.
RULE_ORDER: tuple[str, ...] = (
    "system",
    "sudo",
    "pipe-to-shell",
    "rm-recursive",
    "force-push",
    "branch-delete",
    "credentials",
    "write-outside",
    "nesting",
    "taint-push",
    "taint-network",
    "taint-mcp-write",
)

MAX_DEPTH = 16  # shells inside shells the rules follow; deeper nesting is flagged ("nesting")
# The longest shell command the rules read (characters); a longer one is flagged ("nesting"). Reading is
# linear in the length: on a loaded machine ~0.2 µs a character for a script of plain commands (plain.py),
# ~1.5 µs for one the lexer reads (quotes, expansions), so a megabyte could hold the operator a second.
MAX_COMMAND = 65_536

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish"})
DOWNLOADERS = frozenset({"curl", "wget"})
PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudoedit"})
_SYSTEM = frozenset(
    {"mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "sgdisk"}
    | {"shutdown", "reboot", "halt", "poweroff"}
)
_SYSTEMCTL_POWER = frozenset({"poweroff", "reboot", "halt", "kexec"})
_NETCAT = frozenset({"nc", "ncat", "netcat"})
_PYTHON = re.compile(r"^python[0-9.]*$")
_TEXT = ("lit", "glob")  # the kinds of Part that are plain text
# The programs write_targets() knows the output files of.
_WRITERS = frozenset({"tee", "cp", "mv", "ln", "install", "touch", "mkdir", "truncate", "dd"}) | DOWNLOADERS
_FD = re.compile(r"[0-9]+-?|-")  # the target of >& or <& that is a file descriptor, not a file


@dataclass(frozen=True)
class Finding:
    """A rule that matched: its id, what it saw (for people and the agent), whether it is taint's."""

    rule: str
    what: str
    taint: bool = False

    @property
    def reason(self) -> str:
        return f"{self.what} after reading untrusted content" if self.taint else self.what


def first(findings: Iterable[Finding]) -> Finding | None:
    """The finding to report: the most serious rule, then the earliest."""
    ranked = sorted(enumerate(findings), key=lambda f: (RULE_ORDER.index(f[1].rule), f[0]))
    return ranked[0][1] if ranked else None


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


_WRAPPERS: dict[str, Callable[[list[Word]], list[Word]]] = {
    "command": _command,
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
        if s_mode or not operands:
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
        if not operands or operands[0].literal == "-":
            return ("stdin", None)
        return ("file", operands[0])
    return ("", None)


# ---------------------------------------------------------------------------------------------------
# the analysis


class ShellAnalysis:
    """Walks a command and records what the rules find (``findings``)."""

    def __init__(self, where: Where, tainted: bool) -> None:
        self.where = where
        self.tainted = tainted
        self.findings: list[Finding] = []
        self.names: set[str] = set()  # every program run anywhere in the command
        self.unparsed = False  # some of it could only be scanned token by token
        self.walked: dict[str, frozenset[str]] = {}  # source → the programs it runs
        self.stack: list[set[str]] = []  # the programs of each source being walked
        self.secrets: dict[str, str | None] = {}  # rendered text → the secret it names (secret_kind)
        # Redirection targets (rendered, written to) whose checks found nothing: they depend on the target
        # and the turn's places alone, so the next command redirecting there needs no second look.
        self.quiet_targets: set[tuple[str, bool]] = set()
        self.clean: set[str] = set()  # plain words known to name no secret (ShellAnalysis.harmless)
        self.relative_safe = relative_safe(where)  # most words need no credential check (secret_kind)

    def add(self, rule: str, what: str) -> None:
        taint = rule.startswith("taint-")
        if taint and not self.tainted:
            return
        self.findings.append(Finding(rule, what, taint))

    # walking

    def script(self, src: str, depth: int = 0) -> frozenset[str]:
        """Walk ``src``; the names of the programs it runs, nested ones included.

        Each distinct source is walked once (its findings are already recorded the next time it turns
        up), which keeps ``bash -c "$(bash -c "$(…)")"`` linear rather than exponential."""
        cached = self.walked.get(src)
        if cached is not None:
            if self.stack:
                self.stack[-1].update(cached)
            return cached
        self.walked[src] = frozenset()
        if depth > MAX_DEPTH:
            self.add(
                "nesting", f"shells nested more than {MAX_DEPTH} levels deep, which hangar does not follow"
            )
            return frozenset()
        plain_pipelines = plain.read(src)
        try:
            pipelines = parse(src).pipelines if plain_pipelines is None else []
        except ShellSyntaxError:
            # Best effort: what is open is closed at the end, and, in case the parser misread where a
            # quote starts, every token is scanned once more with the quote characters taken out.
            self.unparsed = True
            pipelines = parse(src, lenient=True).pipelines
            pipelines += parse(re.sub(r"[\"'`]", " ", src), lenient=True).pipelines
        self.stack.append(set())
        try:
            if plain_pipelines is not None:
                self.plain_script(plain_pipelines, depth)
            for pipeline in pipelines:
                self.pipeline(pipeline, depth)
        finally:
            names = frozenset(self.stack.pop())
        self.walked[src] = names
        if self.stack:
            self.stack[-1].update(names)
        return names

    def plain_script(self, pipelines: list[list[PlainCommand]], depth: int) -> None:
        """Walk a plain script (``plain.py``): each pipeline :meth:`harmless` clears is done with its words
        as strings; any other is made into the parser's objects and walked as such."""
        for stages in pipelines:
            if not self.harmless(stages):
                self.walk(plain.pipeline(stages), depth)

    def pipeline(self, pipeline: Pipeline, depth: int) -> None:
        stages = plain.stages(pipeline)  # its words as strings, when all of them are plain text
        if stages is None or not self.harmless(stages):
            self.walk(pipeline, depth)

    def harmless(self, stages: list[PlainCommand]) -> bool:
        """Whether no rule can flag this pipeline of plain commands; if so, its programs are recorded.

        No rule can flag a command when it runs a program no rule or interpreter looks at (not in
        ``_PLAIN_SKIPS``, nor a wrapper), none of its words names a secret and each redirection is quiet
        (:meth:`quiet_redirect`): :meth:`walk` would find nothing in it but its name. So the findings, in
        their order, are what walking every pipeline would give."""
        secrets = self.secrets
        clean = self.clean
        quiet = self.quiet_targets
        names: list[str] = []
        for assigns, words, redirects in stages:
            if words:
                # The first word is never an assignment: the parser took those as the command's assigns.
                name = words[0].rpartition("/")[2]
                if name in _PLAIN_SKIPS or name.startswith(("mkfs", "python")):
                    return False
                names.append(name)
                if not clean.issuperset(words) and not self.no_secret(words):
                    return False
            if assigns and not self.no_secret(assigns):
                return False
            for op, _, target in redirects:
                if secrets.get(target, "") is None and (target, op in WRITE_OPS) in quiet:
                    continue  # the same redirection as before in this script (`>> log.txt`)
                if not self.quiet_redirect(op, target):
                    return False
        self.names.update(names)
        self.stack[-1].update(names)
        return True

    def no_secret(self, words: list[str]) -> bool:
        """None of these plain words names a secret (the checks cached in ``secrets``)."""
        secrets = self.secrets
        for w in words:
            kind = secrets.get(w, "")
            if kind == "":
                kind = secrets[w] = self.secret_kind(w)
            if kind is not None:
                return False
            self.clean.add(w)
        return True

    def quiet_redirect(self, op: str, target: str) -> bool:
        """A plain redirection that :meth:`files` finds nothing in (False: it may, and it is to look)."""
        if op in ("<<<", "<<", "<<-") or (op in (">&", "<&") and _FD.fullmatch(target)):
            return True
        kind = self.secrets.get(target, "")
        if kind == "":
            kind = self.secrets[target] = self.secret_kind(target)
        if kind is not None:
            return False
        key = (target, op in WRITE_OPS)
        if key in self.quiet_targets:
            return True
        path = locate(target, self.where)
        dev = dev_kind(path) if path is not None else None
        if dev == "network":
            return False
        if op in WRITE_OPS and (
            path is None or dev == "device" or (dev is None and not writable(path, self.where))
        ):
            return False
        self.quiet_targets.add(key)
        return True

    def walk(self, pipeline: Pipeline, depth: int) -> None:
        cmds: list[Cmd] = []
        for command in pipeline.commands:
            self.nested(command, depth)
            cmds.append(_cmd(command))
        # A download piped into something that reads its program from stdin, for each such download: which
        # commands have a reader after them is known in one pass from the end.
        reader_after = False
        piped = 0
        for cmd in reversed(cmds):
            if reader_after and cmd.name in DOWNLOADERS:
                piped += 1
            reader_after = reader_after or program_source(cmd.name, cmd.args)[0] == "stdin"
        if piped:
            text = shown_cut(" | ".join(c.shown() for c in cmds))
            for _ in range(piped):
                self.add("pipe-to-shell", f"pipes a download into a shell: `{text}`")
        for cmd in cmds:
            self.command(cmd, depth)

    def nested(self, command: Command, depth: int) -> None:
        """Walk what the command's expansions run: $(…), backquotes, <(…), unquoted here-documents."""
        words = command.assigns + command.words + [r.target for r in command.redirects if r.target]
        for word in words:
            parts = word.parts
            if len(parts) == 1 and parts[0].kind in _TEXT:
                continue  # the usual word, plain text: it runs nothing
            for src in word.nested:
                self.script(src, depth + 1)
        for r in command.redirects:
            if r.heredoc is not None and not r.heredoc.quoted:
                for part in double_quoted(r.heredoc.body):
                    if part.kind in ("cmd", "arith"):
                        self.script(part.inner, depth + 1)

    def downloads(self, sources: Iterable[str], depth: int) -> bool:
        """Whether any of these (substituted) commands runs curl or wget."""
        return any(self.script(src, depth + 1) & DOWNLOADERS for src in sources)

    def command(self, cmd: Cmd, depth: int) -> None:
        name, args = cmd.name, cmd.args
        if name:
            self.names.add(name)
            if self.stack:
                self.stack[-1].add(name)
        self.interpreters(cmd, depth)
        if name == "find":
            self.find(cmd, depth)
        self.system(cmd)
        if name in PRIVILEGE:
            self.add("sudo", f"runs a command as another user: `{cmd.shown()}`")
        if name == "rm":
            self.rm(cmd)
        if name == "git":
            self.git(cmd)
        if name == "gh":
            self.gh(args, cmd)
        self.files(cmd)
        self.network(cmd)

    def interpreters(self, cmd: Cmd, depth: int) -> None:
        """Follow what a shell (or eval, or source) runs; catch a download handed to one."""
        name, args = cmd.name, cmd.args
        mode, operand = program_source(name, args)
        if not mode and name not in ("eval", "source", "."):
            return  # runs nothing of its own
        piped = f"pipes a download into a shell: `{cmd.shown()}`"
        if mode == "c" and operand is not None:
            self.script(operand.text, depth + 1)
            if self.downloads(operand.nested, depth):
                self.add("pipe-to-shell", piped)
        elif mode == "file" and operand is not None:
            if self.downloads(operand.nested, depth):
                self.add("pipe-to-shell", piped)
        elif mode == "stdin":
            for r in cmd.redirects:
                if r.op == "<<<" and r.target is not None:
                    if name in SHELLS:
                        self.script(r.target.text, depth + 1)
                    if self.downloads(r.target.nested, depth):
                        self.add("pipe-to-shell", piped)
                elif r.heredoc is not None and name in SHELLS:
                    self.script(r.heredoc.body, depth + 1)
                elif r.op == "<" and r.target is not None and self.downloads(r.target.nested, depth):
                    self.add("pipe-to-shell", piped)
        if name == "eval" and args:
            self.script(" ".join(w.text for w in args), depth + 1)
            if self.downloads((src for w in args for src in w.nested), depth):
                self.add("pipe-to-shell", piped)
        if name in ("source", ".") and args and self.downloads(args[0].nested, depth):
            self.add("pipe-to-shell", piped)

    # rules

    def system(self, cmd: Cmd) -> None:
        name, args = cmd.name, cmd.args
        hit = (
            name.startswith("mkfs")
            or name in _SYSTEM
            or (name in ("init", "telinit") and bool(args) and args[0].literal in ("0", "6"))
            or (name == "systemctl" and any(w.literal in _SYSTEMCTL_POWER for w in args))
        )
        if hit:
            self.add("system", f"system command: `{cmd.shown()}`")

    def rm(self, cmd: Cmd) -> None:
        parsed = options(cmd.args)
        if not parsed.has("-r", "-R", "--recursive"):
            return
        for target in parsed.operands:
            self.deletes(target, cmd, whole_tree=True)
        if "xargs" in cmd.wrappers:
            self.add(
                "rm-recursive",
                f"recursive delete of paths xargs reads, which hangar cannot see: `{cmd.shown()}`",
            )

    def deletes(self, target: Word, cmd: Cmd, *, whole_tree: bool) -> None:
        """A recursive delete of ``target``: fine strictly inside the working tree, flagged otherwise.

        ``whole_tree`` False (``find . -name x -delete``): the working tree itself is fine, since the
        expression picks what goes."""
        cwd = normalize(self.where.cwd or "/", self.where)
        rendered = render(target, self.where)
        path = locate(rendered, self.where)
        if path is None:
            what = f"a path hangar cannot resolve ({target.text or '“”'})"
        elif not within(path, cwd):
            what = (
                f"{path}, which holds the working tree"
                if within(cwd, path)
                else f"a path outside the working tree ({path})"
            )
        elif path == cwd:
            if not whole_tree:
                return
            what = "the working tree"
        elif whole_tree and target.has_glob and _matches_all(path[len(cwd) :].lstrip("/").split("/")[0]):
            what = "everything in the working tree"
        else:
            return
        self.add("rm-recursive", f"recursive delete of {what}: `{cmd.shown()}`")

    def find(self, cmd: Cmd, depth: int) -> None:
        args = cmd.args
        i = 0
        while i < len(args) and (
            args[i].literal in ("-H", "-L", "-P", "-D") or args[i].text.startswith("-O")
        ):
            i += 2 if args[i].literal == "-D" else 1
        starts: list[Word] = []
        while i < len(args):
            t = args[i].text
            if t.startswith("-") or t in ("(", "!", ")", ","):
                break
            starts.append(args[i])
            i += 1
        deletes = filters = False
        expr = args[i:]
        j = 0
        while j < len(expr):
            lit = expr[j].literal or ""
            j += 1
            if lit == "-delete":
                deletes = True
            elif lit in ("-exec", "-execdir", "-ok", "-okdir"):
                run: list[Word] = []
                while j < len(expr) and expr[j].literal not in (";", "+"):
                    run.append(expr[j])
                    j += 1
                j += 1
                argv = unwrap(run)
                sub = Cmd(program(argv[0]) if argv else "", argv, [], run)
                if sub.name == "rm":
                    deletes = True
                self.command(sub, depth + 1)
            elif lit in ("-maxdepth", "-mindepth"):
                j += 1
            elif lit not in ("-depth", "-d", "-xdev", "-mount", "-print", "-print0", "-noleaf", "-daystart"):
                filters = True
        if deletes:
            for start in starts or [Word((Part("glob", "."),))]:
                self.deletes(start, cmd, whole_tree=not filters)

    def git(self, cmd: Cmd) -> None:
        args = cmd.args
        i = 0
        while i < len(args):
            lit = args[i].literal
            if lit is None or not lit.startswith("-"):
                break
            no_value = lit.startswith("--") and "=" in lit
            takes = lit in (
                "-C",
                "-c",
                "--git-dir",
                "--work-tree",
                "--namespace",
                "--config-env",
                "--super-prefix",
            )
            i += 2 if takes and not no_value else 1
        if i >= len(args) or args[i].literal != "push":
            return
        self.add("taint-push", f"git push (`{cmd.shown()}`)")
        parsed = options(args[i + 1 :], "o", ("--repo", "--receive-pack", "--exec", "--push-option"))
        force = parsed.has("-f", "--force", "--force-with-lease", "--mirror")
        delete = parsed.has("-d", "--delete", "--prune")
        for refspec in parsed.operands[1:]:
            text = refspec.text
            force = force or text.startswith("+")
            delete = delete or (text.startswith(":") and len(text) > 1)
        if force:
            self.add("force-push", f"force-push, which rewrites the remote branch: `{cmd.shown()}`")
        if delete:
            self.add("branch-delete", f"deletes a remote branch: `{cmd.shown()}`")

    def gh(self, args: list[Word], cmd: Cmd) -> None:
        words: list[str] = []
        i = 0
        while i < len(args) and len(words) < 2:
            lit = args[i].literal or ""
            i += 1
            if lit in ("-R", "--repo"):
                i += 1
            elif not lit.startswith("-"):
                words.append(lit)
        if words == ["pr", "create"] or words == ["pr", "new"]:
            self.add("taint-push", f"gh pr create (`{cmd.shown()}`)")

    def files(self, cmd: Cmd) -> None:
        """Credentials read or written anywhere in the command; writes outside the repository."""
        # Every word as written, then those of argv that unwrapping made anew (env -S): each once, in order.
        written = {id(w) for w in cmd.words}
        secrets = self.secrets
        for word in cmd.words + [w for w in cmd.argv if id(w) not in written]:
            parts = word.parts
            # render() of the usual word, plain text, is its text.
            rendered = (
                parts[0].text if len(parts) == 1 and parts[0].kind in _TEXT else render(word, self.where)
            )
            kind = secrets.get(rendered, "")  # secret(), inlined: a long script has thousands of words
            if kind == "":
                kind = secrets[rendered] = self.secret_kind(rendered)
            if kind is not None:
                self.add("credentials", f"reads or writes {kind}: `{cmd.shown()}`")
        for r in cmd.redirects:
            if r.target is None or r.op in ("<<", "<<-", "<<<"):
                continue
            if r.op in (">&", "<&") and _FD.fullmatch(r.target.text):
                continue  # 2>&1, >&-: a file descriptor, not a file
            rendered = render(r.target, self.where)
            self.secret(rendered, cmd)
            key = (rendered, r.op in WRITE_OPS)
            if key in self.quiet_targets:
                continue  # checked before in this command line and found harmless (a script's `>> log.txt`)
            found = len(self.findings)
            path = locate(rendered, self.where)
            if path is not None and dev_kind(path) == "network":
                self.dev_tcp(path, cmd)
            elif r.op in WRITE_OPS:
                self.write(rendered, r.target.text, cmd)
            if len(self.findings) == found:
                self.quiet_targets.add(key)
        for rendered, text in self.write_targets(cmd):
            self.write(rendered, text, cmd)

    def secret(self, rendered: str, cmd: Cmd) -> None:
        kind = self.secrets.get(rendered, "")
        if kind == "":
            kind = self.secrets[rendered] = self.secret_kind(rendered)
        if kind is not None:
            self.add("credentials", f"reads or writes {kind}: `{cmd.shown()}`")

    def secret_kind(self, rendered: str) -> str | None:
        if self.relative_safe and MAYBE_SECRET.search(rendered) is None:
            return None  # a relative path with no way up, below a working directory clear of secrets
        candidates = [rendered]
        if "=" in rendered:
            candidates.append(expand_string(rendered.partition("=")[2], self.where))
        for text in candidates:
            if not text:
                continue
            kind = credential(normalize(text, self.where), self.where)
            if kind is not None:
                return kind
        return None

    def write(self, rendered: str, text: str, cmd: Cmd) -> None:
        path = locate(rendered, self.where)
        if path is None:
            self.add(
                "write-outside", f"writes to a path hangar cannot resolve ({text or '“”'}): `{cmd.shown()}`"
            )
            return
        kind = dev_kind(path)
        if kind == "harmless":
            return
        if kind == "network":
            self.dev_tcp(path, cmd)
            return
        if kind == "device":
            self.add("system", f"writes to a device ({path}): `{cmd.shown()}`")
            return
        self.outside(path, cmd)

    def outside(self, path: str, cmd: Cmd) -> None:
        if not writable(path, self.where):
            self.add(
                "write-outside", f"writes outside the repository and $HANGAR_IO ({path}): `{cmd.shown()}`"
            )

    def write_targets(self, cmd: Cmd) -> list[tuple[str, str]]:
        """(rendered path, as written) for each file a command is known to write."""
        if cmd.name not in _WRITERS:
            return []  # most commands: none of those below
        name, args = cmd.name, cmd.args
        targets: list[Word | str] = []
        if name == "tee":
            targets += options(args).operands
        elif name in ("cp", "mv", "ln", "install"):
            short = "tSmogZ" if name == "install" else "tS"
            longs = ("--target-directory", "--suffix", "--mode", "--owner", "--group")
            parsed = options(args, short, longs)
            explicit = parsed.values.get("-t", []) + parsed.values.get("--target-directory", [])
            if explicit:
                targets += explicit
            elif name == "install" and parsed.has("-d", "--directory"):
                targets += parsed.operands
            elif len(parsed.operands) >= 2:
                targets.append(parsed.operands[-1])
        elif name in ("touch", "mkdir", "truncate"):
            short = {"touch": "drt", "mkdir": "m", "truncate": "sr"}[name]
            targets += options(args, short, ("--date", "--reference", "--mode", "--size")).operands
        elif name == "dd":
            targets += [render(w, self.where)[3:] for w in args if w.text.startswith("of=")]
        elif name in DOWNLOADERS:
            parsed = self.downloader_options(name, args)
            for opt in _DOWNLOAD_OUTPUTS[name]:
                targets += [
                    v for v in parsed.values.get(opt, []) if (v.text if isinstance(v, Word) else v) != "-"
                ]
        out: list[tuple[str, str]] = []
        for t in targets:
            if isinstance(t, Word):
                out.append((render(t, self.where), t.text))
            else:
                out.append((expand_string(t, self.where), t))
        return out

    # network (taint)

    def downloader_options(self, name: str, args: Sequence[Word]) -> Parsed:
        if name == "curl":
            return options(args, _CURL_SHORT, _CURL_LONG)
        return options(args, _WGET_SHORT, _WGET_LONG)

    def network(self, cmd: Cmd) -> None:
        if not self.tainted:
            return
        name, args = cmd.name, cmd.args
        hosts: list[str | None] = []
        if name in DOWNLOADERS:
            parsed = self.downloader_options(name, args)
            if parsed.has("--unix-socket", "--abstract-unix-socket"):
                return
            urls: list[Word | str] = [*parsed.operands, *parsed.values.get("--url", [])]
            for url in urls:
                hosts.append(host_of(url.text if isinstance(url, Word) else url))
            for opt in (
                "-x",
                "--proxy",
                "--preproxy",
                "--socks4",
                "--socks4a",
                "--socks5",
                "--socks5-hostname",
            ):
                for v in parsed.values.get(opt, []):
                    hosts.append(host_of(v.text if isinstance(v, Word) else v))
            if parsed.has(
                "-K", "--config", "-i", "--input-file", "--resolve", "--connect-to", "-e", "--execute"
            ):
                hosts.append(None)  # where it goes is in a file or an override hangar does not read
        elif name in _NETCAT:
            parsed = options(
                args, "IiMmOPpqsTVWwXx", ("--proxy", "--source", "--wait", "--exec", "--sh-exec")
            )
            if parsed.has("-l", "--listen", "-U", "--unixsock"):
                return
            if parsed.operands:
                hosts.append(host_of(parsed.operands[0].text))
            for v in parsed.values.get("-x", []) + parsed.values.get("--proxy", []):
                hosts.append(host_of(v.text if isinstance(v, Word) else v))
        else:
            return
        for host in hosts:
            if not is_sandbox_host(host):
                target = host if host is not None else "a host hangar cannot tell"
                self.add("taint-network", f"{name} to {target} (`{cmd.shown()}`)")
                return

    def dev_tcp(self, path: str, cmd: Cmd) -> None:
        parts = path.split("/")
        host = parts[3] if len(parts) > 3 and UNKNOWN not in parts[3] else None
        if not is_sandbox_host(host):
            self.add(
                "taint-network", f"a connection to {host or 'a host hangar cannot tell'} (`{cmd.shown()}`)"
            )


# The programs a plain command may run and still be done without the parser's objects (ShellAnalysis.harmless):
# all but those some rule or interpreter looks at (with any name starting "mkfs" or "python", checked apart).
_PLAIN_SKIPS = (
    SHELLS
    | DOWNLOADERS
    | PRIVILEGE
    | _SYSTEM
    | _NETCAT
    | _WRITERS
    | frozenset(_WRAPPERS)
    | {"perl", "ruby", "node", "nodejs", "php", "eval", "source", ".", "find", "init", "telinit", "systemctl"}
    | {"rm", "git", "gh"}
)


def writable(path: str, where: Where) -> bool:
    """``path`` (absolute, normalised) is in the repository checkout or the turn's $HANGAR_IO."""
    places = turn_places(where)
    return within(path, places.cwd) or (bool(places.io) and within(path, places.io))


def shown_cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _matches_all(component: str) -> bool:
    """A glob at the top of the working tree that picks (nearly) everything: ``*``, ``.*``, ``*.*``."""
    return "*" in component and not component.strip("*?.[]!^")


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
