"""What another language's inline code runs, written as the shell commands the rules read.

``python3 -c "import os; os.system('rm -rf /')"`` runs ``rm -rf /``; ``node -e "execSync('git push -f')"``
runs ``git push -f``; ``perl -e '`rm -rf ~`'`` and ``ruby -e 'system("rm", "-rf", "/")'`` likewise. The file
calls that delete a tree or write a file are written as their shell equivalents too: ``shutil.rmtree(P)``
as ``rm -rf P``, ``open(P, "w")`` as a write to ``P`` (``: > P``), so the paths get the same rules as a shell
command's; and a request to a URL it names, when it names a fetch (``urlopen``, ``fetch`` …), as ``curl URL``
(the taint gate's network rule). The walker (``commands.py``) walks what :func:`commands` gives as a nested script.

A command or path built from pieces is read as ``code_values.py`` reads it (``'rm -rf ' + d`` is ``rm -rf
$d``, a path hangar cannot resolve, as in a shell command); a file written at a path the code computes
whole is left alone (``open(f, 'w')`` for each file of a glob). What the code reads at run time (a file,
its arguments) gets past, as it does a shell command (a guard rail, not a sandbox).
"""

from __future__ import annotations

import itertools
import re
import shlex

from .argv import _PYTHON
from .code_text import KNOWN, MAX_ALTERNATIVES, Value, as_command, as_word, closing, unescape
from .code_values import WRITE_METHODS, Reader
from .languages import fetches

_URL = re.compile(r"(?i)(?:https?|ftp)://[^\s'\"]+$")
# A string literal of these languages ('…', "…", and JavaScript's `…` without `${`); its text in groups 1 to 3.
_STR = r"""(?:'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)"|`((?:[^`\\$\n]|\\.)*)`)"""
_STR_RE = re.compile(_STR)

# Calls that hand a string to a shell (or a list of words to a program), by language.
_SHELL_CALLS = {
    "python": r"\bos\.(?:system|popen)|\bsubprocess\.(?:run|call|check_call|check_output|Popen|getoutput|"
    r"getstatusoutput)|\bcommands\.getoutput|\bpty\.spawn",
    # zx's $`…` too
    "node": r"(?<![\w$])(?:exec|execSync|spawn|spawnSync|execFile|execFileSync)|\bBun\.spawn(?:Sync)?|\$(?=`)",
    "perl": r"(?<![\w$@%])(?:system|exec)",
    "ruby": r"(?<![\w$@:])(?:system|exec|spawn)|\bIO\.popen|\bOpen3\.\w+",
    "php": r"(?<![\w$>:])(?:system|exec|shell_exec|passthru|popen|proc_open)",
}
# Backquotes run a shell command in Perl, Ruby and PHP.
_BACKQUOTED = re.compile(r"`([^`\n]*)`")
_PERL_QX = re.compile(r"\bqx\s*(?:\{([^}\n]*)\}|\(([^)\n]*)\)|'([^'\n]*)'|/([^/\n]*)/)")
_RUBY_X = re.compile(r"%x\s*(?:\{([^}\n]*)\}|\(([^)\n]*)\)|\[([^\]\n]*)\])")

