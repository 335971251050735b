"""The deny-risky rules and the taint gate, applied to a shell command.

A command is parsed (``shell.py``) into pipelines of simple commands. Each simple command is looked at
as what actually runs: environment prefixes (``FOO=1 git push -f``) and wrappers (``command``, ``env``,
``nice``, ``timeout``, ``xargs``, ``nohup``, ``exec``, ``time``, ``coproc``, ``stdbuf``, ``ionice``, ``setsid``,
``builtin``, ``busybox``) are taken off, a program given by path (``/usr/bin/sudo``) is known by its
name, and the rules look inside what a command would run in turn: ``bash -lc '…'`` and ``sh -c "…"``
(recursively), ``eval``, ``$(…)``, backquotes, ``<(…)``, here-documents fed to a shell, ``find -exec``,
``echo '…' | sh``; a computed name is worked out or guessed at (``computed.py``), and another language's
inline code is read for the shell commands it runs and the files it deletes or writes (``inline_code.py``).

This is a guard rail against mistakes, not a sandbox: paths are resolved against the turn's working
directory (``paths.py``), so ``cd /elsewhere && rm -r x`` gets past the rules, as does anything that
builds a command at run time in a way the rules cannot read.

Here is the walk (:class:`ShellAnalysis`); ``argv.py`` says what a command runs, ``program_rules.py``
holds the rules each command gets, ``clearing.py`` the quick check of commands no rule can flag, ``plain.py``
reads a script of plain commands without the parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from . import computed, git_aliases, inline_code, plain, quick, readers, segments
from .argv import FETCHERS, SHELLS, Cmd, _cmd, program_source, shown_cut
from .clearing import Clearing
from .credential_tools import CREDENTIAL_TOOLS, credential_use
from .downloads import SAVERS, UNPACKERS, located, renamed, saved, unpacked
from .installs import INSTALLERS
from .languages import URL_RUNNERS, fetches_and_runs
from .paths import Where, holds_credentials, maybe_secret_in
from .plain import PlainCommand, Quoted
from .program_rules import _TEXT, PRIVILEGE, TRACERS, Finding
from .segments import Item
from .shell import Command, Pipeline, ShellSyntaxError, Word, double_quoted, parse
from .tree_reads import TREE_READERS, trees_read
from .writers import COPIERS

MAX_DEPTH = 16  # shells inside shells the rules follow; deeper nesting is flagged ("nesting")
# The longest shell command the rules read (characters); a longer one is flagged ("nesting"). Reading is
# linear in the length: ~0.1 µs a character for a script of plain commands (plain.py), ~0.2 µs for one of
# simple quotes and expansions (quick.py), ~1.5 µs for one the lexer reads (backslashes, nested
# substitutions, here-documents), so a megabyte could hold the operator a second.
MAX_COMMAND = 65_536
_STDOUT_TO_FILE = frozenset({">", ">|", ">>", "&>", "&>>"})


_URL = re.compile(r"(?i)(?:https?|ftp)://")


class ShellAnalysis(Clearing):
    """Walks a command and records what the rules find (``findings``)."""

    def __init__(self, where: Where, tainted: bool) -> None:
        super().__init__(where, tainted)
        self.unparsed = False  # some of it could only be scanned token by token
        self.git_aliases: dict[str, str] = {}  # set by `git config alias.NAME VALUE` earlier in the line

    # walking

    def script(self, src: str, depth: int = 0) -> frozenset[str]:
        """Walk ``src``; the names of the programs it runs, nested ones included.

        Each distinct source is walked once (its findings are already recorded the next time it turns
        up), which keeps ``bash -c "$(bash -c "$(…)")"`` linear rather than exponential."""
        if depth == 0 and not self.walked:
            self.may_save = "curl" in src or "wget" in src
            self.top = src
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
        self.stack.append(set())
        try:
            self.read(src, depth)
        finally:
            names = frozenset(self.stack.pop())
        self.walked[src] = names
        if self.stack:
            self.stack[-1].update(names)
        return names

    def read(self, src: str, depth: int) -> None:
        """Read ``src`` and walk it: glanced at (``Clearing.glanced``) when no command of it can be flagged;
        else a plain script by plain.py; else with its quoted words marked (quick.py); else the plain lines
        by plain.py and the others by quick.py or the parser, when the script can be cut so; else the whole
        by the parser."""
        marked = None
        if len(src) >= self.glance_from and "<<" not in src and "[[" not in src:
            order: list[str] = []
            marked = self.masked(src, order)
            if marked is not None and self.glanced(marked, order, depth):
                return
        items: Sequence[Item] | None = plain.read(src)
        text: str | None = src  # what a plain reader split the words of the whole script from
        if items is None:
            read = quick.read(src, self.marks, self.quoted, marked)
            items, text = read if read is not None else (None, None)
        if items is None:
            items = segments.read(src, self.marks, self.quoted)
        try:
            pipelines = parse(src).pipelines if items is None else []
        except ShellSyntaxError:
            # Best effort: what is open is closed at the end, and, in case the parser misread where a
            # quote starts, every token is scanned once more with the quote characters taken out.
            self.unparsed = True
            pipelines = parse(src, lenient=True).pipelines
            pipelines += parse(re.sub(r"[\"'`]", " ", src), lenient=True).pipelines
        # No plain word of the script can name a secret: unclear() need not look at each (a mark's word is
        # looked at by rendered()).
        clear = text is not None and self.relative_safe and not maybe_secret_in(text)
        self.items(items if items is not None else pipelines, depth, clear)

    def items(self, items: Sequence[Item], depth: int, clear: bool = False) -> None:
        """Walk a script's pipelines in order: those in strings that :meth:`unclear` clears are done, the
        others made into the parser's objects and walked (``clear``: no plain word names a secret).

        The pipelines in strings go to :meth:`unclear` a batch at a time: its checks only fill caches, so a
        batch gives the findings, in their order, of one call per pipeline, as long as nothing that may
        find something runs between two of the batch — a parsed pipeline, or a substitution not walked
        before (an argument's ``$(…)``, walked before its pipeline, as ``walk()`` does)."""
        batch: list[list[PlainCommand]] = []
        quoted_at: dict[int, Quoted] = {}  # the batch's pipelines read with quotes, as read (for walk())
        walked = self.walked
        names_here = self.stack[-1]
        for item in items:
            if type(item) is list:  # a plain pipeline, the usual item
                batch.append(item)
                continue
            if isinstance(item, Quoted):
                read = self.rendered(item.stages)
                if read is not None:
                    stages, nested = read
                    for src in nested:
                        names = walked.get(src)
                        if names is not None:
                            names_here.update(names)  # walked before: script() would add its names only
                        else:
                            self.unclear_walk(batch, quoted_at, depth, clear)
                            self.script(src, depth + 1)
                    quoted_at[len(batch)] = item
                    batch.append(stages)
                    continue
                item = plain.pipeline(item.stages, self.word)
            assert isinstance(item, Pipeline)
            self.unclear_walk(batch, quoted_at, depth, clear)
            self.pipeline(item, depth)
        self.unclear_walk(batch, quoted_at, depth, clear)

    def unclear_walk(
        self, batch: list[list[PlainCommand]], quoted_at: dict[int, Quoted], depth: int, clear: bool
    ) -> None:
        """Walk the pipelines of the batch :meth:`unclear` does not clear; empty the batch."""
        if not batch:
            return
        for k in self.unclear(batch, clear):
            read = quoted_at.get(k)
            self.walk(plain.pipeline(batch[k] if read is None else read.stages, self.word), depth)
        batch.clear()
        quoted_at.clear()

    def rendered(self, stages: list[PlainCommand]) -> tuple[list[PlainCommand], list[str]] | None:
        """``plain.stages`` for a pipeline ``quick.read`` kept words with quotes or expansions in: its
        commands in plain text (an argument that expands rendered as ``files()`` reads it) and the
        substitutions its arguments run, in order; None when a name, assignment or redirection target
        expands, or an assignment or a word of quotes names a secret (then it is walked as the parser's
        objects, as :meth:`unclear` would have it walked: in its place, after what comes before)."""
        marks = self.quoted.keys()
        texts = self.quoted_texts
        out: list[PlainCommand] = []
        nested: list[str] = []
        for cmd in stages:
            assigns, words, redirects = cmd
            if marks.isdisjoint(words) and not assigns and not redirects:
                out.append(cmd)  # no mark in it (`| head -5`)
                continue
            plain_assigns = assigns
            for i, w in enumerate(assigns):
                if w in marks:
                    text, _, _, secret = texts.get(w) or self.quoted_text(w)
                    if text is None or secret:
                        return None
                    if plain_assigns is assigns:
                        plain_assigns = list(assigns)
                    plain_assigns[i] = text
            plain_words = words
            for i, w in enumerate(words):
                if w in marks:
                    text, rendered, runs, secret = texts.get(w) or self.quoted_text(w)
                    if secret:
                        return None
                    if text is None:
                        if i == 0:
                            return None  # the program's name expands
                        text = rendered
                        nested += runs
                    if plain_words is words:
                        plain_words = list(words)
                    plain_words[i] = text
            plain_redirects = redirects
            for i, (op, fd, target) in enumerate(redirects):
                if target in marks:
                    text = (texts.get(target) or self.quoted_text(target))[0]
                    if text is None:
                        return None
                    if plain_redirects is redirects:
                        plain_redirects = list(redirects)
                    plain_redirects[i] = (op, fd, text)
            out.append((plain_assigns, plain_words, plain_redirects))
        return out, nested

    def word(self, text: str) -> Word:
        """The parser's ``Word`` of a word as ``quick.read`` or ``plain.read`` wrote it."""
        raw = self.quoted.get(text)
        return plain.word(text) if raw is None else quick.word(raw)

    def pipeline(self, pipeline: Pipeline, depth: int) -> None:
        read = plain.stages(
            pipeline, self.where
        )  # its words as strings, when they are plain text or rendered
        if read is None:
            self.walk(pipeline, depth)
            return
        stages, expanded = read
        if expanded:
            # What the expansions run, first, as walk() does: walked again below (or by walk()), each source
            # is found in the cache and adds no finding twice.
            for command in pipeline.commands:
                self.nested(command, depth)
        if self.unclear([stages]):
            self.walk(pipeline, depth)

    def walk(self, pipeline: Pipeline, depth: int) -> None:
        cmds: list[Cmd] = []
        guesses: list[Cmd] = []  # what a name that cannot be worked out is read as (computed.AS_IF)
        before: Cmd | None = None
        for command in pipeline.commands:
            self.nested(command, depth)
            cmd = _cmd(command)
            if not cmd.name and cmd.argv and cmd.argv[0].literal is None:  # `$X -rf /`, `$(echo git) push`
                found, guessed = computed.candidates(cmd, self.assigned())
                # What it runs, worked out; or it as written, and the guesses at it (their rules alone).
                cmds += [cmd] if guessed else found
                guesses += found if guessed else []
            else:
                cmds.append(cmd)
            if (
                before is not None
                and before.name in computed.PRINTERS
                and program_source(cmd.name, cmd.args)[0] == "stdin"
            ):
                script = computed.printed(before.argv, before.redirects)  # `echo 'rm -rf /' | sh`
                if script is not None and cmd.name in SHELLS:
                    self.script(script, depth + 1)
                elif script is not None:
                    self.inline(cmd.name, script, depth)  # `echo "os.system('…')" | python3`
            before = cmd
        # A download piped into something that reads its program from stdin, for each such download: which
        # commands have a reader after them is known in one pass from the end.
        reader_after = False
        piped = 0
        reads_lines = len(cmds) > 2 and any(c.name in readers.LINE_READERS for c in cmds)
        for cmd in reversed(cmds):
            feeds = readers.feeds_a_shell(cmd)  # `curl … > >(sh)`, `curl … | tee >(sh)`
            if (reader_after or feeds) and cmd.name in FETCHERS:
                piped += 1
            mode, operand = program_source(cmd.name, cmd.args)
            # `… | xargs bash -c`, `… | xargs -I{} sh -c '{}'`: xargs hands what it reads to the shell as its
            # script, or puts it in the script.
            reader_after = (
                reader_after
                or feeds
                or mode == "stdin"
                or (mode == "c" and "xargs" in cmd.wrappers and readers.xargs_script(cmd, operand))
                or (reads_lines and readers.runs_a_variable(cmd))
            )
        if piped:
            text = shown_cut(" | ".join(c.shown() for c in cmds))
            for _ in range(piped):
                self.add("pipe-to-shell", f"pipes a download into a shell: `{text}`")
        for cmd in cmds:
            self.command(cmd, depth)
        for cmd in guesses:
            self.guessed(cmd)

    def guessed(self, cmd: Cmd) -> None:
        """The rules on a command whose name is a guess (``$TOOL -rf /`` read as rm): only the findings its
        arguments alone make are kept, said of the command as written."""
        found = len(self.findings)
        if cmd.name == "rm":  # the rules of AS_IF's programs alone: the command as written had the others
            self.rm(cmd)
        else:
            self.git(cmd)
        kept = [f for f in self.findings[found:] if f.rule in computed.GUESSED_RULES]
        del self.findings[found:]
        written = shown_cut(" ".join(w.text for w in cmd.words))
        for f in kept:
            what = f"{f.what.rsplit(': `', 1)[0]}, if the program it names at run time is {cmd.name}: `{written}`"
            self.findings.append(Finding(f.rule, what, f.taint))

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
        """Whether any of these (substituted) commands fetches a URL (curl, wget, HTTPie)."""
        return any(self.script(src, depth + 1) & FETCHERS for src in sources)

    def command(self, cmd: Cmd, depth: int) -> None:
        name, args = cmd.name, cmd.args
        if name:
            self.names.add(name)
            if self.stack:
                self.stack[-1].add(name)
        if name in SAVERS:
            self.saved.update(saved(name, self.downloader_options(name, args), self.where))
            for r in cmd.redirects:  # `curl -o - URL > i.sh`
                if r.op in _STDOUT_TO_FILE and r.fd in (None, "1") and r.target is not None:
                    path = located(r.target, self.where)
                    if path is not None:
                        self.saved.add(path)
        elif cmd.argv and "/" in cmd.argv[0].text:
            self.ran_saved(cmd.argv[0], cmd)  # `./i.sh`
        if name in COPIERS and self.saved:  # `mv i.sh x && ./x` after `curl -o i.sh URL`
            self.saved.update(renamed(name, args, self.saved, self.where))
        if name in UNPACKERS and self.saved:
            found = unpacked(name, args, self.where)  # `tar xzf a.tgz` after `curl -LO URL/a.tgz`
            if found is not None and found[0] in self.saved:
                self.unpacked.add(found[1].rstrip("/") + "/")
        self.interpreters(cmd, depth)
        body = self.function(name) if name else None
        if body is not None:  # `f() { "$@"; }; f rm -rf /`: the function's body run with its arguments
            if computed.forks_itself(name, body):
                self.add("system", f"a fork bomb: {name} starts more of itself without end: `{cmd.shown()}`")
            given = computed.with_positional(body, [name, *(w.text for w in args)]) if args else None
            if given is not None:
                self.script(given, depth + 1)
        if name == "find":
            self.find(cmd, depth)
        self.system(cmd)
        if name in PRIVILEGE:
            self.privilege(cmd)
        if name == "rm":
            self.rm(cmd)
        if name in TRACERS:
            self.tracer(cmd)
        if name in ("git", "hub"):  # hub wraps git (`hub push`), and opens pull requests as gh does
            cmd = self.unaliased(cmd, depth)
            self.git(cmd)
            if name == "hub" and any(w.literal == "pull-request" for w in cmd.args[:3]):
                self.add("taint-push", f"hub pull-request (`{cmd.shown()}`)")
        if name == "gh":
            self.gh(args, cmd)
        if name in TREE_READERS and self.may_read_tree():
            self.tree_reads(cmd)
        if name in CREDENTIAL_TOOLS:
            what = credential_use(name, args)
            if what is not None:
                self.add("credentials", f"{what}: `{cmd.shown()}`")
        if name in INSTALLERS or name.startswith("python"):
            self.installs(cmd)
        self.files(cmd)
        self.network(cmd)

    def tree_reads(self, cmd: Cmd) -> None:
        """``grep -r token ~``, ``tar czf a.tgz ~``: a whole tree read that holds credentials below it."""
        for word in trees_read(cmd.name, cmd.args):
            path = located(word, self.where)
            what = holds_credentials(path, self.where) if path is not None else None
            if what is not None:
                self.add("credentials", f"reads {what}, the whole tree: `{cmd.shown()}`")
                return

    def interpreters(self, cmd: Cmd, depth: int) -> None:
        """Follow what a shell (or eval, or source) runs; catch a download handed to one."""
        name, args = cmd.name, cmd.args
        mode, operand = program_source(name, args)
        if not mode and name not in ("eval", "source", "."):
            return  # runs nothing of its own
        piped = f"pipes a download into a shell: `{cmd.shown()}`"
        if mode == "c" and operand is not None:
            # `sh -c '"$@"' _ rm -rf /`: the script, run with the parameters that follow it
            params = [w.text for w in args[args.index(operand) + 1 :]]
            given = computed.with_positional(operand.text, params) if params else None
            self.script(operand.text if given is None else given, depth + 1)
            if self.downloads(operand.nested, depth):
                self.add("pipe-to-shell", piped)
        elif mode == "file" and operand is not None:
            if self.downloads(operand.nested, depth):
                self.add("pipe-to-shell", piped)
            elif name in URL_RUNNERS and _URL.match(operand.literal or ""):  # `deno run URL`
                self.add("pipe-to-shell", f"runs a script from the network: `{cmd.shown()}`")
            self.ran_saved(operand, cmd)
        elif mode == "code":
            code = " ".join(w.text for w in args)
            if self.downloads((src for w in args for src in w.nested), depth):
                self.add("pipe-to-shell", piped)  # `python3 -c "$(curl …)"`: another language's inline code
            elif fetches_and_runs(code):
                self.add("pipe-to-shell", f"runs code it fetches: `{cmd.shown()}`")  # `exec(urlopen(…))`
            self.inline(name, code, depth)
        elif mode == "stdin":
            for r in cmd.redirects:
                if r.op == "<<<" and r.target is not None:
                    if name in SHELLS:
                        self.script(r.target.text, depth + 1)
                    else:
                        self.inline(name, r.target.text, depth)
                    if self.downloads(r.target.nested, depth):
                        self.add("pipe-to-shell", piped)
                elif r.heredoc is not None and name in SHELLS:
                    self.script(r.heredoc.body, depth + 1)
                elif r.heredoc is not None:  # `python3 - <<'EOF'`: another language's program
                    self.inline(name, r.heredoc.body, depth)
                elif r.op == "<" and r.target is not None:
                    if self.downloads(r.target.nested, depth):
                        self.add("pipe-to-shell", piped)
                    self.ran_saved(r.target, cmd)  # `bash < i.sh` after `curl -o i.sh URL`
        if name == "eval" and args:
            self.script(" ".join(w.text for w in args), depth + 1)
            if self.downloads((src for w in args for src in w.nested), depth):
                self.add("pipe-to-shell", piped)
        if name in ("source", ".") and args:
            if self.downloads(args[0].nested, depth):
                self.add("pipe-to-shell", piped)
            self.ran_saved(args[0], cmd)

    def unaliased(self, cmd: Cmd, depth: int) -> Cmd:
        """git with an alias the command line sets expanded (git_aliases.py); a "!" alias's shell command walked."""
        found = git_aliases.alias_set(cmd.args)
        if found is not None:
            self.git_aliases[found[0]] = found[1]
        out = git_aliases.expanded(cmd.args, self.git_aliases)
        if isinstance(out, str):
            self.script(out, depth + 1)
        if out is None or isinstance(out, str):
            return cmd
        return Cmd(cmd.name, [cmd.argv[0], *out], cmd.redirects, cmd.words, cmd.wrappers)

    def inline(self, name: str, code: str, depth: int) -> None:
        """What another language's program runs (``os.system("…")``) or deletes and writes
        (``shutil.rmtree(P)``), walked as shell commands (inline_code.py)."""
        found = len(self.findings)
        for src in inline_code.commands(name, code):
            self.script(src, depth + 1)
        # Said of the program's code, which the shell command shown stands for.
        self.findings[found:] = [
            Finding(f.rule, f"{f.what} ({name}'s code)", f.taint) for f in self.findings[found:]
        ]

    def ran_saved(self, script: Word, cmd: Cmd) -> None:
        """``sh i.sh`` (``python3 get.py``, ``source i.sh``) after ``curl -o i.sh URL`` in the same command line."""
        ran = located(script, self.where) if self.saved else None
        if ran is not None and ran in self.saved:
            self.add("pipe-to-shell", f"runs a script it downloaded ({ran}): `{cmd.shown()}`")
        elif ran is not None and any(ran.startswith(d) for d in self.unpacked):
            self.add("pipe-to-shell", f"runs a file from an archive it downloaded ({ran}): `{cmd.shown()}`")
