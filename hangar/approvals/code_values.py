"""The strings another language's inline code builds from pieces, as shell text the rules can read.

``os.system('rm -rf ' + d)``, ``f"rm -rf {d}"``, ``"rm -rf %s" % d``, ``'{}'.format(d)``, a JavaScript
template's ``${d}``, Ruby's ``#{d}``, Perl's and PHP's ``"$d"`` and ``.``: literal text beside a value the code
computes. A name the code gives only values it spells out (``d = 'build'``, ``cmd = 'rm -rf ' + d``) stands
for each of them; any other value is one hangar cannot know, written as a shell variable (``$d``) that the
rules treat as a shell command's unknown ``$d``: ``shutil.rmtree(d)`` is a recursive delete of a path hangar
cannot resolve, as ``rm -rf "$d"`` is. What the code reads of its environment is the shell's
(``os.environ['HOME']``, ``process.env.HOME``, ``ENV['HOME']``, ``$ENV{HOME}`` are ``$HOME``;
``Path.home()``, ``os.homedir()``, ``expanduser('~…')`` are ``~``; ``os.getcwd()`` is ``$PWD``), and
``os.path.join``, ``path.join``, ``File.join`` and pathlib's ``/`` join with ``/``.

Each value is a list of pieces: ``("text", t)`` literal text, ``("var", NAME)`` a shell variable, ``("home",
"~")``. A value may stand for several strings (a name given several literals): :meth:`Reader.expr` gives
each, at most ``MAX_ALTERNATIVES`` (beyond that a piece is unknown).
"""

from __future__ import annotations

import re

from .code_text import (
    LITERAL,
    MAX_ALTERNATIVES,
    Value,
    closing,
    home_first,
    joined,
    product,
    ruby_string_end,
    unescape,
    unknown,
)

_NAME = {
    "python": re.compile(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*"),
    "node": re.compile(r"[A-Za-z_$][\w$]*(?:\s*\??\.\s*[A-Za-z_$][\w$]*)*"),
    "ruby": re.compile(r"(?:::)?[A-Za-z_]\w*[?!]?(?:\s*(?:\.|::)\s*[A-Za-z_]\w*[?!]?)*"),
    "perl": re.compile(r"[$@%]?[A-Za-z_]\w*(?:::\w+)*(?:->\w+)*"),
    "php": re.compile(r"\$?[A-Za-z_]\w*(?:(?:->|::)\w+)*"),
}
_JOIN_OP = {"python": r"[+/]", "node": r"\+", "ruby": r"\+", "perl": r"\.(?![.=\d])", "php": r"\.(?![.=\d])"}
_JOINS = {lang: re.compile(r"\s*(" + op + r")\s*") for lang, op in _JOIN_OP.items()}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_WS = re.compile(r"\s*")
_KEYWORD = re.compile(r"\s*(\w+)\s*=(?!=)")
_COMMA = re.compile(r"\s*,\s*")
_CLOSE = re.compile(r"\s*\)")
_PERCENT = re.compile(r"\s*%(?!=)\s*")
_FORMAT = re.compile(r"\.format\(")
_SUBSCRIPT = re.compile(r"\s*[\[{]\s*")
_SUBSCRIPT_END = re.compile(r"\s*[\]}]")
_METHOD = re.compile(r"\s*\.\s*([A-Za-z_]\w*)")
# An assignment (`d = …`, `const d = …`, Perl's and PHP's `$d = …`), by whether names take a `$`.
_ASSIGN = {
    sigil: re.compile(
        r"(?<![\w.$@>:])(?:(?:const|let|var|my|our|local)\s+)?"
        + (r"\$" if sigil else "")
        + r"([A-Za-z_]\w*)\s*([-+*/.%|&^]?)=(?![=>~])"
    )
    for sigil in (False, True)
}
# A loop's variable: over a list written out (group 1), or anything else (2, 3: PHP's foreach … as $d).
_LOOPS = {
    sigil: re.compile(
        r"\bfor(?:each)?\s*\(?\s*(?:(?:const|let|var|my)\s+)?"
        + (r"\$" if sigil else "")
        + r"([A-Za-z_]\w*)\s*(?:\b(?:in|of)\b\s*)?(?=[\[(])|\bfor\s+([A-Za-z_]\w*)\s+(?:in|of)\b"
        r"|\bforeach\s*\([^)\n]{0,200}?\bas\s+\$(\w+)"
    )
    for sigil in (False, True)
}
_TEMPLATE_HOLE = re.compile(r"\$\{")
_FSTRING_HOLE = re.compile(r"\{")
_RUBY_HOLE = re.compile(r"#\{")
_FSTRING_SUFFIX = re.compile(r"![rsa]|:(?![:=])|=$")
_SIGIL_HOLE = re.compile(r"\{?\$(?:ENV\{\s*['\"]?(\w+)['\"]?\s*\}|\{(\w+)\}|(\w+))\}?")
_SPACES = re.compile(r"\s+")
_NUMBER = re.compile(r"\d[\w.]*")
_ITEM_END = re.compile(r"\s*(?:,\s*)?([\])])?(?(1)|(?<=,))")
_STATEMENT_END = re.compile(r"[ \t]*(?:[;\n#]|//|$|\bend\b)")
_PERCENT_HOLDER = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdirfxXoeEgGc]")
_FORMAT_HOLDER = re.compile(r"\{(\w*)(?:![rsa])?(?::[^{}]*)?\}")
_MAX_NESTING = 16
_MAX_HOLE_NESTING = 6  # each string and hole is a term: strings nested in holes three deep are read
# Calls whose value is a variable of the environment named by their first argument.
_ENV_CALLS = {"os.environ.get", "os.getenv", "getenv", "ENV.fetch", "process.env.get"}
_ENV_SUBSCRIPTED = {"os.environ", "ENV", "process.env", "$ENV", "$_ENV", "$_SERVER"}
_HOME_CALLS = {"Path.home", "pathlib.Path.home", "os.homedir", "Dir.home"}  # require('os').homedir(): _method
_CWD_CALLS = {"os.getcwd", "process.cwd", "Dir.pwd", "getcwd", "Path.cwd", "pathlib.Path.cwd"}
_JOIN_CALLS = {
    "os.path.join",
    "path.join",
    "posixpath.join",
    "File.join",
    "Path",
    "pathlib.Path",
    "path.resolve",
}
_SAME_CALLS = {
    "str",
    "String",
    "os.path.abspath",
    "os.path.normpath",
    "os.fspath",
    "path.normalize",
    "shlex.split",
}
_EXPAND_CALLS = {"os.path.expanduser", "File.expand_path", "expanduser"}
_RECEIVER = re.compile(r"[$@]?([A-Za-z_]\w*)\.([A-Za-z_]\w*)")
_SAME_METHODS = {"resolve", "absolute", "strip", "rstrip", "__str__", "as_posix", "to_s", "trim"}
# pathlib methods that write the path they are called on: a reading stops before them (inline_code.py).
WRITE_METHODS = ("write_text", "write_bytes", "unlink", "rename", "replace", "touch", "chmod", "rmdir")


