"""What the apiserver does to a body, as pure functions: merge patch, JSON Patch and label selectors.

Kept apart from the fake's store so each can be read (and unit-tested) against its RFC on its own.
Errors are ``ApiException`` with the status the apiserver answers with.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hangar.kube import ApiException
from hangar.kube import merge_patch as merge_patch  # RFC 7386: the one the operator applies too

REASONS = {
    400: "BadRequest",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def api_error(status: int, message: str, reason: str | None = None) -> ApiException:
    """An ``ApiException`` shaped like the one kubernetes_asyncio raises: ``status``, ``reason`` and a
    ``metav1.Status`` JSON ``body`` (callers read ``e.body`` for the message)."""
    why = reason or REASONS.get(status, "Unknown")
    e = ApiException(status=status, reason=why)
    e.body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": why,
            "code": status,
        }
    )
    return e


# RFC 6902 -------------------------------------------------------------------------------------------------
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise api_error(422, f"JSON pointer {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, append_ok: bool) -> int:
    if append_ok and token == "-":
        return len(container)
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise api_error(422, f"invalid array index {token!r} in {path}")
    i = int(token)
    if i > len(container) or (i == len(container) and not append_ok):
        raise api_error(422, f"array index {i} out of bounds in {path}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(cur, t, path, append_ok=False)]
        else:
            raise api_error(422, f"doc is missing path: {path}")
    return cur


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, append_ok=False)]
    raise api_error(422, f"doc is missing path: {path}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, append_ok=True), value)
    else:
        raise api_error(422, f"doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise api_error(422, "cannot remove the whole document")
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, append_ok=False))
    raise api_error(422, f"doc is missing path: {path}")


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Applies a JSON Patch to a copy of ``doc``; a failed ``test`` or a missing path is 422, like the
    apiserver (which applies all or nothing)."""
    out = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if not isinstance(path, str):
            raise api_error(400, f"operation {op!r} has no path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise api_error(400, f"operation {op!r} has no value")
        value = copy.deepcopy(op.get("value"))
        if kind == "add":
            out = _add(out, path, value)
        elif kind == "remove":
            out, _ = _remove(out, path)
        elif kind == "replace":
            out, _ = _remove(out, path)
            out = _add(out, path, value)
        elif kind == "test":
            if _get(out, path) != value:
                raise api_error(422, f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            src = op.get("from")
            if not isinstance(src, str):
                raise api_error(400, f"operation {op!r} has no from")
            if kind == "move":
                out, moved = _remove(out, src)
            else:
                moved = copy.deepcopy(_get(out, src))
            out = _add(out, path, moved)
        else:
            raise api_error(400, f"unknown JSON Patch operation {kind!r}")
    return out


# label selectors ------------------------------------------------------------------------------------------
# Label keys ("prefix/name") and values as the apiserver accepts them; anything else does not parse.
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(\s*({_VALUE}(?:\s*,\s*{_VALUE})*)\s*\)\s*$")
_CMP = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*({_VALUE})\s*$")
_HAS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _terms(selector: str) -> list[str]:
    """Splits on the commas between requirements, not those inside ``in (a,b)``."""
    out, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [t for t in out if t.strip()]


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def holds(self, labels: dict[str, str]) -> bool:
        has = self.key in labels
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not has or labels[self.key] not in self.values
        return has == (self.op == "exists")


def parse_selector(selector: str | None) -> list[_Requirement]:
    """A label selector's requirements (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``,
    ``a notin (x,y)``, comma-separated, all must hold). A malformed one is 400, as the apiserver says."""
    out: list[_Requirement] = []
    for term in _terms(selector or ""):
        if m := _SET.match(term):
            vals = frozenset(v.strip() for v in m.group(3).split(","))
            out.append(_Requirement(m.group(1), m.group(2), vals))
        elif m := _CMP.match(term):
            op = "!=" if m.group(2) == "!=" else "="
            out.append(_Requirement(m.group(1), op, frozenset({m.group(3)})))
        elif m := _HAS.match(term):
            out.append(_Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
        else:
            raise api_error(400, f"unable to parse requirement: {term!r}")
    return out


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate on a labels map for a label selector."""
    reqs = parse_selector(selector)
    return lambda labels: all(r.holds(labels) for r in reqs)
