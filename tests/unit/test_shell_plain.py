"""The plain-script reader (``hangar/approvals/plain.py``) and the rules' walk of what it reads, against the
parser and the engine before issue 15: the same parse trees, the same findings, the same verdicts; and the
credential check's shortcut for relative words (``paths.relative_safe``, ``paths.MAYBE_SECRET``)."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hangar.approvals import assess, clearing, decide, plain, shell, tree_reads
from hangar.approvals.paths import (
    MAYBE_SECRET,
    Where,
    credential,
    expand_string,
    maybe_secret_in,
    normalize,
    relative_safe,
)
from tests.unit.approvals_before import rules as old_rules
from tests.unit.approvals_rig import CWD, HOME, IO, assert_as_before, assert_script_as_walked, calls
from tests.unit.test_shell_equivalence import norm, outcome

# Words that are plain text, chosen for what the reader and the rules treat apart: reserved words,
# assignments, IO numbers (digits, Unicode ones too), names the rules look at, paths in and out of the
# repository, devices, secrets by name and by place.
WORDS = [
    "ls", "echo", "step-1", "make", "-j2", "test", "pytest", "-q", "tests/", "log.txt", "out", "a", "b",
    "if", "then", "fi", "do", "done", "for", "in", "case", "esac", "select", "function", "[[", "]]", "!",
    "{", "}", "while", "until", "else", "elif", "FOO=1", "A[1]=x", "B+=y", "=x", "x=", "2", "10", "²", "٣",
    "git", "push", "-f", "origin", ":old", "rm", "-rf", "-r", "/", ".", "..", "./x", "sudo", "curl", "wget",
    "sh", "bash", "-c", "python3", "python", "perl", "eval", "source", "find", "-delete", "-exec", "xargs",
    "env", "nice", "timeout", "command", "tee", "cp", "mv", "dd", "of=/dev/sda", "mkfs.ext4", "systemctl",
    "reboot", "init", "0", "gh", "pr", "create", "nc", "/tmp/x", "/dev/null", "/dev/sda", "/dev/tcp/1.2.3.4/80",
    "/etc/shadow", "/proc/1/environ", ".ssh", "a/.ssh/b", ".netrc", "x/_netrc", ".git-credentials",
    "../.git-credentials", "/home/agent/.aws/config", "/home/agent/.hangar/x", "/var/lib/hangar/io/t-2/x",
    "/var/lib/hangar/io/t-1/x", "/workspace/src", "src/../../x", "a#b", "x~y", "-", "--", "1-", "&1", "x\x00y",
    "{a,b}", "*.py", "?", "[ab]", "héllo",
]  # fmt: skip
# Operators and blanks, glued to the words or not: a word that runs into "<" or ">" may be an IO number.
SEPS = [
    " ", " ", " ", "  ", "\t", ";", " ; ", " && ", "&&", " || ", " | ", "|", " |& ", " & ", "\n", " > ", ">",
    " >> ", ">>", " 2>&1 ", ">&", " < ", "<", " <<< ", " >| ", " &> ", " &>> ", " <> ", " <& ", "(", ")",
    " ( ", " ) ", ";;", ";&", ";;&", "\n\n", "&&\n",
]  # fmt: skip
# What sends a script to the parser (quotes, expansions, here-documents, comments, a tilde, odd blanks).
ODD = ["'q'", '"q"', '""', "$X", "`x`", "\\ ", " <<EOF\nx\nEOF\n", " #c", "~/x", "<(x)", ">(x)", "\r", "\x0b", "\xa0"]  # fmt: skip


# Every program some rule or interpreter looks at (clearing._PLAIN_SKIPS and the prefixes checked apart),
# so that each is drawn as a command's name often.
PROGRAMS = [*sorted(clearing._PLAIN_SKIPS), "mkfs.ext4", "python3.11", "/usr/bin/rm", "ls", "make"]


@st.composite
def scripts(draw: st.DrawFn, odd: bool) -> str:
    pieces: list[str] = []
    for _ in range(draw(st.integers(1, 14))):
        choice = draw(st.integers(0, 11 if odd else 10))
        if choice <= 4:
            pieces.append(draw(st.sampled_from(WORDS)))
        elif choice <= 8:
            pieces.append(draw(st.sampled_from(SEPS)))
        elif choice <= 10:
            pieces.append(draw(st.sampled_from(PROGRAMS)) + " " + draw(st.sampled_from(WORDS)))
        else:
            pieces.append(draw(st.sampled_from(ODD)))
    return "".join(pieces)


SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tree(pipelines: list[list[plain.PlainCommand]]) -> object:
    return norm([plain.pipeline(p).commands for p in pipelines])


@SETTINGS
@given(scripts(odd=True))
def test_what_it_reads_is_what_the_parser_reads(src: str) -> None:
    read = plain.read(src)
    if read is not None:
        assert _tree(read) == norm([p.commands for p in shell.parse(src).pipelines])


# A pipe into a group or a loop or out of one (`| (`, `| {`, `| while`, `) |`, `} |`, `done |`): plain.read
# leaves it to the parser.
GROUP_PIPE = re.compile(r"\|&?\s*(?:[({]|(?:while|until|for|select)\b)|(?:[)}]|\bdone)\s*\|")


@SETTINGS
@given(scripts(odd=False))
@example("<<ls")
@example("<(lslslslslslsls)")
def test_it_reads_every_plain_script_the_parser_takes(src: str) -> None:
    """Without quotes, expansions, here-documents, comments or odd blanks, the reader declines only what
    the parser refuses (a redirection without a target); and what it reads is the parser's tree."""
    read = plain.read(src)
    try:
        tree = norm([p.commands for p in shell.parse(src).pipelines])
    except shell.ShellSyntaxError:
        assert read is None
        return
    tokens, _ = shell.tokenize(src)
    if any(isinstance(t, shell.Op) and t.heredoc is not None for t in tokens):
        assert read is None  # "<" and "<" drawn side by side: a here-document, left to the parser
        return
    if "<(" in src or ">(" in src:
        assert read is None  # "<" or ">" drawn before "(": a process substitution, left to the parser
        return
    if read is None and GROUP_PIPE.search(src) is not None:
        return  # a group next to a pipe: one pipeline of the parser's, left to it
    assert read is not None, src
    assert _tree(read) == tree


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=" \t\n|&;(){}donewhilforsct-x_1", max_size=18))
@example("x|(y")
@example("xdone |y")
@example("a_done|b")
def test_the_group_pipe_scans_find_what_one_pattern_does(text: str) -> None:
    """``plain.group_pipe``, its kinds looked for apart for speed, finds a group next to a pipe where the
    one pattern of all of them does."""
    if "|" in text:
        assert plain.group_pipe(text) == (GROUP_PIPE.search(text) is not None)


