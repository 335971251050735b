"""The quick check of the rules' walk (:class:`Clearing`): which commands no rule can flag, so that they
need not be made into the parser's objects and walked.

No rule can flag a command when it runs a program no rule or interpreter looks at (not in
``_PLAIN_SKIPS``, nor a wrapper), none of its words names a secret and each redirection is quiet
(:meth:`Clearing.quiet_redirect`). :meth:`Clearing.unclear` checks pipelines read in strings
(``plain.read``, ``quick.read``); :meth:`Clearing.glanced` checks a whole script from what
``glance.read`` finds in it — its first words, redirections and words — without reading its pipelines, and
walks what its arguments' substitutions run. ``commands.ShellAnalysis`` walks what is not cleared.
"""

from __future__ import annotations

from . import glance, quick
from .argv import _WRAPPERS, DOWNLOADERS, SHELLS
from .computed import Values
from .credential_tools import CREDENTIAL_TOOLS
from .downloads import UNPACKERS
from .installs import INSTALLERS
from .languages import LANGUAGES
from .paths import Where, dev_kind, locate, maybe_secret_in
from .plain import MARK, PlainCommand
from .program_rules import _FD, _NETCAT, _WRITERS, PRIVILEGE, TRACERS, ProgramRules, writable
from .remotes import REMOTE_CLIENTS
from .shell import WRITE_OPS
from .system_commands import SYSTEM, SYSTEM_MAYBE
from .tree_reads import TREE_READERS, may_read_tree

# The operators' characters as blanks: the words of a plain script are then what str.split() gives.
_BLANKS = str.maketrans(";&|()<>\n", " " * 8)


