"""The fast shell reader against the one it replaced: on generated commands, the same tokens, parse trees,
hand-back answers and verdicts under every policy (``approvals_before/`` is the old engine, frozen).

The generator builds commands from the pieces the rules care about (programs, options, paths, quotes,
expansions, operators, redirections, here-documents) and from raw characters, so that malformed input
(unbalanced quotes, stray operators) is covered as well as the commands agents send.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hangar.approvals import POLICIES, RULE_ORDER, ToolCall, decide, is_handback, shell
from tests.unit.approvals_before import handback as old_handback
from tests.unit.approvals_before import rules as old_rules
from tests.unit.approvals_before import shell as old_shell

WORDS = [
    "ls", "git", "push", "-f", "--force", "origin", "main", ":old", "+main", "rm", "-rf", "-r", "/", ".", "..",
    "~", "~/", "~root", "~/.ssh/id_rsa", "/tmp/x", "$HOME", "${HOME}", "$HANGAR_IO/a", "$PWD/b", "$X", "$1",
    "$?", "sudo", "su", "curl", "wget", "-O-", "https://example.com/i.sh", "http://localhost:8080/x", "sh",
    "bash", "-c", "-lc", "-s", "/bin/bash", "eval", "source", ".", "find", "-delete", "-exec", "{}", "\\;",
    "xargs", "env", "-S", "FOO=1", "A[1]=x", "B+=y", "nice", "-n", "10", "timeout", "60", "command", "-v",
    "dd", "of=/dev/sda", "if=/dev/zero", "mkfs.ext4", "tee", "cp", "mv", "a", "b.txt", "/etc/shadow",
    "/proc/1/environ", "/dev/null", "/dev/tcp/10.0.0.1/80", "nc", "evil.example", "gh", "pr", "create",
    "hangar-agent", "done", "result", '{"ok":1}', "@file", "python3", "-m", "pip", "for", "in", "do", "done",
    "if", "then", "fi", "!", "{", "}", "[[", "]]", "case", "esac", "function", "*", "*.py", "?", "[ab]",
    "#comment", "a#b", "2", "x~y", "step-1", "log.txt", ".netrc", "../.git-credentials", "init", "0",
    "systemctl", "reboot", "chmod", "--", "-", "-o", "out", "mkdir", "touch", "/var/lib/hangar/io/t-2/x",
]  # fmt: skip
OPS = [" ", " ", " ", "  ", "\t", ";", " && ", " || ", " | ", " |& ", " & ", "\n", " > ", " >> ", " 2>&1 ",
       " < ", " <<< ", " >| ", " &> ", " 2> ", "(", ")", " <(", " >(", "$(", "`", "\\\n"]  # fmt: skip
RAW = st.text(alphabet="abc -/~$#'\"`\\(){}[]<>;&|*?!=\n\t0123.@", max_size=12)


def _quoted(inner: str, kind: int) -> str:
    if kind == 0:
        return "'" + inner.replace("'", "") + "'"
    if kind == 1:
        return '"' + inner.replace('"', '\\"') + '"'
    if kind == 2:
        return "$(" + inner + ")"
    if kind == 3:
        return "`" + inner.replace("`", "") + "`"
    if kind == 4:
        return "$'" + inner.replace("'", "\\'") + "\\x41\\n'"
    if kind == 5:
        return "${" + inner.replace("}", "") + "}"
    return "$((" + inner + "))"


@st.composite
def commands(draw: st.DrawFn, depth: int = 0) -> str:
    pieces: list[str] = []
    for _ in range(draw(st.integers(1, 10))):
        choice = draw(st.integers(0, 9))
        if choice <= 4:
            pieces.append(draw(st.sampled_from(WORDS)))
        elif choice <= 6:
            pieces.append(draw(st.sampled_from(OPS)))
        elif choice == 7 and depth < 3:
            inner = draw(commands(depth + 1))
            pieces.append(_quoted(inner, draw(st.integers(0, 6))))
        elif choice == 8:
            tag = draw(st.sampled_from(["EOF", "'EOF'", '"E"', "-EOF"]))
            body = draw(commands(depth + 1)) if depth < 3 else "x"
            delim = tag.strip("'\"-")
            pieces.append(f" <<{tag}\n{body}\n{delim}\n")
        else:
            pieces.append(draw(RAW))
        if draw(st.booleans()):
            pieces.append(" ")
    return "".join(pieces)


def norm(x: Any) -> Any:
    """Tokens, words and parse trees as plain tuples: the old classes and the new ones compare alike."""
    if isinstance(x, old_shell.Part | shell.Part):  # before tuples: the new ones are named tuples
        return ("part", x.kind, x.text, x.inner)
    if isinstance(x, old_shell.Word | shell.Word):
        return ("word", norm(x.parts))
    if isinstance(x, list | tuple):
        return tuple(norm(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, *(norm(getattr(x, f.name)) for f in dataclasses.fields(x)))
    return x


def outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return ("ok", norm(fn(*args, **kwargs)))
    except RecursionError:
        return ("recursion",)
    except Exception as e:  # the same error class, and the same message, is part of the answer
        return ("raised", type(e).__name__, str(e))


# Where the engine is stricter than the one before, on purpose: the words of a loop head, a case subject and
# a test (`for x in $(…)`, `case $(…) in`, `[[ $(…) ]]`), which the old parser walked past, are a command's
# arguments now (what they substitute is walked, the paths they name looked at), and `coproc` runs its
# command. A script holding none of these words must read and be judged exactly as before.
STRICTER_PARSE = re.compile(r"(?<![\w-])(?:for|select|case|coproc)(?![\w-])|\[\[")
# And what the rules flag since: the programs whose written files they know (``hangar/approvals/writers.py``:
# `chmod -R 777 /`, `sed -i … /etc/hosts`, `perl -pi …`, `git init /tmp/r`), `kexec`, a download substituted
# into another language's inline code (`python3 -c "$(curl …)"`) and one xargs hands to a shell as its script
# (`curl … | xargs bash -c`), `git config`, `shred`, a debugger attached to a process (`gdb -p`), and a glob
# that may expand to a secret (`~/.s*/id_rsa`). A script with one may be flagged where it was not.
# A group or a loop next to a pipe, or a pipe at a line's end: the new parser makes the commands around it one
# pipeline (each reads the pipe) where the old one ended the pipeline there.
GROUP_PIPE = re.compile(
    r"\|&?\s*(?:[({]|(?:while|until|for|select)\b)|(?:[)}]|\bdone)\s*\||\|&?[ \t]*(?:#[^\n]*)?\n"
)


STRICTER_ON = re.compile(
    STRICTER_PARSE.pattern
    + r"|(?<![\w-])(?:chmod|chown|chgrp|chattr|setfacl|sed|perl|rsync|tar|unzip|clone|init|config|shred|kexec|gdb|strace|ltrace|gcore)(?![\w-])"
    + r"|(?s:(?<![\w-])(?:python[\w.]*|ruby|node|nodejs|php)(?![\w-]).*(?:curl|wget))"
    + r"|(?s:(?:curl|wget).*xargs)"
    # a download renamed or copied, then run (`curl -o i.sh URL && mv i.sh x && ./x`)
    + r"|(?s:(?:curl|wget|aria2c).*(?<![\w-])(?:mv|cp|ln|install)(?![\w-]))"
    # a glob that may expand to a secret: a dot-name pattern (`~/.s*`), or a path pattern (`/*/*` has /etc/shadow)
    + r"|\.[\w-]*[*?[]|[/~]\S*[*?[]"
    # the taint gate's other network clients; gh's writes besides `pr create`; awk running what it reads
    + r"|(?<![\w/:-])(?:ssh|scp|sftp|telnet|ftp|lftp|socat|https?|xhs?|[gmn]?awk)(?![\w:/-])"
    + r"|(?s:(?<![\w-])gh(?![\w-]).*(?:api|merge|delete))"
    # global package installs (`npm i -g`, `pip install --user`, `go install`, `cargo install`); a compiler's
    # output (`cc -o /usr/local/bin/x`)
    + r"|(?<![\w-])(?:npm|pnpm|yarn|bun|pip3?|pipx|uv|go|cargo|gem|g?cc|[gc]\+\+|clang(?:\+\+)?|tcc|rustc)(?![\w+-])"
    # runuser, setpriv with an id; `git rm -r .`, `git clean -f` (a recursive delete of the working tree)
    + r"|(?<![\w-])(?:runuser|setpriv)(?![\w-])|(?s:(?<![\w-])git(?![\w-]).*(?<![\w-])(?:rm|clean)(?![\w-]))"
    # the system commands beyond mkfs, dd and shutdown: mounts, swap, modules, sysctl, the firewall, kill 1
    + r"|(?<![\w-])(?:u?mount|swap(?:on|off)|modprobe|insmod|rmmod|sysctl|ip6?tables|nft|kill(?:all5)?|telinit)(?![\w-])"
    # the credential stores under HOME beyond ~/.aws, ~/.config/gh, ~/.docker, ~/.kube and ~/.gnupg
    + r"|gcloud|\.azure|config/hub|npmrc|pypirc|\.cargo|\.gem|vault-token|\.terraform"
    # hangar's files in the pod (the run key, the repository credentials); the agent CLIs' own logins
    + r"|/run/hangar|\.claude|\.codex|(?<![^\s;&|()<>=\"'])/+(?:var/*)?(?:run/*)?(?=[\s;&|()<>\"']|\Z)"
    # the output files of text, archive, key and environment tools (`sort -o`, `zip OUT`, `python3 -m venv DIR`)
    # and of git's exports (`git archive -o`, `git worktree add`)
    + r"|(?<![\w-])(?:sort|uniq|c?split|patch|zip|7z[ar]?|cpio|ssh-keygen|openssl|virtualenv|venv|worktree|bundle|archive|format-patch)(?![\w-])"
    # a crontab or an at job: the system runs a command later
    + r"|(?<![\w-])(?:crontab|at|batch|atrm)(?![\w-])"
    # other languages' interpreters (`… | lua -`, `deno run URL`), inline code that fetches and runs
    # (`python3 -c "exec(urlopen(URL).read())"`)
    + r"|(?<![\w-])(?:aria2c|lua|luajit|tclsh|Rscript|pwsh|powershell|pwsh-preview|deno|bun)(?![\w-])"
    + r"|(?i:urlopen|urlretrieve|requests\.\w|httpx\.\w|http\.client|urllib3|aiohttp|axios|fetch|URI\.open|open-uri|LWP|HTTP::Tiny|file_get_contents"
    + r"|https?\.get|iwr|irm|Invoke-|Download|socket\.http|source\s*\()"
    # a tool printing or writing the credentials it keeps (`gh auth token`, `kubectl get secret -o yaml`)
    + r"|(?<![\w-])(?:gh|aws|gcloud|az|helm|vault|docker|podman|buildah|nerdctl|skopeo|crane|oras|regctl|kubectl|oc"
    + r"|npm|pnpm)(?![\w-])|credential"
    # find's -type narrows nothing (`find . -type f -delete` is the whole tree's files)
    + r"|(?s:(?<![\w-])find(?![\w-]).*-x?type)"
    # a whole tree read of a directory that holds credentials (`grep -r token ~`, `tar czf a.tgz /`)
    + r"|(?s:(?<![\w-])(?:[ef]?grep|rgrep|ugrep|rg|ag|ack|cp|tar|bsdtar|zip|rsync|scp)(?![\w-]).*"
    + r"(?:~|\$\{?HOME|\.\.|/home|(?<![^\s;&|()<>=\"'])/+(?:proc|etc|var|run)?/*(?=[\s;&|()<>\"']|\Z)))"
    # hub: git's commands and a pull request
    + r"|(?<![\w-])hub(?![\w-])"
    # a command whose name is computed (`$X -rf /`, `$(echo git) push -f`): worked out, or read as rm and git
    + r"|(?:^|[;&|({\n]|(?<![\w-])(?:do|then|else|exec|env|command|builtin|xargs|nohup|time|timeout \S+)\s)"
    + r"\s*(?:\w+=\S*\s+)*[\"']?(?:\$|`|[<>]\()"
    # a path below a credential file (`/etc/shadow/x`) names it as the file itself does
    + r"|(?:shadow|environ|/mem|netrc|credentials)['\"]?/"
    # a git alias the line sets; a function the line defines, run with its arguments (or a fork bomb)
    + r"|alias\.|\(\s*\)\s*\{|(?<![\w-])function(?![\w-])"
    # what echo or printf (or cat of a here-document) hands a shell as its script (`echo 'rm -rf /' | sh`)
    + r"|(?s:(?<![\w-])(?:echo|printf|cat)(?![\w-]).*\|)"
    # what another language's inline code runs or writes (`python3 -c "os.system('…')"`, `shutil.rmtree(P)`)
    + r"|(?s:(?<![\w-])(?:python[\w.]*|ruby|node|nodejs|php|perl|bun|deno)(?![\w-]).*"
    + r"(?:system|exec|spawn|popen|subprocess|rmtree|rm_r|rmSync|rmdir|open|write|unlink|remove|rename|copy|move|"
    + r"chmod|chown|truncate|touch|qx|%x|`|Path|\$))"
    # a group next to a pipe (`| (`, `) |`) or a pipe at a line's end: one pipeline now, whose substitutions are
    # walked before its commands (the order of the findings may differ; the new rules follow the pipe too)
    + r"|"
    + GROUP_PIPE.pattern
    # a file a download saved, run later in the command line (`curl -o i.sh URL && sh i.sh`)
    + r"|(?s:(?:curl|wget).+)"
)
# A process substitution written to (`tee >(sha256sum)`, `> >(gzip > a.gz)`, `>| <(…)`) is a pipe to a command
# the new rules walk as one, not a file: the old ones flagged it as a write to a path they could not resolve.
SUBSTITUTION_WRITE = re.compile(r"cannot resolve \([<>]\(")
_CLAUSE_NAMES = frozenset({"for", "select", "case", "[["})
_UNFLAGGED = frozenset({"auto", "default", "ask", "handback"})


def old_shape(script: Any) -> Any:
    """A script of the new parser as the old one made it: the old parser dropped a loop head's, a case
    subject's and a test's words (and a head's redirections); the new one makes each such clause a stage of
    its own, named by its reserved word (unquoted, with no assignment before it)."""
    if not isinstance(script, shell.Script):
        return script
    pipelines: list[shell.Pipeline] = []
    for p in script.pipelines:
        stages = [c for c in p.commands if not _clause(c)]
        if stages:
            pipelines.append(shell.Pipeline(stages))
    return shell.Script(pipelines, script.comment)


def _clause(command: shell.Command) -> bool:
    if command.assigns or not command.words:
        return False
    first = command.words[0]
    return all(p.kind == "glob" for p in first.parts) and first.literal in _CLAUSE_NAMES


def parses_as_before(src: str, lenient: bool) -> None:
    """``shell.parse`` is the old parser's, but for the clauses it now keeps (:func:`old_shape`), and for
    what follows a test the old one never saw end (:func:`sees_all_it_saw`)."""
    try:
        new: Any = ("ok", norm(old_shape(shell.parse(src, lenient=lenient))))
    except RecursionError:
        new = ("recursion",)
    except Exception as e:
        new = ("raised", type(e).__name__, str(e))
    old = outcome(old_shell.parse, src, lenient=lenient)
    if new != old and STRICTER_PARSE.search(src) is not None:
        assert sees_all_it_saw(new, old), (new, old)
        return
    if new != old and GROUP_PIPE.search(src) is not None:
        assert same_commands(new, old), (src, new, old)
        return
    assert new == old, src


def same_commands(new: Any, old: Any) -> bool:
    """Whether two parses have the same commands in the same order, however they are cut into pipelines."""
    if new[0] != "ok" or old[0] != "ok" or new[1][2] != old[1][2]:
        return False
    return [c for p in new[1][1] for c in p[1]] == [c for p in old[1][1] for c in p[1]]


def sees_all_it_saw(new: Any, old: Any) -> bool:
    """Whether a (lenient) parse has every command the old one had, in the same order, and perhaps more: a
    test's ``]]`` that is a ``<``'s operand (``[[ a < ]] b``) ended the test for the new parser, where the
    old one skipped on to the script's end, so the words after it are a command now, looked at by the rules
    (bash refuses the script)."""
    if new[0] != "ok" or old[0] != "ok" or new[1][2] != old[1][2]:  # both parsed, the same comment flag
        return False
    have = iter(c for pipeline in new[1][1] for c in pipeline[1])
    return all(any(c == seen for c in have) for pipeline in old[1][1] for seen in pipeline[1])


def findings_as_strict(src: str, new: Any, old: Any) -> bool:
    """Whether the new assessment is the old one, or, for a script with one of STRICTER_ON's words, finds
    all the old one found (each rule at least as many times), and says it could not parse some of it when
    the old one did (a substitution the old one walked past may not parse: `[[ $( > ) ]]`). The order may
    differ: what a head substitutes is walked where the head is, before its body (each distinct source is
    walked once, and its findings recorded there). The old findings of a write to a process substitution
    (``SUBSTITUTION_WRITE``) are not expected; where the new one still makes such a finding (a word that is
    more than the substitution: `<(x)'q'`), it is the old one's, and is compared as neither had it."""
    dropped = {
        f.what for f in old.findings if f.rule == "write-outside" and SUBSTITUTION_WRITE.search(f.what)
    }
    if dropped:
        old = dataclasses.replace(old, findings=tuple(f for f in old.findings if f.what not in dropped))
        new = dataclasses.replace(new, findings=tuple(f for f in new.findings if f.what not in dropped))
    if norm(new) == norm(old):
        return True
    if STRICTER_ON.search(src) is None or new.shell != old.shell or (old.unparsed and not new.unparsed):
        return False
    found = Counter((f.rule, f.taint) for f in new.findings)
    before = Counter((f.rule, f.taint) for f in old.findings)
    return not before - found


def verdict_as_strict(src: str, new: Any, old: Any) -> bool:
    """Whether the new verdict is the old one, or, for a script with one of STRICTER_ON's words, flags what
    the old one let through, or flags it for a rule at least as serious, or (flagging nothing, as the old
    one) says that some of it could not be parsed. A verdict the old rules rested on a write to a process
    substitution (``SUBSTITUTION_WRITE``) says nothing of the new one: findings_as_strict compares the rest."""
    if norm(new) == norm(old):
        return True
    if old.rule == "write-outside" and SUBSTITUTION_WRITE.search(old.reason):
        return True
    if STRICTER_ON.search(src) is None:
        return False
    if new.rule in _UNFLAGGED:
        return (
            (new.decision, new.rule) == (old.decision, old.rule)
            and new.reason.startswith(old.reason)
            and "could not be parsed" in new.reason[len(old.reason) :]
        )
    if old.rule in _UNFLAGGED:
        return new.decision != "allow"
    return new.decision == old.decision and RULE_ORDER.index(new.rule) <= RULE_ORDER.index(old.rule)


SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(commands())
@example("ls <<EOF\nx\nEOF\n[[ a\nb'\nc'<]] ''")
def test_the_same_tokens_and_parse_trees(src: str) -> None:
    for lenient in (False, True):
        assert outcome(shell.tokenize, src, lenient=lenient) == outcome(
            old_shell.tokenize, src, lenient=lenient
        )
        parses_as_before(src, lenient)
    assert norm(shell.split_words(src)) == norm(old_shell.split_words(src))
    assert norm(shell.double_quoted(src)) == norm(old_shell.double_quoted(src))


@SETTINGS
@given(commands(), st.booleans(), st.booleans())
@example("lslslslsls;[[ $( > )", False, False)
@example(" >|  <(", False, False)
def test_the_same_verdicts(src: str, tainted: bool, wrapped: bool) -> None:
    if wrapped:  # as Codex sends it
        src = "/bin/bash -lc '" + src.replace("'", "'\\''") + "'"
    assert is_handback(src) == old_handback.is_handback(src)
    for policy in POLICIES:
        new_call = ToolCall(
            "Bash", {"command": src}, src, "/workspace", "/home/agent", "/var/lib/hangar/io/t-1", tainted
        )
        old_call = old_rules.ToolCall(
            "Bash", {"command": src}, src, "/workspace", "/home/agent", "/var/lib/hangar/io/t-1", tainted
        )
        before = outcome(old_rules.decide, policy, old_call)
        if before == ("recursion",):
            continue  # the old engine failed; the new one flags it ("nesting"): tested in test_approval_rules
        after = outcome(decide, policy, new_call)
        if after != before:
            assert after[0] == before[0] == "ok", policy
            new_verdict = decide(policy, new_call)
            assert verdict_as_strict(src, new_verdict, old_rules.decide(policy, old_call)), policy


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_the_same_tokens_on_any_text(src: str) -> None:
    for lenient in (False, True):
        parses_as_before(src, lenient)
    assert is_handback(src) == old_handback.is_handback(src)


# Scripts the one-regex tokeniser takes (plain words, blanks, operators) and ones it must leave to the lexer.
FAST = [
    "echo step-1 >> log.txt && echo step-2 >> log.txt",
    "ls -la",
    "a;b||c|d|&e&f",
    "x >| y &>> z &> w <> v <&3 >&2",
    "cat <<< word",
    "a#b x~y {a,b} ! [[ -f x ]] *.py",
    "FOO=1 env B+=2 make\nnext  \t",
    "(cd sub && make) ;; esac ;& ;;&",
    "trailing blanks   ",
    "",
]
LEXER = [
    "2>x a",
    "a<(b)",
    "a >(b)",
    "cat <<EOF\nx\nEOF",
    "#c",
    "a #c",
    "~/x",
    "a\\ b",
    "'q'",
    'a"b"',
    "$X",
    "`x`",
]


def test_the_fast_tokeniser_agrees_with_the_lexer() -> None:
    for src in FAST:
        fast = shell._fast_tokens(src)
        assert fast is not None, src
        assert norm(fast) == norm(shell._Lexer(src, False).run()), src
    for src in LEXER:
        assert shell._fast_tokens(src) is None, src


def test_the_fast_scan_stops_where_it_leaves_the_script_to_the_lexer() -> None:
    """What the one-scan tokeniser does not take ends its scan: the rest is one match, not one per
    character read again to the end (a 65,000-character word run into ">" took minutes), and a word is one
    match however long."""
    for src in ("X=1" * 2000 + ">", "a" * 5000 + "<b", "ls " + "x" * 5000 + "$y z"):
        found = shell._FAST.findall(src)
        assert len(found) <= 3 and found[-2][2], src  # the rest, then the end
        assert shell._fast_tokens(src) is None
    assert len(shell._FAST.findall("echo " + "a" * 5000)) == 3  # the two words and the end
