"""The glance at a script (``glance.py``) and the check of a whole script from it (``Clearing.glanced``),
against the reader they stand in for (``plain.read`` of ``quick.mask``'s script: the same first words,
marked assignments and redirections) and against the walk of every parsed pipeline and the engine before
issue 15 (the same programs, findings in their order, verdicts), on generated scripts made mostly of
commands it takes, with what it must decline mixed in."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hangar.approvals import assess, clearing, commands, glance, plain, quick
from hangar.approvals.paths import Where
from hangar.approvals.plain import MARK
from tests.unit.approvals_rig import CWD, HOME, IO, assert_as_before, assert_script_as_walked, calls
from tests.unit.test_shell_plain import SETTINGS, WORDS, scripts
from tests.unit.test_shell_quick import QUOTED, lines


@pytest.fixture(autouse=True, scope="module")
def glance_at_every_script() -> Iterator[None]:
    """``script()`` glances at a script of any length here (``Clearing.glance_from``)."""
    before = clearing.Clearing.glance_from
    clearing.Clearing.glance_from = 0
    yield
    clearing.Clearing.glance_from = before


# Names no rule looks at (the glance clears them) and ones a rule looks at (it declines, or a substitution
# runs them).
HARMLESS = ["ls", "echo", "make", "grep", "cat", "true", "x2", "head", "-n", "/bin/ls", "a=b"]
RISKY = ["rm -rf /", "sudo id", "git push -f", "curl -s x | sh", "bash -c", "find . -delete", "python3"]
PREFIXES = ["FOO=1 ", "A[x]=1 ", "B+=y ", "X='a b' ", 'Y="$HOME" ', "for f in a *.py; do ", "case x in a|b) ",
            "for x in 'a' b; do ", "for y in \"$(rm -rf /)\"; do ", "select x in a >/dev/sda; do ", "Z=$(rm -rf /) ", "! ", "if ", "then ",
            "do ", "{ ", "else ", "X=1 then ", "then X=1 "]  # fmt: skip
ARGUMENTS = [*QUOTED, *WORDS, '"$(rm -rf /)"', '"$(sudo id)"', '"step 1: $(date +%s)"', "$(cat ~/.ssh/x)",
             '"$HOME/.netrc"', "'/etc/shadow'", "/tmp/x", "..", "$(curl x | sh)"]  # fmt: skip
REDIRECTIONS = [" >> log.txt", " 2>&1", ">out", " 2>/dev/null", " > /dev/sda", " >/etc/x", " < in", " &> x",
                " &>> x", " >| x", " <> x", " <&0", ' > "$X"', " > 'o u t'", " >>$(date)", "2>x", " >/dev/tcp/h/1",
                " > ~/.aws/x", " > '/home/agent/.ssh/k'"]  # fmt: skip
SEPARATORS = [" && ", " || ", " | ", "; ", "\n", " & ", "|", "(", ")", " |& ", ";;", "&&\n", "\n\n"]
# What the glance declines, or a reader before it: a redirection before the name, clauses, operators run
# together, a target missing or taken by the next redirection, continuations, comments, here-documents,
# substitutions the quick reader leaves, process substitutions, [[.
ODD = [">x ", "2>x ", "&>x ", "X=1>x ", "fi&", "then>x", "}>x", ";>x", ">>&x", "&&>x", "|>x", " >", "x>2>y", "\\\n",
       " #c\n", " <<EOF\nrm -rf /\nEOF\n", "$(a $(b))", "`rm -rf /`", " <(rm -rf /)", "[[ x ]] ", "for x in $(id); do ",
       "function f ", "case x in ", "select x in a; ", "X=1 ", "2 ", "٣>x ", ")>x", "\x02", "\r"]  # fmt: skip


# A calm script's pieces: nothing the glance declines, only what its substitutions run may be flagged.
CALM_ARGUMENTS = ["-la", "x", "'a b'", '"$X"', "${X}", "a'b'c", "X=1", "'q'", '"step 1: $(date +%s)"',
                  '"$(rm -rf /)"', '"$(sudo id)"', "$(git push -f)", "$(ls | head)", '"$(curl x | sh)"']  # fmt: skip
CALM_REDIRECTIONS = [" >> log.txt", " 2>&1", ">out", " 2>/dev/null", " < in", " &> x", " >| 'o u t'"]


@st.composite
def glanced_scripts(draw: st.DrawFn) -> str:
    """Commands with prefixes, arguments and redirections between separators, mostly of names no rule looks
    at, with what the glance declines mixed in now and then; or, half the time, calm: nothing but what the
    substitutions run may be flagged, so that the script is glanced at whole."""
    calm = draw(st.booleans())
    out: list[str] = []
    for _ in range(draw(st.integers(1, 8))):
        if not calm and draw(st.integers(0, 5)) == 0:
            out.append(draw(st.sampled_from(ODD)))
        if draw(st.booleans()):
            out.append(draw(st.sampled_from(PREFIXES[:9] if calm else PREFIXES)))
        risky = not calm and draw(st.integers(0, 7)) == 0
        out.append(draw(st.sampled_from(RISKY if risky else HARMLESS)))
        for _ in range(draw(st.integers(0, 3))):
            out.append(" " + draw(st.sampled_from(CALM_ARGUMENTS if calm else ARGUMENTS)))
        if draw(st.integers(0, 2)) == 0:
            out.append(draw(st.sampled_from(CALM_REDIRECTIONS if calm else REDIRECTIONS)))
        out.append(draw(st.sampled_from(SEPARATORS)))
    return "".join(out)


SOURCES = st.one_of(glanced_scripts(), lines(), scripts(odd=True))


def _read(
    src: str,
) -> tuple[tuple[glance.Glance, set[tuple[str, str]]] | None, str | None, dict[str, str]]:
    """The glance at ``src`` marked, the marked script, and the marks' words."""
    marks: dict[str, str] = {}
    quoted: dict[str, str] = {}
    marked = quick.mask(src, marks, quoted)
    if marked is None or "<<" in src or "[[" in src:
        return None, marked, quoted
    return _take(marked), marked, quoted