class Clearing(ProgramRules):
    """The caches and checks that clear commands no rule can flag (see the module's docstring)."""

    # The shortest script glanced at (characters): below ~400 the glance's fixed cost (a dozen scans and
    # sets) is more than the reading it saves, and a short call the rules flag would pay for both (the usual
    # calls took 1.2x as long glanced at). The tests of the glance set it to 0.
    glance_from = 512

    def __init__(self, where: Where, tainted: bool) -> None:
        super().__init__(where, tainted)
        self.names: set[str] = set()  # every program run anywhere in the command
        self.walked: dict[str, frozenset[str]] = {}  # source → the programs it runs
        self.stack: list[set[str]] = []  # the programs of each source being walked
        self.clean: set[str] = set()  # plain words known to name no secret (unclear())
        # A command's first word → the program's name unclear() records, or _LOOKED_AT: a rule looks at it.
        self.programs: dict[str, str] = {}
        self.quiet_plain: dict[str, set[str]] = {}  # redirection operator → targets quiet_redirect() clears
        # quick.read's: each word with quotes or expansions (as written) → the mark standing for it, and back.
        self.marks: dict[str, str] = {}
        self.quoted: dict[str, str] = {}
        self.quoted_texts: dict[str, tuple[str | None, str, tuple[str, ...], bool]] = {}  # quoted_text()'s
        # The command line may download to a file (it names curl or wget): a program given by a path may be
        # that file, run (``curl -o i.sh URL && ./i.sh``), so such commands are walked, not cleared.
        self.may_save = False
        # The command line may name a directory that holds credentials (or runs in one): a command that reads
        # a whole tree (``grep -r``, ``tar c``, ``cp -r``) is walked, not cleared (tree_reads.py).
        self.top = ""  # the command line (what may_read_tree() reads, once a tree reader turns up)
        self._reads_tree: bool | None = None
        self.values: Values | None = None  # assigned()'s

    def script(self, src: str, depth: int = 0) -> frozenset[str]:
        """Walk ``src`` (the walker's); the names of the programs it runs."""
        raise NotImplementedError

    def assigned(self) -> Values:
        """The values the command line gives its variables and the functions it defines (computed.py; read
        once, when first asked)."""
        if self.values is None or self.values.top is not self.top:
            self.values = Values(self.top)
        return self.values

    def function(self, name: str) -> str | None:
        """The body of the function ``name`` the command line defines, if it defines one."""
        return self.assigned().function(name)

    def may_read_tree(self) -> bool:
        """tree_reads.may_read_tree() of the command line, worked out when a tree reader first turns up."""
        if self._reads_tree is None:
            self._reads_tree = may_read_tree(self.top, self.where)
        return self._reads_tree

    def masked(self, src: str, order: list[str]) -> str | None:
        """``src`` with its words of simple quotes and expansions marked (``quick.mask``; each mark placed
        appended to ``order``), ``src`` itself when it has none; None when it cannot be marked."""
        if "'" in src or '"' in src or "$" in src:
            return quick.mask(src, self.marks, self.quoted, order)
        return None if MARK in src else src

    def glanced(self, marked: str, order: list[str], depth: int) -> bool:
        """Walk the script ``marked`` (:meth:`masked`'s, ``order`` its marks) when no rule can flag any of
        its commands: True when it was (its programs recorded, the substitutions its arguments run walked,
        in order); False when ``glance.read`` declines it or some command may be flagged — then nothing
        was recorded nor walked (the caches aside) and the caller reads the script.

        It is :meth:`unclear` of the pipelines ``quick.read`` would give, with :meth:`rendered`'s words: each
        mark's word is plain text once its quotes are removed where ``rendered`` needs it (a name, an
        assignment, a redirection's target) and names no secret, else this declines (``rendered`` would
        have the pipeline walked). With every pipeline clear, the general walk finds nothing but what the
        arguments' substitutions run, walked in the order their words first appear, as here."""
        seen = glance.read(marked)
        if seen is None:
            return False
        texts = self.quoted_texts
        programs = self.programs
        # The names first, a mark's as its value: a command a rule looks at (most flagged scripts have one)
        # declines before the values of all the marks are worked out.
        firsts: set[str] = set()
        for first in seen.firsts:
            if MARK in first:
                text = (texts.get(first) or self.quoted_text(first))[0]
                if text is None:
                    return False  # the program's name expands
                first = text
            if (programs.get(first) or self.program(first)) is _LOOKED_AT:
                return False
            firsts.add(first)
        found = glance.redirections(marked)
        if found is None:
            return False
        marks = dict.fromkeys(order)  # the distinct marks, in the script's order
        expanding: set[str] = set()  # marks of words with an expansion (their value is not plain text)
        for mark in marks:
            text, _, _, secret = texts.get(mark) or self.quoted_text(mark)
            if secret:
                return False
            if text is None:
                expanding.add(mark)
        redirects = found
        if marks:
            if not expanding.isdisjoint(seen.assignments):
                return False
            redirects = set()
            for op, target in found:
                if MARK in target:
                    text = texts[target][0]
                    if text is None:
                        return False
                    target = text
                redirects.add((op, target))
        words: set[str] | None = None
        if not self.relative_safe or maybe_secret_in(marked):
            # Every word, targets and IO numbers too (each is checked as a word or a target elsewhere): the
            # marks' words were checked above.
            words = set(marked.translate(_BLANKS).split())
            words.difference_update(marks)
        if not self.clears(firsts, redirects, words):
            return False
        for mark in marks:
            if mark in expanding:
                for src in texts[mark][2]:
                    self.script(src, depth + 1)
        return True

    def quoted_text(self, mark: str) -> tuple[str | None, str, tuple[str, ...], bool]:
        """The word a mark of ``quick.read`` stands for: its value when it is plain text once quotes are
        removed (else None), what ``files()`` reads (``render``), the commands it runs (``Word.nested``),
        and whether that names a secret; worked out once per distinct word."""
        got = self.quoted_texts.get(mark)
        if got is None:
            text, rendered, nested = quick.value(self.quoted[mark], self.where)
            kind = self.secrets.get(rendered, "")
            if kind == "":
                kind = self.secrets[rendered] = self.secret_kind(rendered)
            got = self.quoted_texts[mark] = (text, rendered, nested, kind is not None)
        return got

    def unclear(self, pipelines: list[list[PlainCommand]], clear: bool = False) -> list[int]:
        """Which of these pipelines of plain commands some rule might flag (their indices, in order); the
        programs the others run are recorded.

        No rule can flag a command when it runs a program no rule or interpreter looks at (not in
        ``_PLAIN_SKIPS``, nor a wrapper), none of its words names a secret and each redirection is quiet
        (:meth:`quiet_redirect`): :meth:`walk` would find nothing in it but its name. Walking only the
        unclear pipelines, in order, gives the findings, in their order, that walking all would; the checks
        here only fill caches. One loop over every command, not a call per pipeline: a long script has
        thousands. ``clear``: no word or assignment names a secret, known before (``maybe_secret_in``)."""
        if self.all_clear(pipelines, clear):
            return []
        clean = self.clean
        programs = self.programs
        quiet = self.quiet_plain
        # The names of every command not taken off as a wrapper are recorded: those in unclear pipelines
        # too, since walk() records the same name for them (argv is the words as written).
        names: list[str] = []
        out: list[int] = []
        for k, stages in enumerate(pipelines):
            for assigns, words, redirects in stages:
                if words:
                    # The first word is never an assignment: the parser took those as the command's assigns.
                    first = words[0]
                    name = programs.get(first) or self.program(first)
                    if name is _LOOKED_AT:
                        break
                    if name:  # "" (a word of nothing, `""`): command() records no name either
                        names.append(name)
                    if not clear and not clean.issuperset(words) and not self.no_secret(words):
                        break
                if assigns and not clear and not self.no_secret(assigns):
                    break
                for op, _, target in redirects:
                    targets = quiet.get(op)
                    if targets is not None and target in targets:
                        continue  # the same redirection as before in this script (`>> log.txt`)
                    if not self.quiet_redirect(op, target):
                        break
                    quiet.setdefault(op, set()).add(target)
                else:
                    continue
                break
            else:
                continue
            out.append(k)
        self.names.update(names)
        self.stack[-1].update(names)
        return out

    def program(self, first: str) -> str:
        """The name unclear() records for a command's first word, or _LOOKED_AT when a rule looks at it."""
        name = first.rpartition("/")[2]
        if name in _PLAIN_SKIPS or name.startswith(("mkfs", "python")):
            name = _LOOKED_AT
        elif self.may_save and ("/" in first or name in UNPACKERS):
            name = _LOOKED_AT  # `./i.sh` may run what `curl -o i.sh URL` saved (or unpacked) before it
        elif name in TREE_READERS and self.may_read_tree():
            name = _LOOKED_AT  # `grep -r token ~`
        elif self.function(name) is not None:
            name = _LOOKED_AT  # `f() { "$@"; }; f rm -rf /`: the function's body runs with its arguments
        self.programs[first] = name
        return name

    def all_clear(self, pipelines: list[list[PlainCommand]], clear: bool) -> bool:
        """Whether :meth:`unclear` clears every one of these pipelines — then their programs are recorded
        —, found on the distinct first words, redirections and words of them all (a long script repeats
        them) rather than command by command; False: some may not be, and unclear() looks at each."""
        firsts = {words[0] for stages in pipelines for _, words, _ in stages if words}
        redirects = {r for stages in pipelines for _, _, rs in stages for r in rs}
        words = None if clear else {w for stages in pipelines for a, ws, _ in stages for w in (*a, *ws)}
        return self.clears(firsts, {(op, target) for op, _, target in redirects}, words)

    def clears(self, firsts: set[str], redirects: set[tuple[str, str]], words: set[str] | None) -> bool:
        """Whether no rule can flag commands with these first words, redirections (operator, target) and
        words (None: none names a secret, known before) — then the programs they run are recorded."""
        programs = self.programs
        names: list[str] = []
        for first in firsts:
            name = programs.get(first) or self.program(first)
            if name is _LOOKED_AT:
                return False
            if name:  # "" (a word of nothing, `""`): command() records no name either
                names.append(name)
        quiet = self.quiet_plain
        for op, target in redirects:
            targets = quiet.get(op)
            if targets is None or target not in targets:
                if not self.quiet_redirect(op, target):
                    return False
                quiet.setdefault(op, set()).add(target)
        if words is not None:
            if not self.clean.issuperset(words) and not self.no_secret(list(words - self.clean)):
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


_LOOKED_AT = "/"  # no program's name (what follows a command's last "/"): unclear()'s mark for "a rule looks"
# The programs a plain command may run and still be done without the parser's objects (``unclear``): all
# but those some rule or interpreter looks at (with any name starting "mkfs" or "python", checked apart).
_PLAIN_SKIPS = (
    SHELLS
    | DOWNLOADERS
    | PRIVILEGE
    | SYSTEM
    | SYSTEM_MAYBE
    | _NETCAT
    | _WRITERS
    | frozenset(_WRAPPERS)
    | {"perl", "ruby", "node", "nodejs", "php", "eval", "source", ".", "find"}
    | {"rm", "git", "gh", "hub"}
    | TRACERS
    | REMOTE_CLIENTS
    | INSTALLERS
    | LANGUAGES
    | CREDENTIAL_TOOLS
)