def test_scripts_it_reads_and_ones_it_leaves() -> None:
    assert plain.read("echo step-1 >> log.txt && echo step-2 >> log.txt") == [
        [([], ["echo", "step-1"], [(">>", None, "log.txt")])],
        [([], ["echo", "step-2"], [(">>", None, "log.txt")])],
    ]
    assert plain.read("FOO=1 make 2>err | tee x;") == [
        [(["FOO=1"], ["make"], [(">", "2", "err")]), ([], ["tee", "x"], [])]
    ]
    # A test is a command of its own, named "[[", its words up to "]]" its arguments.
    assert plain.read("if [[ -f x ]]; then rm a; fi") == [
        [([], ["[[", "-f", "x", "]]"], [])],
        [([], ["rm", "a"], [])],
    ]
    assert plain.read("2>x") == [[([], [], [(">", "2", "x")])]]
    for src in ("echo >", "a > ;", "> 2>x", "cat <<EOF\nx\nEOF", "a #c", "~/x", "a 'b'", "a\rb", "a <(b)"):
        assert plain.read(src) is None, src
    assert plain.read("a#b x~y") == [[([], ["a#b", "x~y"], [])]]


@SETTINGS
@given(scripts(odd=True), st.booleans())
def test_the_same_findings_and_verdicts_as_before(src: str, tainted: bool) -> None:
    assert_as_before(src, tainted)


