"""Where a path points, as far as the approvals rules can tell without touching the filesystem.

Paths are resolved lexically against the turn's working directory: ``~`` and ``$HOME`` are the agent's
HOME, ``$PWD`` is the turn's directory, ``$HANGAR_IO`` is the turn's hand-back directory. Nothing else
is known: a ``cd`` earlier in the same command, a symlink, or any other variable is not followed. That
is what makes the rules a guard rail rather than a sandbox.
"""

from __future__ import annotations

import functools
import ipaddress
import posixpath
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, NamedTuple

from .shell import Word

UNKNOWN = "\x00"  # stands for an expansion the rules cannot know
_SIMPLE_PARAM = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


class Where(NamedTuple):
    """The turn's places: the repository checkout, the agent's HOME, the turn's $HANGAR_IO. A tuple, so that
    the caches keyed on it (a long script's words look it up hundreds of times) hash and compare it in C."""

    cwd: str
    home: str
    hangar_io: str

    def known(self, name: str) -> str | None:
        return {"HOME": self.home, "PWD": self.cwd, "HANGAR_IO": self.hangar_io}.get(name) or None


def render(word: Word, where: Where) -> str:
    """The word's value with the known variables filled in and everything else as ``UNKNOWN``."""
    out: list[str] = []
    for p in word.parts:
        if p.kind in ("lit", "glob"):
            out.append(p.text)
        elif p.kind == "tilde":
            out.append(where.home if p.inner == "" and where.home else UNKNOWN)
        elif p.kind == "param":
            m = _SIMPLE_PARAM.match(p.text)
            value = where.known(m.group(1)) if m else None
            out.append(value if value is not None else UNKNOWN)
        else:
            out.append(UNKNOWN)
    return "".join(out)


def render_value(value: Word | str, where: Where) -> str:
    """An argument (a word, rendered) or an option's value cut from its word (``-ofile``: a string, expanded)."""
    return render(value, where) if isinstance(value, Word) else expand_string(value, where)