def _take(marked: str) -> tuple[glance.Glance, set[tuple[str, str]]] | None:
    """What ``Clearing.glanced`` takes of a marked script: ``glance.read``'s and the redirections."""
    seen = glance.read(marked)
    if seen is None:
        return None
    redirects = glance.redirections(marked)
    return None if redirects is None else (seen, redirects)


@SETTINGS
@given(SOURCES)
@example("echo \"step 1: $(date +%s)\" >> log.txt && grep -n 'retry' src/mod1.py | head -5")
@example("FOO=1 make -j2 test-1 2>&1 | tail -3; ls -la build/1 || true")
@example("! X='a b' A[x]=1 ls >o 2>&1 <in &>x >|y <>z <&0 &>>w; then fi; X=1; x& y")
@example("a;>x rm")
@example("a&&>x rm")
@example("a\n>x rm")
@example("X=1 >x rm")
@example("x>2>y")
@example("then X=1 fi")
@example("ls >")
def test_what_it_finds_is_what_the_reader_reads(src: str) -> None:
    """Whatever the glance takes, the plain reader takes too (and so the quick reader the script), and it
    finds exactly the reader's first words, marks as assignments and redirections."""
    taken, marked, quoted = _read(src)
    if taken is None:
        return
    seen, redirects = taken
    assert marked is not None
    read = plain.read(marked, True)
    assert read is not None
    assert quick.read(src, {}, {}) is not None
    commands_ = [cmd for p in read for cmd in (p.stages if isinstance(p, plain.Quoted) else p)]
    assert seen.firsts == {words[0] for _, words, _ in commands_ if words}
    assert set(seen.assignments) == {w for assigns, _, _ in commands_ for w in assigns if MARK in w}
    assert redirects == {(op, target) for _, _, rs in commands_ for op, _, target in rs}
    assert all(MARK not in w or w in quoted for w in seen.firsts)


# The one scan of every redirection that glance.redirections() made before its scans were split by first
# character (what the split scans must agree with).
_ONE_SCAN = re.compile(
    r"([<>&](?<![;&|()<>\n][<>&])(?:(?<=[<>])|(?=>))[;&|()<>\n]*+)[ \t]*+([^ \t\n;&|()<>]*+)([<>]?)"
)


def _one_scan(src: str) -> set[tuple[str, str]] | None:
    angles = 0
    redirects: set[tuple[str, str]] = set()
    for op, target, after in _ONE_SCAN.findall(src):
        count = glance._ANGLES.get(op)
        if count is None or not target or (after and target.isdigit()):
            return None
        angles += count
        redirects.add((op, target))
    return redirects if angles == src.count("<") + src.count(">") else None


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="<>&|; \tx2\n", max_size=14))
@example("<x>y")
@example("x>2>y")
@example("a&>b &>>c")
def test_the_redirection_scans_find_what_one_scan_does(src: str) -> None:
    assert glance.redirections(src) == _one_scan(src)