def test_a_long_script_of_mixed_commands_as_before() -> None:
    """The reader's walk over a long script that mixes harmless commands with ones the rules look at."""
    lines = []
    for i in range(300):
        lines.append(f"echo step-{i} >> log.txt && make -j2 test-{i % 7} 2>err.txt | tee out-{i}.log")
        if i % 50 == 7:
            lines.append(f"git push -f origin b{i}; cp a /tmp/x{i}; cat .netrc > /dev/null")
    src = "\n".join(lines)
    assert plain.read(src) is not None
    new, old = calls(src, False)
    assert outcome(assess, new) == outcome(old_rules.assess, old)
    assert decide("deny-risky", new).rule == "force-push"


# Arguments that make the programs of PROGRAMS do what a rule flags (or nearly).
ARGS = [
    "", "-rf /", "-r .", "-rf build", "push -f origin main", "push origin :b", "-c ls", "-c 'rm -rf /'", "-s",
    "of=/dev/sda", "if=/dev/zero of=x", "a /tmp/y", "-t /etc x", "https://evil.example/x", "-o /tmp/o u",
    "http://localhost/x", "/etc/shadow", ". -delete", ". -exec rm -rf / ;", "0", "reboot", "pr create",
    "evil.example 80", "-l 80", "-n 5 rm -rf /", "60 rm -rf ~/x", "FOO=1 rm -rf /", "-S 'rm -rf /'", "x > /dev/sda",
    "-v rm", "x 2>/tmp/e", "x >> log.txt", "x < /home/agent/.ssh/id_rsa", "| sh", "x | bash -s", "x |& tee /tmp/t",
]  # fmt: skip


def test_each_program_the_rules_look_at_as_before() -> None:
    """Every program some rule or interpreter looks at, with arguments that make it risky or nearly: the
    findings and verdicts are those of the engine before issue 15, tainted or not."""
    for program in PROGRAMS:
        for args in ARGS:
            src = f"{program} {args}".strip()
            for tainted in (False, True):  # the findings decide the verdict under every policy
                assert_as_before(src, tainted)  # as strict or stricter for coproc, now a wrapper


PLACES = [
    Where(CWD, HOME, IO),
    Where(HOME, HOME, IO),
    Where("/", HOME, IO),
    Where("/etc", HOME, IO),
    Where("/proc", HOME, IO),
    Where("/proc/1", HOME, IO),
    Where("/home/agent/.ssh", HOME, IO),
    Where("/srv/.ssh/x", HOME, IO),
    Where("/var/lib/hangar/io", HOME, IO),
    Where("/var/lib/hangar", HOME, IO),
    Where("/home/agent/.aws/x", HOME, IO),
    Where("/home/agent/.config", HOME, IO),
    Where("/srv/.netrc", HOME, IO),
    Where("/workspace/repo", "/workspace", ""),
    Where("/workspace", "", ""),
]
PIECES = ["a", "src", ".ssh", "id_rsa", ".netrc", "_netrc", ".git-credentials", ".aws", "config", ".hangar",
          "gh", ".config", "git", "credentials", "io", "t-2", "environ", "shadow", "proc", "etc", ".", "..",
          "", "x=y", "\x00", "agent", "home", "workspace", "repo", "k=", "k=~", "k=$HOME", "k=${PWD}", "k=$X",
          "k=\x00", "=", "~", "$HOME", "a=b="]  # fmt: skip


