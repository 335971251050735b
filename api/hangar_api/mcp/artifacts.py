"""Files the agent handed back (``hangar-agent artifact``): the ``hangar://sessions/<name>/artifacts/<turn>/<path>``
resource and the ``resource_link`` blocks ``wait_for_turn`` returns for them.

``<turn>`` is the turn's number (``2``) or its name (``api-fix-2``); ``<path>`` is the name the file was handed
back under (``artifacts[].name`` on the turn), percent-encoded as a URI segment. The bytes are in the turn's
``handback`` activity event: the driver sends a file of up to 1 MiB inline (base64) and the operator records
the event in the database, so the api reads them there and never talks to a sandbox. A larger file is listed
on the turn (name, size, sha256) but its bytes were not kept.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ResourceLink

from hangar.models import Turn
from hangar.models.base import NAME_MAX, NAME_PATTERN

from ..auth import Caller
from . import common
from .common import Hub

PREFIX = "hangar://sessions/"
TEMPLATE = "hangar://sessions/{name}/artifacts/{turn}/{path}"
_URI = re.compile(r"^hangar://sessions/([^/?#]*)/artifacts/(.*)$", re.DOTALL)
KEPT_BYTES = 1024 * 1024  # what the driver sends inline (hangar_driver.handback.MAX_INLINE_ARTIFACT)
OCTETS = "application/octet-stream"
# Types mimetypes doesn't know on every system, for files agents commonly hand back.
_EXTRA = {
    ".md": "text/markdown",
    ".log": "text/plain",
    ".txt": "text/plain",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".diff": "text/x-diff",
    ".patch": "text/x-diff",
    ".jsonl": "application/jsonl",
}
_TEXTUAL = {
    "application/json",
    "application/jsonl",
    "application/xml",
    "application/yaml",
    "application/toml",
    "application/javascript",
    "application/x-sh",
    "image/svg+xml",
}


@dataclass(frozen=True)
class ArtifactRef:
    session: str
    turn: str  # the turn's name
    name: str


def is_artifact_uri(uri: str) -> bool:
    return _URI.match(uri) is not None


def _invalid(uri: str, why: str) -> ToolError:
    return ToolError(f"invalid: {uri!r}: {why}")


def parse_uri(uri: str) -> ArtifactRef:
    """The session, turn and artifact an artifacts URI names. A malformed one, a path that is absolute or
    climbs out (``..``) is refused with the reason (``invalid: …``); nothing is looked up for it."""
    m = _URI.match(uri)
    if m is None:
        raise _invalid(uri, "not an artifacts URI: hangar://sessions/<name>/artifacts/<turn>/<path>")
    session, rest = m.group(1), m.group(2)
    if not re.fullmatch(NAME_PATTERN, session) or len(session) > NAME_MAX:
        raise _invalid(uri, f"session {session!r} is not a session name (a DNS label)")
    if "?" in rest or "#" in rest:
        raise _invalid(uri, "an artifact takes no query or fragment")
    turn_part, slash, raw_path = rest.partition("/")
    turn = unquote(turn_part)
    if turn.isdigit() and len(turn) <= 6:
        turn_name = f"{session}-{int(turn)}"
    elif re.fullmatch(re.escape(session) + r"-[0-9]{1,6}", turn):
        turn_name = turn
    else:
        raise _invalid(uri, f"turn {turn!r}: give the turn's number (2) or name ({session}-2)")
    if not slash or not raw_path:
        raise _invalid(uri, "no path: give …/artifacts/<turn>/<the artifact's name>")
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise _invalid(uri, "the path is not UTF-8 once percent-decoded") from None
    if "\x00" in path:
        raise _invalid(uri, "the path holds a NUL byte")
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", path):
        raise _invalid(uri, f"path {path!r} is absolute: give the artifact's name as the turn lists it")
    if any(part == ".." for part in re.split(r"[\\/]", path)):
        raise _invalid(uri, f"path {path!r} climbs out with '..': give the artifact's name")
    return ArtifactRef(session, turn_name, path)


def uri_for(session: str, turn_index: int, name: str) -> str:
    return f"{PREFIX}{session}/artifacts/{turn_index}/{quote(name, safe='')}"


def mime_type(name: str) -> str:
    """The artifact's MIME type, from its name (the same for a link and a read)."""
    suffix = ("." + name.rsplit(".", 1)[-1].lower()) if "." in name else ""
    return _EXTRA.get(suffix) or mimetypes.guess_type(name, strict=False)[0] or OCTETS


def textual(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXTUAL or mime.endswith(("+json", "+xml"))


def content(data: bytes, mime: str) -> str | bytes:
    """Text for a textual type that decodes as UTF-8; bytes (a base64 ``blob`` on the wire) otherwise."""
    if textual(mime):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return data


def links(structured: dict[str, Any]) -> list[ResourceLink]:
    """``wait_for_turn``'s artifacts as ``resource_link`` blocks: the turn it returns (``turn``: its session
    and index), each artifact's URI, name, MIME type and size."""
    turn = structured.get("turn")
    if not isinstance(turn, dict) or not turn.get("session") or not isinstance(turn.get("index"), int):
        return []
    out = []
    for a in structured.get("artifacts") or []:
        name = str(a.get("name") or "")
        if not name:
            continue
        out.append(
            ResourceLink(
                type="resource_link",
                uri=uri_for(str(turn["session"]), int(turn["index"]), name),
                name=name,
                mime_type=mime_type(name),
                size=int(a.get("size") or 0),
                description=f"{name}, handed back in turn {turn.get('name')}",
            )
        )
    return out


async def read(hub: Hub, who: Caller, uri: str) -> tuple[str | bytes, str]:
    """The artifact's content and MIME type, under the session's access rule."""
    ref = parse_uri(uri)
    await common.get_session(hub, who, ref.session)
    obj = await hub.kube.get("turns", ref.turn)
    if obj is None or (obj["metadata"].get("labels") or {}).get("hangar.dev/session") != ref.session:
        raise ToolError(f"not found: session {ref.session!r} has no turn {ref.turn!r}")
    listed = {a.name: a for a in Turn.model_validate(obj).status.artifacts}
    art = listed.get(ref.name)
    if art is None:
        have = ", ".join(sorted(listed)) or "none"
        raise ToolError(f"not found: turn {ref.turn!r} handed back no artifact {ref.name!r} (it has: {have})")
    kept: bytes | None = None
    for e in await hub.db.turn_events(f"session/{ref.session}", ref.turn, "handback"):
        p = e.payload
        if p.get("kind") != "artifact" or p.get("name") != ref.name or not p.get("content_b64"):
            continue
        try:
            data = base64.b64decode(str(p["content_b64"]), validate=True)
        except (binascii.Error, ValueError):
            continue
        # The turn lists the first file handed back under that name: the one whose digest it recorded.
        if not art.sha256 or hashlib.sha256(data).hexdigest() == art.sha256:
            kept = data
            break
    if kept is None:
        raise ToolError(
            f"not found: artifact {ref.name!r} of turn {ref.turn!r} is {art.size} bytes and its content was "
            f"not kept (hangar keeps the files handed back of up to {KEPT_BYTES} bytes)"
        )
    mime = mime_type(ref.name)
    return content(kept, mime), mime