def expand_string(text: str, where: Where) -> str:
    """A path given as plain text (a file tool's argument, an option's ``=value``): ``~``, $HOME…"""
    if text == "~" or text.startswith("~/"):
        return where.home + text[1:] if where.home else UNKNOWN + text[1:]
    m = re.match(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?(?=/|$)", text)
    if m:
        value = where.known(m.group(1))
        return (value if value is not None else UNKNOWN) + text[m.end() :]
    return text


def normalize(path: str, where: Where) -> str:
    """Absolute and lexically normalised against the working directory."""
    if "/" not in path and path not in ("", ".", ".."):
        # One plain name (most words of a command): the working directory, normalised once, and the name.
        cwd = _normalized_dir(where.cwd or "/")
        if cwd.startswith("/"):
            return (cwd if cwd != "/" else "") + "/" + path
    if not path.startswith("/"):
        path = posixpath.join(where.cwd or "/", path)
    path = posixpath.normpath(path)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    return path


@functools.lru_cache(maxsize=64)
def _normalized_dir(path: str) -> str:
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def locate(path: str, where: Where) -> str | None:
    """Where a rendered path points, or None when its start is an unknown expansion (or it is empty)."""
    if not path or path.startswith(UNKNOWN):
        return None
    return normalize(path, where)


def within(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both normalised)."""
    if not root:
        return False
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


# ---------------------------------------------------------------------------------------------------
# credentials and hangar's own files


def credential(path: str, where: Where) -> str | None:
    """What secret ``path`` is (a short description), or None. The turn's own $HANGAR_IO is exempt.

    Secrets: ~/.ssh (and any ``.ssh`` directory), ``.git-credentials``, ``.netrc``, git's credential
    store, ~/.hangar, the other turns' directories beside $HANGAR_IO (the driver's ``io/``), another
    process's ``/proc/*/environ`` and ``/proc/*/mem``, the stores tools keep under HOME (``_HOME_STORES``:
    ~/.aws, ~/.config/gcloud, ~/.config/gh, ~/.docker/config.json, ~/.npmrc, ~/.kube/config, ~/.gnupg …),
    /etc/shadow and /etc/gshadow, a pod's /var/run/secrets, hangar's /var/run/hangar.

    ``path`` is absolute and normalised; unknown expansions in it (``UNKNOWN``) match anything, so
    ``/proc/$$/environ`` is the environment of a process.
    """
    places = turn_places(where)
    io = places.io
    if io and within(path, io):
        return None
    pattern = path.replace(UNKNOWN, "*")
    parts = pattern.split("/")
    base = parts[-1]

    # Only a path below HOME can be one of the secrets kept there: most paths are not, and skip those checks.
    at_home = bool(places.home) and pattern.startswith(places.home)

    if ".ssh" in parts:
        return "SSH keys and config (~/.ssh)"
    if base in (".git-credentials", ".netrc", "_netrc") or (
        at_home and within(pattern, places.git_credentials)
    ):
        return f"stored credentials ({base})"
    if at_home and within(pattern, places.hangar):
        return "hangar's files (~/.hangar)"
    if within(pattern, places.io_dir):
        # The driver keeps every turn's $HANGAR_IO side by side in its own io/ directory.
        return "another turn's hand-back files"
    if pattern.startswith("/proc/"):  # path does too: UNKNOWN is never one of these characters
        for proc in ("/proc/*/environ", "/proc/*/mem"):
            if fnmatchcase(pattern, proc) or fnmatchcase(path, proc):
                return (
                    "another process's "
                    + ("environment" if proc.endswith("environ") else "memory")
                    + f" ({proc})"
                )
    for rel, under in places.stores if at_home else ():
        if within(pattern, under):
            return f"stored credentials (~/{rel})"
    if pattern in ("/etc/shadow", "/etc/gshadow"):
        return f"password hashes ({pattern})"
    for dirs, what in _MOUNTED:
        if pattern.startswith(dirs) and any(within(pattern, d) for d in dirs):
            return what
    if _GLOB.search(path) is not None:
        return _globbed_credential(path, places)
    return None


_GLOB = re.compile(r"[*?[]")


def holds_credentials(path: str, where: Where) -> str | None:
    """What secret a directory holds below it, for a command that reads a whole tree (``grep -r x ~``, ``tar
    czf a.tgz /``), or None: HOME's stores, ~/.ssh, ~/.hangar, the driver's io/ (the other turns'), /proc's
    environments, /etc/shadow, a pod's /var/run/secrets. ``path`` is absolute and normalised; a path that
    is itself a secret is :func:`credential`'s."""
    if UNKNOWN in path:
        return None
    for what, place in _secret_places(turn_places(where)):
        if place != path and within(place, path):
            return f"a directory holding credentials ({what})"
    return None


@functools.lru_cache(maxsize=64)
def _secret_places(places: Places) -> tuple[tuple[str, str], ...]:
    """(what, where) of each place a secret is kept, for holds_credentials()."""
    home = places.home
    inside = [("~/.ssh", posixpath.join(home, ".ssh") if home else ""), ("~/.hangar", places.hangar)]
    inside += [(f"~/{rel}", under) for rel, under in places.stores]
    inside += [("the other turns' hand-back files", places.io_dir), ("/proc/*/environ", "/proc/1")]
    inside += [("/etc/shadow", "/etc/shadow"), ("/var/run/secrets", "/var/run/secrets")]
    inside += [("/run/secrets", "/run/secrets")]
    inside += [("hangar's files", d) for d in _HANGAR_RUN]
    return tuple((what, place) for what, place in inside if place)


def secret_places(places: Places) -> list[str]:
    """Where the secrets holds_credentials() knows are kept."""
    return [place for _, place in _secret_places(places)]


def _globbed_credential(path: str, places: Places) -> str | None:
    """What secret a path with glob characters may name once the shell expands it (``~/.s*/id_rsa``,
    ``~/.h?ngar``, ``/proc/1/env*``), or None. Only the path's own glob characters are read as patterns: an
    unknown expansion stays unknown (a variable is not taken to point at a secret)."""
    parts = path.split("/")
    if any(_name_matches(".ssh", p) for p in parts):
        return "SSH keys and config (~/.ssh)"
    base = parts[-1]
    if any(_name_matches(n, base) for n in (".git-credentials", ".netrc", "_netrc")):
        return f"stored credentials ({base})"
    places_of = [
        (places.git_credentials, "stored credentials (.git-credentials)"),
        (places.hangar, "hangar's files (~/.hangar)"),
        (places.io_dir, "another turn's hand-back files"),  # the own $HANGAR_IO was exempted before
        *((under, f"stored credentials (~/{rel})") for rel, under in places.stores),
        *((d, what) for dirs, what in _MOUNTED for d in dirs),
        ("/etc/shadow", "password hashes (/etc/shadow)"),
        ("/etc/gshadow", "password hashes (/etc/gshadow)"),
    ]
    for root, what in places_of:
        if root and _path_matches(root, parts):
            return what
    if len(parts) >= 4 and parts[1] == "proc" and any(_name_matches(n, parts[3]) for n in ("environ", "mem")):
        return "another process's environment or memory (/proc/*/environ, /proc/*/mem)"
    return None


def _path_matches(root: str, parts: list[str]) -> bool:
    """Whether the expansion of a path pattern (``parts``) may be ``root`` or lie below it."""
    names = root.split("/")
    return len(parts) >= len(names) and all(
        _name_matches(n, p) for n, p in zip(names, parts[: len(names)], strict=True)
    )


def _name_matches(name: str, pattern: str) -> bool:
    """Whether the shell's glob ``pattern`` matches the file name ``name``: a leading "." only explicitly."""
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatchcase(name, pattern)


# Where Kubernetes mounts a pod's service account token (and other projected secrets). hangar's sandbox pods
# mount none, but an environment's image or a cluster's mutating webhook may.
_POD_SECRETS = ("/var/run/secrets", "/run/secrets")
# Where a sandbox pod mounts hangar's own files: the run key (the driver's uid alone reads it) and the
# repository credentials (hangar_operator.sandbox_objects' KEY_DIR and REPO_CREDENTIALS_DIR).
_HANGAR_RUN = ("/var/run/hangar", "/run/hangar")
_MOUNTED = (
    (_POD_SECRETS, "the pod's mounted credentials (/var/run/secrets)"),
    (_HANGAR_RUN, "hangar's files (/var/run/hangar)"),
)


# What a rendered word must hold to possibly name a secret when it is a relative path below a working
# directory that relative_safe() clears: an absolute start, an option's "=value" that expand_string() makes
# absolute (starting "/", "~" or "$"), a way up (".."), or the name of a secret anywhere (.ssh, .netrc,
# _netrc, .git-credentials). An unknown expansion inside such a path is no sign: credential() reads it as one
# name ("*", matched only by /proc's patterns), below that working directory, which is not /proc's nor above.
MAYBE_SECRET = re.compile(r"\A/|=[/~$]|\.\.|\.ssh|netrc|\.git-credentials")
# The same for every plain word of a script's text at once (a word starts at the text's start or after a
# blank or an operator's character): False, and none of its words is a secret under relative_safe(). Each
# mark is looked for apart, by a substring search or a pattern that starts with one literal character: the
# regex engine skips to a literal in a tight loop, where a class of characters ("[/=.n]", one pattern for
# all) is tested at each position (3x slower on a long script, which each step of its quick check pays).
_OPTION_PATH = re.compile(r"=[/~$]")
_WORD_SLASH = re.compile(r"/(?<=[ \t\n;&|()<>]/)")


def maybe_secret_in(text: str) -> bool:
    """Whether some plain word of ``text`` may name a secret (:data:`MAYBE_SECRET` of any of its words)."""
    return (
        text.startswith("/")
        or ".." in text
        or ".ssh" in text
        or "netrc" in text
        or ".git-credentials" in text
        or ("=" in text and _OPTION_PATH.search(text) is not None)
        or ("/" in text and _WORD_SLASH.search(text) is not None)
    )


@functools.lru_cache(maxsize=64)
def relative_safe(where: Where) -> bool:
    """Whether :func:`credential` can find a secret in a relative path with no ".." only by the path's own
    names: the working directory is neither inside nor above any place it knows (HOME's stores, ~/.hangar,
    the driver's io/, /proc, /etc/shadow, /var/run/secrets), holds no ``.ssh`` and is not named as a secret
    file. Then a word that :data:`MAYBE_SECRET` does not match is no secret, and the rules skip the check of
    most words."""
    places = turn_places(where)
    cwd = places.cwd
    if not cwd.startswith("/") or UNKNOWN in cwd:
        return False
    names = cwd.split("/")
    if ".ssh" in names or names[-1] in (".git-credentials", ".netrc", "_netrc"):
        return False
    known = (places.io_dir, places.git_credentials, places.hangar, *(under for _, under in places.stores))
    for place in (*known, "/proc", "/etc/shadow", "/etc/gshadow", *_POD_SECRETS):
        if place and (within(cwd, place) or within(place, cwd)):
            return False
    return True


@dataclass(frozen=True)
class Places:
    """What :func:`credential` and the write rules compare a path with ("": nothing)."""

    cwd: str  # the working directory, normalised
    home: str  # HOME, normalised
    io: str  # $HANGAR_IO, normalised
    io_dir: str  # the driver's io/ directory that holds it and the other turns' ($HANGAR_IO's parent)
    git_credentials: str
    hangar: str
    stores: tuple[tuple[str, str], ...]  # (relative to HOME, absolute)


# The credentials tools keep under HOME (besides ~/.ssh, .git-credentials and .netrc, found anywhere): cloud
# CLIs' (AWS, gcloud: a GKE cluster's, Azure), gh's and hub's tokens, registry logins (docker, npm, PyPI,
# cargo, RubyGems), kubeconfig, GnuPG's keys, Vault's and Terraform's tokens.
_HOME_STORES = (
    ".aws",
    ".config/gcloud",
    ".azure",
    ".config/gh",
    ".config/hub",
    ".docker/config.json",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".kube/config",
    ".gnupg",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".claude/.credentials.json",  # the agent CLIs' own keys: Claude Code's and Codex's logins
    ".codex/auth.json",
)


@functools.lru_cache(maxsize=64)
def turn_places(where: Where) -> Places:
    """The turn's places, normalised, and the secrets' places under them: worked out once per ``where``."""
    io = normalize(where.hangar_io, where) if where.hangar_io else ""
    home = normalize(where.home, where) if where.home else ""
    parent = posixpath.dirname(io) if io else ""
    io_dir = parent if io and posixpath.basename(parent) == "io" else ""

    def under_home(rel: str) -> str:
        return posixpath.join(home, rel) if home else ""

    return Places(
        cwd=normalize(where.cwd or "/", where),
        home=home,
        io=io,
        io_dir=io_dir,
        git_credentials=under_home(".config/git/credentials"),
        hangar=under_home(".hangar"),
        stores=tuple((rel, under_home(rel)) for rel in _HOME_STORES),
    )


# ---------------------------------------------------------------------------------------------------
# /dev

DevKind = Literal["harmless", "network", "device"]
_HARMLESS_DEV = frozenset(
    {"/dev/null", "/dev/zero", "/dev/full", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty"}
    | {"/dev/random", "/dev/urandom"}
)


def dev_kind(path: str) -> DevKind | None:
    """What writing to a path under /dev does; None for anything that is a plain file."""
    if not path.startswith("/dev/"):
        return None
    if path in _HARMLESS_DEV or path.startswith(("/dev/fd/", "/dev/pts/")):
        return "harmless"
    if path.startswith(("/dev/tcp/", "/dev/udp/")):
        return "network"
    if path.startswith(("/dev/shm/", "/dev/mqueue/")):
        return None
    return "device"


# ---------------------------------------------------------------------------------------------------
# hosts

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


# A remote path of scp, sftp, rsync or tar: [user@]host:path (host:: for an rsync daemon), or an scp://, sftp://,
# rsync:// URL. A word with a slash before its first colon is a local path (`./a:b`), as those programs read it.
_REMOTE_PATH = re.compile(r"^(?:[^/:@]+@)?(\[[^\]]*\]|[^/:\[\]]+):")
_REMOTE_URL = re.compile(r"^(?:scp|sftp|rsync|ssh)://", re.IGNORECASE)


def remote_path(text: str) -> tuple[bool, str | None]:
    """Whether an operand of scp, sftp, rsync (or tar's archive) is on another host, and that host (None: an
    expansion hides it)."""
    if _REMOTE_URL.match(text):
        return True, host_of(text)
    m = _REMOTE_PATH.match(text)
    if m is None:
        return False, None
    host = m.group(1).strip("[]")
    if "$" in host or "`" in host:
        return True, None
    return True, host


def host_of(url: str) -> str | None:
    """The host a URL (or ``host[:port][/path]``, as curl and wget accept) names; None when unknown."""
    text = url.strip()
    if not text or UNKNOWN in text or "$" in text or "`" in text:
        return None
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if m:
        if m.group(1).lower() == "file":
            return "localhost"
        text = text[m.end() :]
    authority = re.split(r"[/?#]", text, maxsplit=1)[0]
    authority = authority.rsplit("@", 1)[-1]
    if authority.startswith("["):
        host = authority[1:].split("]", 1)[0]
    elif authority.count(":") > 1:
        host = authority  # a bare IPv6 address
    else:
        host = authority.split(":", 1)[0]
    host = host.strip().lower().rstrip(".")
    return host or None


def is_sandbox_host(host: str | None) -> bool:
    """localhost, 127.0.0.0/8, ::1, and 0.0.0.0 or :: as a destination are the sandbox itself."""
    if host is None:
        return False
    if host in _LOCAL_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    # 0.0.0.0 and :: as a destination reach this host (Linux connects them to the loopback).
    return address.is_loopback or address.is_unspecified
