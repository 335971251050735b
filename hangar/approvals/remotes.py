"""The hosts the other network clients reach (ssh, scp, sftp, rsync, telnet, ftp, socat, HTTPie): after reading
untrusted content a connection to a host other than the sandbox is the taint gate's, as curl's, wget's and
nc's are (``ProgramRules.network``); and the gh commands that write to GitHub as ``gh pr create`` does
(``ProgramRules.gh``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .argv import options
from .downloads import aria2c_options
from .paths import host_of, remote_path
from .shell import Word
from .writers import _RSYNC_LONG, _RSYNC_SHORT

_SSH_VALUES = "BbcDEeFIiJLlmOoPpQRSWw"
_SCP_VALUES = "cDFiJloPSX"
_HTTPIE = frozenset({"http", "https", "xh", "xhs"})
REMOTE_CLIENTS = (
    frozenset({"ssh", "scp", "sftp", "rsync", "telnet", "ftp", "lftp", "socat", "aria2c"}) | _HTTPIE
)
# socat's addresses that connect out: TYPE:host:port (PROXY:proxy:host:port goes to the proxy first).
_SOCAT_CONNECT = frozenset(
    "tcp tcp4 tcp6 tcp-connect tcp4-connect tcp6-connect udp udp4 udp6 udp-connect udp4-connect "
    "udp6-connect udp-sendto udp4-sendto udp6-sendto openssl openssl-connect ssl socks socks4 socks4a "
    "socks5 socks5-connect proxy proxy-connect sctp sctp-connect dccp-connect".split()
)
_HTTP_METHOD = re.compile(r"^(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS|TRACE|CONNECT|QUERY)$", re.IGNORECASE)


def remote_hosts(name: str, args: Sequence[Word]) -> list[str | None]:
    """The hosts ``name`` connects to (None for one hangar cannot tell); empty when it reaches none."""
    if name == "ssh":
        parsed = options(args, _SSH_VALUES)
        hosts = [host_of(v) for v in parsed.texts("-J")]
        if parsed.operands:
            hosts.append(host_of(parsed.operands[0].text))
        return hosts
    if name in ("scp", "sftp", "rsync"):
        if name == "rsync":
            parsed = options(args, _RSYNC_SHORT, _RSYNC_LONG)
        else:
            parsed = options(args, _SCP_VALUES if name == "scp" else "BbcDFilPRSso")
        hosts = []
        for k, word in enumerate(parsed.operands):
            remote, host = remote_path(word.text)
            if remote:
                hosts.append(host)
            elif name == "sftp" and k == 0:
                hosts.append(host_of(word.text))  # `sftp host`: the first operand is the host itself
        return hosts
    if name in ("telnet", "ftp", "lftp"):
        parsed = options(args, "bels" if name == "telnet" else "pu")
        return [host_of(parsed.operands[0].text)] if parsed.operands else []
    if name == "socat":
        hosts = []
        for word in options(args, "lLt").operands:
            fields = re.split(r"[:,]", word.text)
            if fields and fields[0].lower() in _SOCAT_CONNECT:
                host = fields[1] if len(fields) > 1 else ""
                hosts.append(host if host and "$" not in host else None)
        return hosts
    if name == "aria2c":
        parsed = aria2c_options(args)
        hosts = [host_of(w.text) for w in parsed.operands]
        if parsed.has("-i", "--input-file", "-T", "--torrent-file", "-M", "--metalink-file"):
            hosts.append(None)  # its URLs are in a file hangar does not read
        return hosts
    if name in _HTTPIE:
        for word in args:
            text = word.text
            if text.startswith("-") or _HTTP_METHOD.match(text):
                continue
            if text.startswith(":"):
                return ["localhost"]  # HTTPie's shorthand for localhost (`http :3000/x`)
            return [host_of(text)]
        return []
    return []


_GH_API_VALUES = (
    "--method",
    "--field",
    "--raw-field",
    "--header",
    "--input",
    "--jq",
    "--template",
    "--preview",
)
_GH_FIELDS = ("-f", "-F", "--field", "--raw-field")


# A git reference of a branch in the REST API's path (repos/OWNER/REPO/git/refs/heads/NAME).
_GH_BRANCH_REF = re.compile(r"(?:^|/)git/refs/heads/[^?]+")


def gh_writes(args: Sequence[Word]) -> list[tuple[str, str]]:
    """What a gh command does that the rules name, as (rule, what): a write to GitHub as ``gh pr create`` is
    (``taint-push``: "gh pr create", "gh api POST"), and the REST API's branch deletion (``DELETE
    …/git/refs/heads/X``, or deleting the repository) and forced update (``PATCH … -F force=true``), which are
    ``git push --delete`` and ``git push --force`` by another road."""
    words: list[str] = []
    i = 0
    while i < len(args) and len(words) < 2:
        lit = args[i].literal or ""
        i += 1
        if lit in ("-R", "--repo"):
            i += 1
        elif not lit.startswith("-"):
            words.append(lit)
    if words in (["pr", "create"], ["pr", "new"]):
        return [("taint-push", "gh pr create")]
    if words == ["pr", "merge"]:
        return [("taint-push", "gh pr merge")]
    if words == ["repo", "delete"]:
        return [
            ("taint-push", "gh repo delete"),
            ("branch-delete", "deletes a GitHub repository, every branch"),
        ]
    if words[:1] != ["api"]:
        return []
    # `gh api` is a GET unless -X says otherwise, or a POST once it sends fields or a body: what `gh pr create`
    # does can be done so (POST repos/o/r/pulls).
    parsed = options(args, "XfFHpqtR", (*_GH_API_VALUES, "--hostname", "--cache"))
    methods = parsed.texts("-X", "--method")
    fields = parsed.texts(*_GH_FIELDS)
    if methods:
        method = methods[-1].upper()
    elif not parsed.has(*_GH_FIELDS, "--input"):
        method = "GET"
    elif parsed.operands[1:2] and parsed.operands[1].literal == "graphql" and not parsed.has("--input"):
        # A GraphQL query is sent as a POST but reads; a mutation (or fields from a file hangar cannot see) writes.
        method = "POST" if any("mutation" in f or "@" in f for f in fields) else "GET"
    else:
        method = "POST"
    if method == "GET":
        return []
    out = [("taint-push", f"gh api {methods[-1] if methods else method}")]
    endpoint = parsed.operands[1].text if len(parsed.operands) > 1 else ""
    if _GH_BRANCH_REF.search(endpoint):
        if method == "DELETE":
            out.append(("branch-delete", "deletes a remote branch through GitHub's API"))
        elif method == "PATCH" and any(f.replace(" ", "") in ("force=true", "force=1") for f in fields):
            out.append(("force-push", "force-updates a remote branch through GitHub's API"))
    return out