def test_what_it_takes_and_declines() -> None:
    """It takes the usual shapes (a name after reserved words and assignments, redirections after it) and
    declines the ones it does not read, each of which, cleared on its first words, would hide a command."""
    for src in (
        "ls -la; make test 2>&1 | tee log.txt",
        "if grep -q x y; then FOO=1 X=2 make; fi",
        "cat <in >out 2>/dev/null &>x &>>y >|z <>w <&0 >&2",
        "! ls && { echo a; }",
        "X=1; Y=2",
        "(cd x && make) && head",
        "ls&",
        "for f in *.py a b; do ls -l; done && head",
        "case x in a|b) ls;; esac",
        "select x in a b; do ls; done",
    ):
        assert _take(src) is not None, src
    # A group or a loop next to a pipe is one pipeline of the parser's (plain.read declines it): not glanced at.
    for src in (
        "(cd x && make) | head",
        "ls | (sort)",
        "ls |& { sort; }",
        "{ ls; } | head",
        "for f in *.py a b; do ls -l; done | head",
        "ls | while read f; do wc -l; done",
        "ls | until read f; do :; done",
    ):
        assert _take(src) is None and plain.read(src) is None, src
    for src in (
        ">x rm -rf /",
        "2>x rm -rf /",
        "&>x rm -rf /",
        "X=1>x rm -rf /",
        "ls;>x rm -rf /",
        "ls&&>x rm -rf /",
        "ls\n>x rm -rf /",
        "then>x rm -rf /",
        "ls >>&x",
        "ls >",
        "ls x>2>y",
        "function f { ls; }",
        "X=1 fi",
        "ls 'a'",
        "ls # c",
        "ls ~/x",
        "ls\rx",
    ):
        assert _take(src) is None, src
    taken = _take("! X=1 A[x]=2 ls -l >o 2>&1 <i; then make >>log; true")
    assert taken is not None
    assert taken[0].firsts == {"ls", "make", "true"}
    assert taken[1] == {(">", "o"), (">&", "1"), ("<", "i"), (">>", "log")}
    # A loop head or case subject is a command named for, select or case, its words the arguments (what they
    # substitute is walked, the paths they name looked at), its redirections its own.
    taken = _take("for f in a b c; do rm -f x; done; tee x")
    assert taken is not None and taken[0].firsts == {"for", "rm", "tee"} and taken[1] == set()
    for src, firsts, redirects in (
        ("for x in \x021; do ls; done", {"for", "ls"}, set()),
        ("for x in a >/dev/sda; do ls; done", {"for", "ls"}, {(">", "/dev/sda")}),
        ("case \x021 in a) ls;; esac", {"case", "ls"}, set()),
        ("X=1 for x in a; do ls; done", {"for", "ls"}, set()),
    ):
        taken = _take(src)
        assert taken is not None and taken[0].firsts == firsts and taken[1] == redirects, src


def _glanced(src: str) -> tuple[bool, commands.ShellAnalysis]:
    """Whether ``Clearing.glanced`` walked ``src`` whole, and the analysis it walked it in."""
    analysis = commands.ShellAnalysis(Where(CWD, HOME, IO), False)
    analysis.stack.append(set())
    order: list[str] = []
    marked = analysis.masked(src, order) if "<<" not in src and "[[" not in src else None
    return marked is not None and analysis.glanced(marked, order, 0), analysis


@SETTINGS
@given(st.lists(SOURCES, min_size=1, max_size=4))
@example(['echo "$(rm -rf /)" a; ls "$(sudo id)"\necho "$(rm -rf /)"'])
@example(['X="$(rm -rf /)" ls'])
@example(['"$(rm -rf /)" x'])
@example(['ls > "$(rm -rf /)"'])
@example(["cat '/home/agent/.ssh/id_rsa'"])
@example(['echo "$(git push -f)" && echo "$(sudo id)" | grep "$(git push -f)"'])
def test_the_programs_and_findings_are_the_full_walks(chunks: list[str]) -> None:
    """``script()``, glancing where it can, finds what the walk of every parsed pipeline finds, in order,
    and the engine before issue 15's findings and verdicts."""
    src = "\n".join(chunks)
    assert_script_as_walked(src, too_deep_is_skipped=True)
    assert_as_before(src, True)


@SETTINGS
@given(SOURCES)
def test_a_declined_glance_records_nothing(src: str) -> None:
    """When the glance declines, nothing was found, recorded or walked (the caches aside): the script is
    read as before, as if it had not been glanced at."""
    done, analysis = _glanced(src)
    if not done:
        assert analysis.findings == [] and analysis.names == set() and analysis.walked == {}
        assert analysis.stack == [set()]


def test_a_long_script_is_glanced_at_and_the_substitutions_walked_in_order() -> None:
    """A long script as an agent writes one (``bench/approvals.py``'s ``mixed``) is glanced at whole; the
    substitutions of arguments are walked in the order their words first appear, and what they run is
    found as the full walk finds it."""
    src = "\n".join(
        f"echo \"step {i}: $(date +%s)\" >> log.txt && grep -n 'retry' src/mod{i}.py | head -5\n"
        f"FOO=1 make -j2 test-{i} 2>&1 | tail -3; ls -la build/{i} || true"
        for i in range(20)
    )
    done, analysis = _glanced(src)
    assert done and analysis.names == {"echo", "grep", "head", "make", "tail", "ls", "true", "date"}
    assert analysis.findings == []
    src = 'echo "$(git push -f)" a; ls x | grep "$(sudo id)" >> log.txt\necho "$(git push -f)" "$(rm -rf /)"'
    done, analysis = _glanced(src)
    assert done
    assert [f.rule for f in analysis.findings] == ["force-push", "sudo", "rm-recursive"]
    assert_script_as_walked(src)
    assert assess(calls(src, False)[0]).findings == tuple(analysis.findings)
