"""What every driver command shares: the error a refused command raises and the checks of its fields.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

_SAFE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class CommandError(Exception):
    """A command refused or failed; the message goes into command_result.error."""


class NotLive(Exception):
    """The harness cannot take this request mid-turn (one-shot harness, or no turn running). Here, not in
    ``harness``, so that the driver's core needs no harness module before its hello."""


def safe_name(value: Any, limit: int = 128) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and value[0] not in ".-"
        and all(c in _SAFE_NAME_CHARS for c in value)
    )


def str_field(body: Dict[str, Any], field: str, required: bool = True, limit: int = 1 << 20) -> Optional[str]:
    """``body[field]`` as a string (non-empty when required, at most ``limit`` long); None when optional
    and absent. Raises CommandError otherwise."""
    value = body.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value) or len(value) > limit:
        raise CommandError(
            "%s must be a non-empty string" % field if required else "%s must be a string" % field
        )
    return value
