"""The files a download saves (``curl -o f URL``, ``curl -O URL``, ``wget URL``, ``aria2c URL``), so that running one later in
the same command line (``curl -o i.sh URL && sh i.sh``, ``wget URL/get.py; python3 get.py``) counts as
piping a download into a shell: the script is the download either way. So does running a file from where
an archive it downloaded was unpacked (``curl -LO URL/a.tgz && tar xzf a.tgz && ./a/install.sh``): which
files the archive holds is not known, so any file run from under that directory may be one of them."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import DOWNLOADERS, Parsed, options
from .paths import Where, locate, render, render_value
from .shell import Word
from .writers import copy_options, tar_extracts

SAVERS = DOWNLOADERS | {"aria2c"}  # what saves a download to a file it names (or the URL does)
# aria2c's options that take a value as the next word (most are given as --name=value)
ARIA2C_SHORT = "dijklmostxCMTUN"
ARIA2C_LONG = ("--dir", "--out", "--input-file", "--max-connection-per-server", "--split", "--torrent-file")


def aria2c_options(args: Sequence[Word]) -> Parsed:
    return options(args, ARIA2C_SHORT, ARIA2C_LONG)


def _url_name(url: str) -> str:
    """The file name curl -O and wget give a URL's download: its path's last part (wget: index.html)."""
    rest = url.split("://", 1)[-1]
    path = rest.split("?", 1)[0].split("#", 1)[0]
    return path.rpartition("/")[2] if "/" in path else ""


def saved(name: str, parsed: Parsed, where: Where) -> list[str]:
    """Where ``name`` (curl, wget or aria2c, its options ``parsed``) saves what it downloads: absolute paths, those
    hangar can resolve; standard output (``-o -``, ``-O-``) is a pipe, not a file."""
    urls = [render_value(u, where) for u in (*parsed.operands, *parsed.values.get("--url", []))]
    named: list[str] = []
    if name == "curl":
        named += [render_value(v, where) for v in parsed.given("-o", "--output")]
        if parsed.has("-O", "--remote-name", "--remote-name-all"):
            named += [n for n in map(_url_name, urls) if n]
        folders = parsed.values.get("--output-dir", [])
    elif name == "aria2c":
        outs = parsed.given("-o", "--out")
        named += [render_value(v, where) for v in outs] or [n for n in map(_url_name, urls) if n]
        folders = parsed.given("-d", "--dir")
    else:
        documents = parsed.given("-O", "--output-document")
        if documents:
            named += [render_value(v, where) for v in documents]
        else:
            named += [_url_name(u) or "index.html" for u in urls]
        folders = parsed.given("-P", "--directory-prefix")
    folder = render_value(folders[-1], where) if folders else ""
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


def located(word: Word, where: Where) -> str | None:
    """Where a word (a redirection's target, a script's operand) points, if hangar can resolve it."""
    return locate(render(word, where), where)


UNPACKERS = frozenset({"tar", "bsdtar", "unzip"})


def unpacked(name: str, args: Sequence[Word], where: Where) -> tuple[str, str] | None:
    """(the archive, the directory it is unpacked into) when ``name args`` unpacks one (``tar x -f A [-C D]``,
    ``unzip A [-d D]``), both as hangar resolves them; None otherwise."""
    if name == "unzip":
        parsed = options(args, "dx")
        archives: Sequence[Word | str] = parsed.operands[:1]
        into: Sequence[Word | str] = parsed.given("-d")
    else:
        found = tar_extracts(args)
        if found is None:
            return None
        archives, into = found
    if not archives:
        return None
    archive = locate(render_value(archives[-1], where), where)
    folder = locate(render_value(into[-1], where), where) if into else where.cwd
    return (archive, folder) if archive is not None and folder is not None else None


def renamed(name: str, args: Sequence[Word], saved: set[str], where: Where) -> list[str]:
    """The new names a download saved before gets from ``name args`` (``mv i.sh x``, ``cp i.sh bin/``): the
    destination, and the file's name inside it (whether it is a directory is not known)."""
    parsed = copy_options(name, args)
    explicit = parsed.given("-t", "--target-directory")
    operands = list(parsed.operands)
    if explicit:
        into: Word | str = explicit[-1]
    elif len(operands) >= 2:
        into = operands.pop()
    else:
        return []
    dest = locate(render_value(into, where), where)
    if dest is None:
        return []
    out: list[str] = []
    for source in operands:
        path = locate(render_value(source, where), where)
        if path is not None and path in saved:
            out += [dest, dest.rstrip("/") + "/" + path.rsplit("/", 1)[-1]]
    return out
