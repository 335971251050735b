"""The rules applied to one command as it runs (:class:`ProgramRules`): system commands, privilege,
recursive deletes, force-pushes and branch deletion, credentials, writes outside the repository, and
the taint gate's network check. ``commands.ShellAnalysis`` walks a script and calls them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .argv import (
    _CURL_LONG,
    _CURL_SHORT,
    _DOWNLOAD_OUTPUTS,
    _WGET_LONG,
    _WGET_SHORT,
    DOWNLOADERS,
    Cmd,
    Parsed,
    options,
    program,
    unwrap,
)
from .downloads import aria2c_options
from .git_aliases import subcommand_at
from .installs import global_install
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
    render_value,
    turn_places,
    within,
)
from .remotes import REMOTE_CLIENTS, gh_writes, remote_hosts
from .shell import WRITE_OPS, Part, Word
from .system_commands import is_system
from .writers import COPIERS, WRITERS, copy_options, written_by

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

PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudoedit", "runuser", "setpriv"})
# setpriv runs as another user only when told to change an id (`setpriv --no-new-privs cmd` does not).
_SETPRIV_IDS = ("--reuid", "--ruid", "--euid", "--regid", "--rgid", "--egid")
# Debuggers and tracers that attach to a running process: what they read is its memory (/proc/PID/mem).
TRACERS = frozenset({"gdb", "strace", "ltrace", "gcore"})
_NETCAT = frozenset({"nc", "ncat", "netcat"})
_TEXT = ("lit", "glob")  # the kinds of Part that are plain text
# The programs write_targets() knows the output files of.
_WRITERS = (
    frozenset({"tee", "cp", "mv", "ln", "install", "touch", "mkdir", "truncate", "dd"})
    | DOWNLOADERS
    | {"aria2c"}
    | WRITERS
)
_HERE = Word((Part("glob", "."),))  # the working directory, as a word
_FD = re.compile(r"[0-9]+-?|-")  # the target of >& or <& that is a file descriptor, not a file


def _substituted(word: Word) -> bool:
    """A word that is one process substitution (``>(cmd)``, ``<(cmd)``): the shell passes a pipe's name."""
    return len(word.parts) == 1 and word.parts[0].kind == "proc"


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


