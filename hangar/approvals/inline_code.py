"""What another language's inline code runs, written as the shell commands the rules read.

``python3 -c "import os; os.system('rm -rf /')"`` runs ``rm -rf /``; ``node -e "execSync('git push -f')"``
runs ``git push -f``; ``perl -e '`rm -rf ~`'`` and ``ruby -e 'system("rm", "-rf", "/")'`` likewise. The file
calls that delete a tree or write a file are written as their shell equivalents too: ``shutil.rmtree(P)``
as ``rm -rf P``, ``open(P, "w")`` as a write to ``P`` (``: > P``), so the paths get the same rules as a shell
command's; and a request to a URL it names, when it names a fetch (``urlopen``, ``fetch`` …), as ``curl URL``
(the taint gate's network rule). The walker (``commands.py``) walks what :func:`commands` gives as a nested script.

Only string literals are read (and ``os.path.expanduser`` of one): code that builds a command or a path
from pieces at run time gets past, as a shell command that builds one does (a guard rail, not a sandbox).
"""

from __future__ import annotations

import re
import shlex

from .argv import _PYTHON
from .languages import fetches

_URL = re.compile(r"(?i)(?:https?|ftp)://[^\s'\"]+$")
# A string literal of these languages ('…', "…", and JavaScript's `…` without `${`); its text in groups 1 to 3.
_STR = r"""(?:'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)"|`((?:[^`\\$\n]|\\.)*)`)"""
_STR_RE = re.compile(_STR)
_ANY_STR = r"""(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""  # a literal, no groups
_ESCAPE = re.compile(r"\\(.)")

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

# A path argument: a literal, or os.path.expanduser / Path(…).expanduser of one.
_PATH = r"(?:os\.path\.expanduser\(\s*|File\.expand_path\(\s*)?" + _STR
# Calls that delete a tree, by language: their first argument is the tree.
_TREE_DELETES = {
    "python": r"\bshutil\.rmtree",
    "node": r"(?<![\w$])(?:fs\.|fsp\.|promises\.)?(?:rmSync|rmdirSync|rm|rmdir)(?=\s*\([^)]*recursive\s*:\s*true)",
    "perl": r"\b(?:rmtree|remove_tree)",
    "ruby": r"\bFileUtils\.(?:rm_rf|rm_r|remove_dir|remove_entry|remove_entry_secure|rmtree)",
    "php": r"(?!x)x",
}
# Calls that write (or delete) the file they are given first.
_FILE_WRITES = {
    "python": r"\bos\.(?:remove|unlink|rename|replace|truncate|chmod|chown)|\bshutil\.(?:copy\w*|move)\(\s*"
    + _ANY_STR
    + r"\s*,",
    "node": r"(?<![\w$])(?:fs\.|fsp\.|promises\.)?(?:writeFileSync|writeFile|appendFileSync|appendFile|"
    r"createWriteStream|unlinkSync|unlink|renameSync|rename|copyFileSync|copyFile|chmodSync|chmod|truncateSync)",
    "perl": r"\b(?:unlink|rename|chmod\s*\(?\s*0?\d+\s*,)",
    "ruby": r"\bFile\.(?:write|delete|unlink|rename|chmod)|\bFileUtils\.(?:rm|rm_f|mv|cp|touch|chmod)",
    "php": r"\b(?:file_put_contents|unlink|rename|chmod)",
}
# Python's open(P, MODE) with a mode that writes; Node's fs.openSync(P, "w"); Ruby's File.open(P, "w");
# Perl's open(F, ">P") and open(F, ">", P).
_OPEN_WRITE = re.compile(
    r"(?<![\w.$])(?:open|io\.open|codecs\.open|File\.open|fs\.openSync|fs\.open|fopen)\(\s*"
    + _PATH
    + r"\s*,\s*(?:mode\s*=\s*)?"
    + _STR
)
_PATH_WRITE = re.compile(
    r"\bPath\(\s*" + _STR + r"\s*\)\.(?:write_text|write_bytes|unlink|rename|touch|chmod)"
)
_PERL_OPEN = re.compile(
    r"\bopen\s*\(?\s*(?:my\s+)?[$\w]+\s*,\s*(?:['\"](\+?>>?|\+<)['\"]\s*,\s*"
    + _STR
    + r"|['\"]\s*(\+?>>?)\s*([^'\"\n]+)['\"])"
)


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
            return (
                _ESCAPE.sub(lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), value)
                if "\\" in value
                else value
            )
    return ""


def _strings(text: str) -> list[str]:
    return [_text(m) for m in _STR_RE.finditer(text)]


def _path(m: re.Match[str], first: int = 1) -> str:
    """A path argument as shell text: quoted, but a leading ``~`` left to expand when the code expands it."""
    value = _text(m, first)
    if ("expanduser(" in m.group(0) or "expand_path(" in m.group(0)) and value.startswith("~"):
        head, _, rest = value.partition("/")
        return head + ("/" + shlex.quote(rest) if rest else "")
    return shlex.quote(value)


def _each(table: dict[str, str], then: str) -> dict[str, re.Pattern[str]]:
    return {lang: re.compile(r"(?:" + calls + r")(?![\w$])\s*\(?\s*" + then) for lang, calls in table.items()}


_CALLS = _each(_SHELL_CALLS, r"(?:\[\s*)?")
_DELETES = _each(_TREE_DELETES, _PATH)
_WRITES = _each(_FILE_WRITES, _PATH)
_QUOTED_COMMANDS = {"perl": [_BACKQUOTED, _PERL_QX], "ruby": [_BACKQUOTED, _RUBY_X], "php": [_BACKQUOTED]}


def commands(name: str, code: str) -> list[str]:
    """The shell commands ``name``'s inline ``code`` runs or stands for (see the module's docstring)."""
    lang = language(name)
    if lang is None:
        return []
    out: list[str] = []
    for m in _CALLS[lang].finditer(code):
        out += _call_command(code, m.end())
    for quoted in _QUOTED_COMMANDS.get(lang, []):
        out += [next(g for g in x.groups() if g is not None) for x in quoted.finditer(code)]
    out += [f"rm -rf -- {_path(m)}" for m in _DELETES[lang].finditer(code)]
    out += [f": > {_path(m)}" for m in _WRITES[lang].finditer(code)]
    for m in _OPEN_WRITE.finditer(code):
        if re.search(r"[wax+]", _text(m, 4)):
            out.append(f": > {_path(m)}")
    out += [f": > {shlex.quote(_text(m))}" for m in _PATH_WRITE.finditer(code)]
    if fetches(code):  # `urlopen('https://…')`, `fetch('https://…')`: a request to that host, as curl makes
        out += [
            f"curl -- {shlex.quote(u)}" for u in (_text(m) for m in _STR_RE.finditer(code)) if _URL.match(u)
        ]
    if lang == "perl":
        for m in _PERL_OPEN.finditer(code):
            target = _text(m, 2) if m.group(1) is not None else (m.group(6) or "").strip()
            out.append(f": > {shlex.quote(target)}")
    return list(dict.fromkeys(out))


def _call_command(code: str, at: int) -> list[str]:
    """The command a call whose arguments begin at ``at`` runs: its first string literal as a shell
    command, or its literals (a list, or several arguments: ``system("rm", "-rf", "/")``,
    ``spawn("rm", ["-rf", "/"])``) as the words of one."""
    prefix = re.match(r"[rRbBuUfF]{0,2}(?=['\"])", code[at : at + 3])  # Python's r"…", f"…"
    first = _STR_RE.match(code, at + (prefix.end() if prefix else 0))
    if first is None:
        return []
    words = [_text(first)]
    rest = code[first.end() :]
    more = re.match(r"\s*[\],]\s*(?:\[\s*)?", rest)
    if more is None:
        return [words[0]]
    tail = re.match(r"(?:" + _STR + r"\s*[,\]]?\s*)+", rest[more.end() :])
    if tail is None:
        return [words[0]]
    words += _strings(tail.group(0))
    # One word given alone is a shell command (`os.system("rm -rf /")`); several are a program's words.
    return [shlex.join(words)]