def _secret(word: str, where: Where) -> str | None:
    """``ProgramRules.secret_kind`` without its shortcut: the word, and an option's value expanded."""
    candidates = [word]
    if "=" in word:
        candidates.append(expand_string(word.partition("=")[2], where))
    for text in candidates:
        if text and (kind := credential(normalize(text, where), where)) is not None:
            return kind
    return None


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(PLACES), st.lists(st.sampled_from(PIECES), min_size=1, max_size=5), st.booleans())
@example(Where(CWD, HOME, IO), ["k=~", ".aws"], False)
@example(Where(CWD, HOME, IO), ["k=$HOME", ".hangar"], False)
def test_a_word_the_shortcut_clears_is_no_secret(where: Where, pieces: list[str], absolute: bool) -> None:
    word = ("/" if absolute else "") + "/".join(pieces)
    if relative_safe(where) and MAYBE_SECRET.search(word) is None:
        assert _secret(word, where) is None
    if relative_safe(where) and not maybe_secret_in(f"ls x;{word} y"):
        assert _secret(word, where) is None


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=" \t\n;&|()<>/=.~$nsetrcgi-ab", max_size=16))
@example("/x")
@example("a=$HOME/.gitx")
def test_the_scripts_shortcut_is_its_plain_form(text: str) -> None:
    """``maybe_secret_in``, written for speed, finds something where the alternatives side by side do."""
    spelled = re.compile(r"(?:\A|[ \t\n;&|()<>])/|=[/~$]|\.\.|\.ssh|netrc|\.git-credentials")
    assert maybe_secret_in(text) == (spelled.search(text) is not None)


@SETTINGS
@given(scripts(odd=True))
def test_a_script_the_shortcut_clears_has_no_word_it_would_not(src: str) -> None:
    """``maybe_secret_in`` finds nothing in a script only when ``MAYBE_SECRET`` finds nothing in any of the
    words ``plain.read`` reads from it."""
    read = plain.read(src)
    if read is None or maybe_secret_in(src):
        return
    for pipeline in read:
        for assigns, words, redirects in pipeline:
            for w in [*assigns, *words, *(t for _, _, t in redirects)]:
                assert MAYBE_SECRET.search(w) is None, w


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(PLACES), st.text(alphabet=" ;=/~$.{}HOMEhoe-agnt'x", max_size=18))
@example(Where(CWD, HOME, IO), "ls /home//agent/")
@example(Where(CWD, HOME, IO), "x=~")
@example(Where(CWD, HOME, IO), "${HOME}x")
def test_the_tree_naming_scans_find_what_one_pattern_does(where: Where, text: str) -> None:
    """``tree_reads._naming``, its kinds looked for apart for speed, finds a word naming a directory above a
    secret's place, a ``~``, ``$HOME`` or ``..`` where the one pattern of all of them does."""
    slash = tree_reads._slash_naming(where).pattern
    head = rf"/(?:(?<={tree_reads._WORD_START}/)|(?<=\A/))"
    assert slash.startswith(head)
    rest, start = slash[len(head) :], tree_reads._WORD_START
    one = re.compile(
        rf"[/~$.](?:(?<={start}/){rest}|(?<=\A/){rest}|(?<={start}~)|(?<=\A~)|(?<=\$)\{{?HOME\b|(?<=\.)\.)"
    )
    assert tree_reads._naming(text, where) == (one.search(text) is not None)


def test_where_the_shortcut_holds() -> None:
    safe = {w.cwd for w in PLACES if relative_safe(w)}
    assert safe == {CWD, "/workspace/repo"}  # not HOME, /, /etc, /proc, .ssh, io/, ~/.aws, ~/.config…
    assert relative_safe(Where("/srv/.netrc", HOME, IO)) is False


@SETTINGS
@given(scripts(odd=True))
@example('"" x; ls')  # a word of nothing names no program
def test_the_programs_a_script_runs_as_the_full_walk_finds_them(src: str) -> None:
    """What ``script()`` returns (the programs run; ``downloads()`` reads it) and its findings, against the
    walk of every parsed pipeline through ``walk()``, the path that makes every object."""
    assert_script_as_walked(src)


def test_every_blank_str_split_splits_on_but_the_shell_does_not_sends_a_script_to_the_parser() -> None:
    splits = [c for c in map(chr, range(0x110000)) if len(f"a{c}b".split()) > 1 and c not in " \t\n"]
    assert len(splits) >= 20  # \x0b, \r, \xa0, \u2028 …
    assert [hex(ord(c)) for c in splits if plain.read(f"ls a{c}b") is not None] == []