# Calls that delete a tree, by language: their first argument is the tree.
_TREE_DELETES = {
    "python": r"\bshutil\.rmtree",
    "node": r"(?<![\w$])(?:fs\.|fsp\.|promises\.)?(?:rmSync|rmdirSync|rm|rmdir)(?=\s*\()",  # recursive: below
    "perl": r"\b(?:rmtree|remove_tree)",
    "ruby": r"\bFileUtils\.(?:rm_rf|rm_r|remove_dir|remove_entry|remove_entry_secure|rmtree)",
    "php": r"(?!x)x",
}
# Calls that write (or delete) the file they are given first.
_FILE_WRITES = {
    "python": r"\bos\.(?:remove|unlink|rename|replace|truncate|chmod|chown)|\bshutil\.move",
    "node": r"(?<![\w$])(?:fs\.|fsp\.|promises\.)?(?:writeFileSync|writeFile|appendFileSync|appendFile|"
    r"createWriteStream|unlinkSync|unlink|renameSync|rename|chmodSync|chmod|truncateSync)",
    "perl": r"\b(?:unlink|rename|move|chmod\s*\(?\s*0?\d+\s*,)",
    "ruby": r"\bFile\.(?:write|delete|unlink|rename)|\bFileUtils\.(?:rm|rm_f|mv|touch)",
    "php": r"\b(?:file_put_contents|unlink|rename|chmod)",
}
# Calls that write the file they are given second: where a copy or a move goes (and a mode's path).
_SECOND_WRITES = {
    "python": r"\bos\.(?:rename|replace)|\bshutil\.(?:copy\w*|move)",
    "node": r"(?<![\w$])(?:fs\.|fsp\.|promises\.)?(?:renameSync|rename|copyFileSync|copyFile|cpSync)",
    "perl": r"\b(?:rename|copy|move)",
    "ruby": r"\bFile\.(?:rename|chmod)|\bFileUtils\.(?:mv|cp|cp_r|chmod|install)",
    "php": r"\b(?:rename|copy)",
}
# Python's open(P, MODE) with a mode that writes; Node's fs.openSync(P, "w"); Ruby's File.open(P, "w").
_OPEN = re.compile(r"(?<![\w.$])(?:open|io\.open|codecs\.open|File\.open|fs\.openSync|fs\.open|fopen)\(")
_MODE = re.compile(r"\s*,\s*(?:mode\s*=\s*)?" + _STR)
# A pathlib path that a write method is called on: Path(P).write_text(…), (Path.home() / P).touch().
_PATHLIB = re.compile(r"(?<![\w.])(?:pathlib\.)?Path(?:\.home)?\(|\(\s*(?=(?:pathlib\.)?Path\b)")
_PATHLIB_WRITE = re.compile(r"\s*\.\s*(?:" + "|".join(WRITE_METHODS) + r")\s*\(")
# Perl's open(F, ">P") and open(F, ">", P).
_PERL_OPEN = re.compile(
    r"\bopen\s*\(?\s*(?:my\s+)?[$\w]+\s*,\s*(?:['\"](\+?>>?|\+<)['\"]\s*,\s*"
    + _STR
    + r"|['\"]\s*(\+?>>?)\s*([^'\"\n]+)['\"])"
)
# Between a call's words: a comma, or a list's end and a comma (`spawn('git', ['push', '-f'])`).
_ELEMENT_END = re.compile(r"\s*(?:,|\]\s*,)\s*(?:\[\s*)?")
_COMMA = re.compile(r"\s*,")
_RECURSIVE = re.compile(r"recursive\s*:\s*true")  # Node's rm/rmdir options that delete a tree
_PY_EXEC = re.compile(r"\bos\.(exec|spawn)\w*\s*\(\s*(?:\[\s*)?")
_NAME_ALONE = re.compile(r"\s*([A-Za-z_]\w*)\s*(?=[,)])")
_KEYWORD_NEXT = re.compile(r"\s*=(?!=)")


def language(name: str) -> str | None:
    """The language whose inline code ``name`` runs (``python3.11``, ``nodejs``, ``bun`` …), if it is one read here."""
    if _PYTHON.match(name):
        return "python"
    if name in ("node", "nodejs", "bun", "deno"):
        return "node"
    if name in ("perl", "ruby", "php"):
        return name
    return None


def _text(m: re.Match[str], first: int = 1) -> str:
    """The text of the string literal whose groups start at ``first``, its backslash escapes undone the
    way the languages read the usual ones."""
    for g in range(first, first + 3):
        value = m.group(g)
        if value is not None:
            return unescape(value)
    return ""


def _each(table: dict[str, str]) -> dict[str, re.Pattern[str]]:
    return {lang: re.compile(r"(?:" + calls + r")(?![\w$])\s*\(?\s*") for lang, calls in table.items()}


_CALLS = {lang: re.compile(r"(?:" + c + r")(?![\w$])\s*\(?\s*(?:\[\s*)?") for lang, c in _SHELL_CALLS.items()}
_DELETES = _each(_TREE_DELETES)
_WRITES = _each(_FILE_WRITES)
_SECONDS = _each(_SECOND_WRITES)
_QUOTED_COMMANDS = {"perl": [_BACKQUOTED, _PERL_QX], "ruby": [_BACKQUOTED, _RUBY_X], "php": [_BACKQUOTED]}


def _known_start(value: Value) -> bool:
    """A path whose start the code spells out (a literal, ``~``, ``$HOME``): one hangar can place. A file
    written at a path the code computes whole (``open(f, 'w')`` in a loop over files) is left alone; a tree
    deleted there is not (``shutil.rmtree(d)`` is ``rm -rf "$d"``)."""
    return bool(value) and (value[0][0] != "var" or value[0][1] in KNOWN)


