"""The files a download saves (``curl -o f URL``, ``curl -O URL``, ``wget URL``), so that running one later in
the same command line (``curl -o i.sh URL && sh i.sh``, ``wget URL/get.py; python3 get.py``) counts as
piping a download into a shell: the script is the download either way."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import Parsed
from .paths import Where, expand_string, locate, render
from .shell import Word


def _text(value: Word | str, where: Where) -> str:
    return render(value, where) if isinstance(value, Word) else expand_string(value, where)


def _url_name(url: str) -> str:
    """The file name curl -O and wget give a URL's download: its path's last part (wget: index.html)."""
    rest = url.split("://", 1)[-1]
    path = rest.split("?", 1)[0].split("#", 1)[0]
    return path.rpartition("/")[2] if "/" in path else ""


def saved(name: str, parsed: Parsed, where: Where) -> list[str]:
    """Where ``name`` (curl or wget, its options ``parsed``) saves what it downloads: absolute paths, those
    hangar can resolve; standard output (``-o -``, ``-O-``) is a pipe, not a file."""
    urls = [_text(u, where) for u in (*parsed.operands, *parsed.values.get("--url", []))]
    named: list[str] = []
    if name == "curl":
        named += [_text(v, where) for v in parsed.values.get("-o", []) + parsed.values.get("--output", [])]
        if parsed.has("-O", "--remote-name", "--remote-name-all"):
            named += [n for n in map(_url_name, urls) if n]
        folders = parsed.values.get("--output-dir", [])
    else:
        documents = parsed.values.get("-O", []) + parsed.values.get("--output-document", [])
        if documents:
            named += [_text(v, where) for v in documents]
        else:
            named += [_url_name(u) or "index.html" for u in urls]
        folders = parsed.values.get("-P", []) + parsed.values.get("--directory-prefix", [])
    folder = _text(folders[-1], where) if folders else ""
    out: list[str] = []
    for file in named:
        if not file or file == "-":
            continue
        if folder and not file.startswith("/"):
            file = folder.rstrip("/") + "/" + file
        path = locate(file, where)
        if path is not None:
            out.append(path)
    return out


def saved_by_redirect(target: Word, where: Where) -> list[str]:
    """The file a download's standard output is redirected to (``curl -o - URL > i.sh``), if hangar can resolve it."""
    path = locate(render(target, where), where)
    return [path] if path is not None else []


def runs_saved(words: Sequence[Word], saved_paths: set[str], where: Where) -> str | None:
    """The first of ``words`` that names a file saved by a download earlier in the command line (its path),
    or None."""
    for word in words:
        path = locate(render(word, where), where)
        if path is not None and path in saved_paths:
            return path
    return None
