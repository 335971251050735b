"""How an approval shows its command, and the hash that identifies a tool call."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

DISPLAY_LIMIT = 2000


def display_command(command: str, limit: int = DISPLAY_LIMIT) -> str:
    """The command as a person is shown it: whole up to ``limit`` characters.

    A longer one shows both ends (``limit`` characters in all, the first half at the start) with the cut
    marked in between: ``"[…N characters not shown…]"``, N being how many were left out.
    """
    if limit < 0:
        raise ValueError("limit must not be negative")
    if len(command) <= limit:
        return command
    head = (limit + 1) // 2
    tail = limit - head
    hidden = len(command) - limit
    end = command[len(command) - tail :] if tail else ""
    return f"{command[:head]}[…{hidden} characters not shown…]{end}"


def _plain(value: Any) -> Any:
    """JSON-ready: any Mapping becomes a dict, any non-string Sequence a list."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return [_plain(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, ASCII only: the same input always gives the same text."""
    return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)


def args_hash(tool: str, input: Mapping[str, Any]) -> str:
    """The hex sha256 of ``canonical_json({"input": input, "tool": tool})``.

    It is what matches a call Tower allowed to the call the resumed turn makes (spec 002: "the tool and
    the hash of its input"). Key order in ``input`` does not change it; any other difference does.
    """
    text = canonical_json({"input": input, "tool": tool})
    return hashlib.sha256(text.encode("ascii")).hexdigest()
