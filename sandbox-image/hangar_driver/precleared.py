"""The pre-cleared call: the one tool call Tower allowed while the session was suspended.

The operator puts it in the resumed run's Secret (key ``precleared``, mounted with the run key at mode 0400,
so only the driver's uid reads it) as ``{"v": 1, "call": "<json text>", "mac": "<hex>"}``, the MAC being
HMAC-SHA256 under the new run's key over ``"hangar-precleared-v1" NUL <run id> NUL <json text>``. The call
names the run, the turn it is for, the tool and its ``args_hash`` (sha256 of the canonical JSON of
``{"input": …, "tool": …}``, as ``hangar.approvals.args_hash`` computes it), and Tower's receipt.

The driver reads it once at start, tries to delete it (a kubelet's Secret volume is read-only; the local
runner's is not) and keeps it in memory until that turn makes the matching call, which it then allows once
without asking. A file that is not owned by the driver's uid, is writable by others, is too big, or whose MAC
does not verify under this run's key is ignored: the agent, which runs as another uid and never sees the
run key, can't make one.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from typing import Any, Dict, List, Mapping, Optional, Tuple

PURPOSE = b"hangar-precleared-v1"
MAX_SIZE = 64 * 1024
FIELDS = ("run", "turn", "tool", "args_hash")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)


def args_hash(tool: str, tool_input: Mapping[str, Any]) -> str:
    """The same hash as ``hangar.approvals.args_hash`` (a test keeps the two equal)."""
    text = canonical_json({"input": dict(tool_input), "tool": tool})
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def mac(key: bytes, run: str, text: str) -> str:
    return hmac.new(key, PURPOSE + b"\0" + run.encode() + b"\0" + text.encode(), hashlib.sha256).hexdigest()


def encode(key: bytes, call: Dict[str, Any]) -> str:
    """The file's content for ``call`` (which names its ``run``), signed with that run's ``key``."""
    text = canonical_json(call)
    return canonical_json({"v": 1, "call": text, "mac": mac(key, str(call["run"]), text)})


def decode(raw: bytes, key: bytes, run: str) -> Tuple[Optional[Dict[str, Any]], str]:
    """(the call, "") when ``raw`` is a pre-cleared call for ``run`` signed with ``key``; else (None, why)."""
    try:
        outer = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, "not JSON"
    if not isinstance(outer, dict) or outer.get("v") != 1:
        return None, "not a version 1 pre-cleared call"
    text, given = outer.get("call"), outer.get("mac")
    if not isinstance(text, str) or not isinstance(given, str):
        return None, "no call or no MAC"
    if not hmac.compare_digest(mac(key, run, text), given):
        return None, "its MAC does not verify under this run's key"
    try:
        call = json.loads(text)
    except ValueError:
        return None, "the call is not JSON"
    if not isinstance(call, dict) or not all(isinstance(call.get(f), str) and call.get(f) for f in FIELDS):
        return None, "the call lacks %s" % ", ".join(FIELDS)
    if call["run"] != run:
        return None, "it is for run %s" % call["run"]
    return call, ""


def load(path: Optional[str], key: bytes, run: str, warnings: List[str]) -> Optional[Dict[str, Any]]:
    """The pre-cleared call at ``path``, read once and deleted; None (with why in ``warnings``) otherwise."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None  # no call was pre-cleared for this run
    call: Optional[Dict[str, Any]] = None
    why = ""
    if not stat.S_ISREG(st.st_mode):
        why = "not a regular file"
    elif st.st_uid not in (0, os.geteuid()):
        why = "owned by uid %d, not the driver's" % st.st_uid
    elif st.st_mode & 0o022:
        why = "writable by other users (mode %o)" % stat.S_IMODE(st.st_mode)
    elif st.st_size > MAX_SIZE:
        why = "over %d bytes" % MAX_SIZE
    else:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_SIZE + 1)
            call, why = decode(raw, key, run)
        except OSError as exc:
            why = "unreadable: %s" % exc
    try:
        os.unlink(path)
    except OSError:
        pass  # a Secret volume is read-only: the call is kept in memory and used once all the same
    if call is None:
        warnings.append("pre-cleared call %s ignored: %s" % (path, why))
    return call


def matches(call: Optional[Dict[str, Any]], turn: Optional[str], tool: Any, tool_input: Any) -> bool:
    """Is this permission prompt the pre-cleared call (same turn, tool and args_hash)?"""
    if call is None or turn != call.get("turn") or tool != call.get("tool"):
        return False
    if not isinstance(tool_input, dict):
        return False
    return hmac.compare_digest(args_hash(str(tool), tool_input), str(call.get("args_hash")))