class Reader:
    """Reads the string values of one language's code (see the module's docstring)."""

    def __init__(self, lang: str, code: str, root: Reader | None = None) -> None:
        self.lang, self.code = lang, code
        # Names are looked up in the whole code, also from an f-string's {…}: the whole code's reader (None:
        # this one; holding itself, each reader would be a reference cycle left to the collector).
        self._parent = root
        self._bound: dict[str, list[int] | None] | None = None
        self._values: dict[str, list[Value]] = {}  # each name's values, read once
        self._nesting = 0
        self._elements: set[int] = set()  # value starts that are a loop list's elements, not statements
        self.list_commands: dict[int, list[str]] = {}  # inline_code.py's reading of a list a name is given

    @property
    def _root(self) -> Reader:
        return self._parent or self

    # --- names the code assigns ---------------------------------------------------------------------------
    def _assignments(self) -> dict[str, list[int] | None]:
        """Each name the code assigns, with where its values begin; None when any assignment of it is not
        a plain ``name = value`` (``+=``, a loop variable, an unpacking)."""
        if self._bound is not None:
            return self._bound
        bound: dict[str, list[int] | None] = {}
        sigil = self.lang in ("perl", "php")
        for m in _ASSIGN[sigil].finditer(self.code):
            name, op = m.group(1), m.group(2)
            if op:
                bound[name] = None
            elif bound.get(name, []) is not None:
                bound.setdefault(name, []).append(m.end())  # type: ignore[union-attr]
        for m in _LOOPS[sigil].finditer(self.code):
            name = m.group(1) or m.group(2) or m.group(3)
            items = self._literal_items(m.end()) if m.group(1) else None
            if items is None or bound.get(name, []) is None:
                bound[name] = None
            else:  # `for d in ['build', 'dist']:`: each element is a value of d
                bound.setdefault(name, []).extend(items)  # type: ignore[union-attr]
                self._elements.update(items)
        self._bound = bound
        return bound

    def _literal_items(self, at: int) -> list[int] | None:
        """Where the elements of the list or tuple of string literals at ``at`` begin; None if it is not one."""
        code, items = self.code, []
        i = at + 1
        while (lit := LITERAL.match(code, _WS.match(code, i).end())) is not None:  # type: ignore[union-attr]
            items.append(lit.start())
            sep = _ITEM_END.match(code, lit.end())
            if sep is None:
                return None
            if sep.group(1):
                return items
            i = sep.end()
        return None

    def list_starts(self, name: str) -> list[int]:
        """Where the elements of the lists the code gives ``name`` begin (after each ``[``): only when every
        value it is given is a list written out (``cmd = ['rm', '-rf', d]``), at most ``MAX_ALTERNATIVES``."""
        starts = self._root._assignments().get(name) or []
        code = self._root.code
        opens = [_WS.match(code, at).end() for at in starts]  # type: ignore[union-attr]
        if not opens or len(opens) > MAX_ALTERNATIVES or any(not code.startswith("[", i) for i in opens):
            return []
        return [i + 1 for i in opens]

    def _name_value(self, name: str) -> list[Value]:
        """The values the code gives ``name``: each, if every assignment of it is a value read here (at most
        ``MAX_ALTERNATIVES``), else one unknown. Read once; a name met while its own value is being read
        (``d = d + 'x'``) is unknown there."""
        if self._parent is not None:
            return self._parent._name_value(name)
        if name in self._values:
            return self._values[name]
        self._values[name] = unknown_value = unknown(name)
        starts = self._assignments().get(name)
        if not starts or len(starts) > MAX_ALTERNATIVES:
            return unknown_value
        out: list[Value] = []
        for at in starts:
            got = self.expr(at)
            # The whole statement must be the value (`d = 'a' if x else '/'` is not one), or the element.
            end = _ITEM_END if at in self._elements else _STATEMENT_END
            if got is None or not end.match(self.code, got[1]):
                return unknown_value
            out += got[0]
        self._values[name] = out[:MAX_ALTERNATIVES] or unknown_value
        return self._values[name]

    # --- literals ---------------------------------------------------------------------------------------
    def _literal(self, m: re.Match[str]) -> list[Value]:
        prefix, sq, dq, bq = m.group(1).lower(), m.group(2), m.group(3), m.group(4)
        raw = "r" in prefix
        if bq is not None:
            if self.lang == "node":
                return self._interpolated(bq, _TEMPLATE_HOLE, raw)
            return [[("text", unescape(bq, raw))]]
        # Python interpolates f-strings only; the others their double-quoted strings.
        if ("f" not in prefix) if self.lang == "python" else sq is not None:
            return [[("text", unescape(sq if sq is not None else dq or "", raw))]]
        text = dq if dq is not None else sq or ""
        if self.lang == "python":  # an f-string
            return self._interpolated(text.replace("{{", "\0").replace("}}", "\1"), _FSTRING_HOLE, raw)
        if self.lang == "ruby":
            return self._interpolated(dq, _RUBY_HOLE, raw)
        if self.lang in ("perl", "php"):
            return self._sigils(dq)
        return [[("text", unescape(dq, raw))]]

    def _interpolated(self, text: str, opener: re.Pattern[str], raw: bool) -> list[Value]:
        parts: list[list[Value]] = []
        i = 0
        for m in opener.finditer(text):
            if m.start() < i:
                continue
            close = closing(text, m.end() - 1)
            if close is None:
                break
            parts.append([[("text", unescape(text[i : m.start()], raw))]])
            inner = _FSTRING_SUFFIX.split(text[m.end() : close - 1].strip())[0].strip()
            got = None
            if self._nesting < _MAX_HOLE_NESTING:  # a string in a hole of a string in a hole …: unknown
                sub = Reader(self.lang, inner, self._root)
                sub._nesting = self._nesting  # a hole's expression is as deep as the string it is in
                got = sub.expr(0)
            parts.append(got[0] if got and got[1] == len(inner) else unknown())
            i = close
        parts.append([[("text", unescape(text[i:], raw))]])
        return [[(k, v.replace("\0", "{").replace("\1", "}")) for k, v in val] for val in product(parts)]

    def _sigils(self, text: str) -> list[Value]:
        """Perl's and PHP's ``"… $d …"``, ``${d}``, ``{$d}``, ``$ENV{HOME}``."""
        parts: list[list[Value]] = []
        i = 0
        for m in _SIGIL_HOLE.finditer(text):
            if m.start() > 0 and text[m.start() - 1] == "\\":
                continue
            parts.append([[("text", unescape(text[i : m.start()]))]])
            env, name = m.group(1), m.group(2) or m.group(3)
            parts.append([[("var", env)]] if env else self._root._name_value(name))
            i = m.end()
        parts.append([[("text", unescape(text[i:]))]])
        return product(parts)

    # --- expressions ------------------------------------------------------------------------------------
    def expr(self, at: int) -> tuple[list[Value], int] | None:
        """The values of the expression that begins at ``at`` (its terms joined by the language's ``+``,
        ``.`` or pathlib's ``/``) and where it ends; None if no term begins there."""
        got = self._term(at)
        if got is None:
            return None
        parts, end = [got[0]], got[1]
        join = _JOINS[self.lang]
        while (j := join.match(self.code, end)) and not self.code.startswith("=", j.end(1)):
            nxt = self._term(j.end())
            if nxt is None:
                break
            if j.group(1) == "/":
                parts.append([[("text", "/")]])
            parts.append(nxt[0])
            end = nxt[1]
        return (parts[0] if len(parts) == 1 else product(parts)), end

    def _args(self, at: int) -> tuple[list[list[Value]], dict[str, list[Value]], int] | None:
        """A call's arguments from ``at`` (after its ``(``): positional values, keyword values, the end."""
        pos: list[list[Value]] = []
        kw: dict[str, list[Value]] = {}
        i = at
        while True:
            m = _KEYWORD.match(self.code, i)
            got = self.expr(m.end() if m else i)
            if got is None:
                break
            (kw.__setitem__(m.group(1), got[0]) if m else pos.append(got[0]))
            sep = _COMMA.match(self.code, got[1])
            i = sep.end() if sep else got[1]
            if sep is None:
                break
        close = _CLOSE.match(self.code, i)
        return (pos, kw, close.end()) if close else None

    def _term(self, at: int) -> tuple[list[Value], int] | None:
        if self._nesting >= _MAX_NESTING:  # deeper than code is written: unknown, and no deeper reading
            return None
        self._nesting += 1
        try:
            return self._read_term(at)
        finally:
            self._nesting -= 1

    def _read_term(self, at: int) -> tuple[list[Value], int] | None:
        code = self.code
        at = _WS.match(code, at).end()  # type: ignore[union-attr]
        if at >= len(code):
            return None
        if self.lang == "ruby" and code.startswith('"', at) and (stop := ruby_string_end(code, at)):
            return self._interpolated(code[at + 1 : stop - 1], _RUBY_HOLE, False), stop
        lit = LITERAL.match(code, at)
        if lit and (lit.group(1) == "" or self.lang == "python"):
            values, end = self._literal(lit), lit.end()
            if self.lang != "python":
                return values, end
            # Python joins literals written side by side ('a' 'b'; a triple-quoted one reads as three).
            parts = [values]
            while (nxt := LITERAL.match(code, _WS.match(code, end).end())) is not None:  # type: ignore[union-attr]
                parts.append(self._literal(nxt))
                end = nxt.end()
            return self._formatted(product(parts) if len(parts) > 1 else values, end)
        if code[at] == "(":
            inner = self.expr(at + 1)
            close = _CLOSE.match(code, inner[1]) if inner else None
            if inner is None or close is None:
                return None
            return self._trailers(inner[0], close.end())
        if number := _NUMBER.match(code, at):  # a mode, a count: an argument to read past
            return [[("text", number.group(0))]], number.end()
        name = _NAME[self.lang].match(code, at)
        if name is None:
            return None
        return self._named(_SPACES.sub("", name.group(0)), name.end())

    def _formatted(self, values: list[Value], end: int) -> tuple[list[Value], int]:
        """Python's ``'%s' % x`` and ``'{}'.format(x)`` after a literal: each placeholder its argument."""
        code = self.code
        if m := _PERCENT.match(code, end):
            at = m.end()
            if code.startswith("(", at):
                args = self._args(at + 1)
                fill, stop = (args[0], args[2]) if args else (None, None)
            else:
                one = self._term(at)
                fill, stop = ([one[0]], one[1]) if one else (None, None)
            if fill is not None and stop is not None:
                return self._fill(values, _PERCENT_HOLDER, fill, {}), stop
        if m := _FORMAT.match(code, end):
            args = self._args(m.end())
            if args is not None:
                return self._fill(values, _FORMAT_HOLDER, args[0], args[1]), args[2]
        return values, end

    def _fill(
        self, values: list[Value], holder: re.Pattern[str], pos: list[list[Value]], kw: dict[str, list[Value]]
    ) -> list[Value]:
        out: list[Value] = []
        for value in values:
            parts: list[list[Value]] = []
            n = 0
            for kind, text in value:
                if kind != "text":
                    parts.append([[(kind, text)]])
                    continue
                i = 0
                for m in holder.finditer(text):
                    parts.append([[("text", text[i : m.start()])]])
                    key = m.group(1) if m.groups() else ""
                    if key and key.isdigit():
                        arg = pos[int(key)] if int(key) < len(pos) else None
                    elif key:
                        arg = kw.get(key)
                    else:
                        arg, n = (pos[n] if n < len(pos) else None), n + 1
                    parts.append(arg or unknown())
                    i = m.end()
                parts.append([[("text", text[i:])]])
            out += product(parts)
        return out[:MAX_ALTERNATIVES]

    def _named(self, name: str, end: int) -> tuple[list[Value], int]:
        code = self.code
        values: list[Value] | None = None
        sub = _SUBSCRIPT.match(code, end)
        if name in _ENV_SUBSCRIPTED and sub:
            key = LITERAL.match(code, sub.end()) or _IDENT.match(code, sub.end())
            shut = _SUBSCRIPT_END.match(code, key.end()) if key else None
            env = (
                (key.group(2) or key.group(3)) if key and key.re is LITERAL else key.group(0) if key else None
            )
            if key and shut and env and _IDENT.fullmatch(env):
                return self._trailers([[("var", env)]], shut.end())
        if name.startswith("process.env.") and _IDENT.fullmatch(name[12:]):
            return self._trailers([[("var", name[12:])]], end)
        if name in ("Dir.home", "Dir.pwd", "__dirname"):  # node -e's __dirname is its working directory
            return self._trailers([[("home", "~")]] if name == "Dir.home" else [[("var", "PWD")]], end)
        if code.startswith("(", end):
            close = closing(code, end)
            args = self._args(end + 1)
            if args is not None and (close is None or args[2] == close):
                pos, _, after = args
                if (
                    name in _ENV_CALLS
                    and pos
                    and pos[0]
                    and len(pos[0][0]) == 1
                    and pos[0][0][0][0] == "text"
                ):
                    env = pos[0][0][0][1]
                    values = [[("var", env)]] if _IDENT.fullmatch(env) else None
                elif name in _HOME_CALLS:
                    values = [[("home", "~")]]
                elif name in _CWD_CALLS:
                    values = [[("var", "PWD")]]
                elif name in _JOIN_CALLS and pos:
                    values = joined(pos)
                elif name in _SAME_CALLS and len(pos) == 1:
                    values = pos[0]
                elif name in _EXPAND_CALLS and pos:
                    values = [home_first(v) for v in pos[0]]
                elif not pos and (method := _RECEIVER.fullmatch(name)) is not None:
                    # `d.strip()`, `p.expanduser()`: a method of a named value, read as its trailer
                    values = self._method(self._root._name_value(method.group(1)), method.group(2))
                if values is not None:
                    return self._trailers(values, after)
            if close is None:
                return unknown(name), end
            return self._trailers(unknown(name), close)
        lead = name.lstrip("$@%")
        if _IDENT.fullmatch(lead):
            return self._trailers(self._root._name_value(lead), end)
        return self._trailers(unknown(name), end)

    @staticmethod
    def _method(values: list[Value], method: str) -> list[Value]:
        """A method's value, called on ``values`` without arguments that matter here."""
        if method == "expanduser":
            return [home_first(v) for v in values]
        if method == "homedir":  # require('os').homedir()
            return [[("home", "~")]]
        return values if method in _SAME_METHODS else unknown(method)

    def _trailers(self, values: list[Value], end: int) -> tuple[list[Value], int]:
        """Methods and subscripts after a value: ``.expanduser()`` expands it, ``.resolve()`` and the like
        keep it, anything else makes it unknown (consumed); a pathlib write method ends the reading."""
        code = self.code
        while True:
            m = _METHOD.match(code, end)
            if m and code.startswith("(", m.end()) and m.group(1) not in WRITE_METHODS:
                close = closing(code, m.end())
                if close is None:
                    return values, end
                values, end = self._method(values, m.group(1)), close
                continue
            if code.startswith("[", end) and (close := closing(code, end)) is not None:
                values, end = unknown(), close
                continue
            return values, end