def commands(name: str, code: str) -> list[str]:
    """The shell commands ``name``'s inline ``code`` runs or stands for (see the module's docstring)."""
    lang = language(name)
    if lang is None:
        return []
    reader = Reader(lang, code)
    out: list[str] = []
    for m in _CALLS[lang].finditer(code):
        out += _call_command(reader, m.end())
    if lang == "python":  # os.execvp(file, [argv0, …]), os.spawnlp(mode, file, argv0, …): argv0 on
        for m in _PY_EXEC.finditer(code):
            words = _call_words(reader, m.end())[1 if m.group(1) == "exec" else 2 :]
            out += _as_words(words) if len(words) > 1 else []
    for quoted in _QUOTED_COMMANDS.get(lang, []):
        out += [next(g for g in x.groups() if g is not None) for x in quoted.finditer(code)]
    out += [
        f"rm -rf -- {as_word(v)}"
        for m in _DELETES[lang].finditer(code)
        if lang != "node"
        or _RECURSIVE.search(code, m.end(), closing(code, code.rfind("(", 0, m.end())) or len(code))
        for v in _argument(reader, m.end())
    ]
    written = [v for m in _WRITES[lang].finditer(code) for v in _argument(reader, m.end())]
    written += [v for m in _SECONDS[lang].finditer(code) for v in _argument(reader, m.end(), second=True)]
    for m in _OPEN.finditer(code):
        path = reader.expr(m.end())
        mode = _MODE.match(code, path[1]) if path else None
        if path and mode and re.search(r"[wax+]", _text(mode)):
            written += path[0]
    for m in _PATHLIB.finditer(code):
        path = reader.expr(m.start())
        if path and _PATHLIB_WRITE.match(code, path[1]):
            written += path[0]
    out += [f": > {as_word(v)}" for v in written if _known_start(v)]
    if fetches(code):  # `urlopen('https://…')`, `fetch('https://…')`: a request to that host, as curl makes
        out += [
            f"curl -- {shlex.quote(u)}" for u in (_text(m) for m in _STR_RE.finditer(code)) if _URL.match(u)
        ]
    if lang == "perl":
        for m in _PERL_OPEN.finditer(code):
            target = _text(m, 2) if m.group(1) is not None else (m.group(6) or "").strip()
            out.append(f": > {shlex.quote(target)}")
    return list(dict.fromkeys(out))


def _argument(reader: Reader, at: int, second: bool = False) -> list[Value]:
    """The values of a call's first argument (``second``: its second) that begins at ``at``."""
    got = reader.expr(at)
    if got is not None and second:
        comma = _COMMA.match(reader.code, got[1])
        got = reader.expr(comma.end()) if comma else None
    return got[0] if got else []


def _call_command(reader: Reader, at: int) -> list[str]:
    """The commands a call whose arguments begin at ``at`` runs: its one argument as a shell command, or
    its arguments (a list, or several: ``system("rm", "-rf", d)``, ``spawn("rm", ["-rf", d])``) as the
    words of one; a name the code gives a list (``cmd = ['rm', '-rf', d]``) as that list's words."""
    alone = _NAME_ALONE.match(reader.code, at)
    lists = reader.list_starts(alone.group(1)) if alone else []
    if len(lists) == 1:
        if lists[0] not in reader.list_commands:  # read once, however many calls name it
            reader.list_commands[lists[0]] = _command_of(_call_words(reader, lists[0]))
        return reader.list_commands[lists[0]]
    return [] if lists else _command_of(_call_words(reader, at))


def _command_of(words: list[list[Value]]) -> list[str]:
    if not words:
        return []
    if len(words) == 1:  # one string given alone is a shell command (`os.system("rm -rf " + d)`)
        return [as_command(v) for v in words[0] if any(k == "text" and t.strip() for k, t in v)]
    return _as_words(words)


def _call_words(reader: Reader, at: int) -> list[list[Value]]:
    """The values of a call's arguments from ``at``, a list's elements among them. A keyword argument
    (``shell=True``) ends them."""
    code = reader.code
    words: list[list[Value]] = []
    while (got := reader.expr(at)) is not None and not _KEYWORD_NEXT.match(code, got[1]):
        words.append(got[0])
        more = _ELEMENT_END.match(code, got[1])
        if more is None:
            break
        at = more.end()
    return words


def _as_words(words: list[list[Value]]) -> list[str]:
    """The words as one command line, for each way of taking one value of each (``MAX_ALTERNATIVES``)."""
    combos = itertools.islice(itertools.product(*words), MAX_ALTERNATIVES)
    return [" ".join(as_word(w) for w in c) for c in combos]