class ProgramRules:
    """The findings of the rules, and the checks each program gets (``ShellAnalysis`` walks to them)."""

    def __init__(self, where: Where, tainted: bool) -> None:
        self.where = where
        self.tainted = tainted
        self.findings: list[Finding] = []
        self.secrets: dict[str, str | None] = {}  # rendered text → the secret it names (secret_kind)
        # Redirection targets (rendered, written to) whose checks found nothing: they depend on the target
        # and the turn's places alone, so the next command redirecting there needs no second look.
        self.quiet_targets: set[tuple[str, bool]] = set()
        self.relative_safe = relative_safe(where)  # most words need no credential check (secret_kind)
        self.saved: set[str] = set()  # the files a download saved earlier in the command line (downloads.py)
        self.unpacked: set[str] = set()  # the directories an archive it downloaded was unpacked into

    def add(self, rule: str, what: str) -> None:
        taint = rule.startswith("taint-")
        if taint and not self.tainted:
            return
        self.findings.append(Finding(rule, what, taint))

    def command(self, cmd: Cmd, depth: int) -> None:
        """Apply the rules to ``cmd`` and walk what it runs (``find -exec``): the walker's."""
        raise NotImplementedError

    def system(self, cmd: Cmd) -> None:
        if is_system(cmd.name, cmd.args):
            self.add("system", f"system command: `{cmd.shown()}`")

    def privilege(self, cmd: Cmd) -> None:
        if cmd.name != "setpriv" or any(w.text.startswith(_SETPRIV_IDS) for w in cmd.args):
            self.add("sudo", f"runs a command as another user: `{cmd.shown()}`")

    def tracer(self, cmd: Cmd) -> None:
        """``gdb -p PID`` (or ``gdb PROGRAM PID``), ``strace -p``, ``ltrace -p``, ``gcore``: attaching to a
        running process reads its memory and environment, as /proc/PID/mem and environ would."""
        parsed = options(cmd.args, "p", ("--pid",))
        operands = parsed.operands
        attaches = (
            cmd.name == "gcore"
            or parsed.has("-p", "--pid")
            or (cmd.name == "gdb" and len(operands) >= 2 and (operands[1].literal or "").isdigit())
        )
        if attaches:
            self.add("credentials", f"attaches to a running process, reading its memory: `{cmd.shown()}`")

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
            elif lit in ("-maxdepth", "-mindepth", "-type", "-xtype"):
                j += 1  # `-type f` narrows nothing a recursive delete spares: every file of the tree
            elif lit not in ("-depth", "-d", "-xdev", "-mount", "-print", "-print0", "-noleaf", "-daystart"):
                filters = True
        if deletes:
            for start in starts or [_HERE]:
                self.deletes(start, cmd, whole_tree=not filters)

    def git(self, cmd: Cmd) -> None:
        args = cmd.args
        i = subcommand_at(args)
        if i < len(args) and (args[i].literal or "").startswith("credential"):
            # `git credential fill` prints a stored password; approve/reject, credential-store and
            # credential-cache read or write the helpers' stores.
            self.add("credentials", f"reads or writes git's stored credentials: `{cmd.shown()}`")
            return
        if i < len(args) and args[i].literal == "rm":
            # `git rm -r .` deletes the tracked files of the working tree (`--cached` only unstages them).
            parsed = options(args[i + 1 :], "", ("--pathspec-from-file",))
            if parsed.has("-r") and not parsed.has("--cached"):
                for target in parsed.operands:
                    self.deletes(target, cmd, whole_tree=True)
            return
        if i < len(args) and args[i].literal == "clean":
            # `git clean -f` deletes every untracked file under its paths (-d: untracked directories too, -x:
            # ignored files too), the whole working tree without one: what `rm -rf` of it would take that git
            # cannot give back. `-n` only lists.
            parsed = options(args[i + 1 :], "e", ("--exclude",))
            if parsed.has("-f", "--force") and not parsed.has("-n", "--dry-run"):
                for target in parsed.operands or [_HERE]:
                    self.deletes(target, cmd, whole_tree=True)
            return
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
        for rule, what in gh_writes(args):
            self.add(
                rule, f"{what} (`{cmd.shown()}`)" if rule == "taint-push" else f"{what}: `{cmd.shown()}`"
            )

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
            if _substituted(r.target):
                continue  # `> >(gzip > a.gz)`: a pipe to a command, walked as a command of its own
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

    def installs(self, cmd: Cmd) -> None:
        """A global package install (``npm i -g``, ``pip install --user``, ``pip install -t DIR``)."""
        place, dirs = global_install(cmd.name, cmd.args, cmd.words[: len(cmd.words) - len(cmd.argv)])
        if place is not None:
            self.add("write-outside", f"installs packages outside the repository ({place}): `{cmd.shown()}`")
        for d in dirs:
            self.write(render_value(d, self.where), d if isinstance(d, str) else d.text, cmd)

    def outside(self, path: str, cmd: Cmd) -> None:
        if not writable(path, self.where):
            self.add(
                "write-outside", f"writes outside the repository and $HANGAR_IO ({path}): `{cmd.shown()}`"
            )

    def write_targets(self, cmd: Cmd) -> list[tuple[str, str]]:
        """(rendered path, as written) for each file a command is known to write."""
        if cmd.name not in _WRITERS and not cmd.name.startswith("python"):
            return []  # most commands: none of those below
        name, args = cmd.name, cmd.args
        targets: list[Word | str] = []
        if name == "tee":
            targets += options(args).operands
        elif name in COPIERS:
            parsed = copy_options(name, args)
            explicit = parsed.given("-t", "--target-directory")
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
        elif name in _DOWNLOAD_OUTPUTS:
            parsed = self.downloader_options(name, args)
            given = parsed.given(*_DOWNLOAD_OUTPUTS[name])
            targets += [v for v in given if (v.text if isinstance(v, Word) else v) != "-"]
        else:
            targets += written_by(name, args)
        out: list[tuple[str, str]] = []
        for t in targets:
            if isinstance(t, str):
                out.append((render_value(t, self.where), t))
            elif not _substituted(t):  # `tee >(sha256sum)` writes to a command, not a file
                out.append((render_value(t, self.where), t.text))
        return out

    # network (taint)

    def downloader_options(self, name: str, args: Sequence[Word]) -> Parsed:
        if name == "aria2c":
            return aria2c_options(args)
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
            urls = [w.text for w in parsed.operands] + parsed.texts("--url")
            proxies = parsed.texts(
                "-x", "--proxy", "--preproxy", "--socks4", "--socks4a", "--socks5", "--socks5-hostname"
            )
            hosts += [host_of(text) for text in urls + proxies]
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
            hosts += [host_of(text) for text in parsed.texts("-x", "--proxy")]
        elif name in REMOTE_CLIENTS:
            hosts = remote_hosts(name, args)
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


def writable(path: str, where: Where) -> bool:
    """``path`` (absolute, normalised) is in the repository checkout or the turn's $HANGAR_IO."""
    places = turn_places(where)
    return within(path, places.cwd) or (bool(places.io) and within(path, places.io))


def _matches_all(component: str) -> bool:
    """A glob at the top of the working tree that picks (nearly) everything: ``*``, ``.*``, ``*.*``."""
    return "*" in component and not component.strip("*?.[]!^")
