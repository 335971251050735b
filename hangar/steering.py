"""What every intake shares about steering: the classes of an intervention and the reply prefixes.

A steer, an interrupt and a job follow-up each carry a class (spec "Classifying steers"):

- ``correction``: the agent got it wrong;
- ``redirect``: the person changed the scope or the approach;
- ``new_info``: the person added something the task didn't say (an answer to the agent's own question is
  this by default);
- ``unclassified``: nobody said (the default, including steers and interrupts sent over REST or MCP).

Slack and Jira replies may start with ``fix:`` (or ``correction:``), ``redirect:`` or ``info:``: the reply is
classified on arrival and the prefix is stripped from what the agent gets. :func:`classify_prefix` is that
one function; every intake calls it, so they all read a prefix the same way.
"""

from __future__ import annotations

import re
from typing import Final, get_args

from .models.base import SteerClass

__all__ = [
    "ANSWER_CLASS",
    "CHOSEN_CLASSES",
    "CLASSES",
    "DEFAULT_CLASS",
    "classify_prefix",
    "parse_class",
]

CLASSES: Final[tuple[str, ...]] = get_args(SteerClass)
# What a person may say a steer was (``unclassified`` is the absence of an answer, not an answer).
CHOSEN_CLASSES: Final[tuple[str, ...]] = ("correction", "redirect", "new_info")
DEFAULT_CLASS: Final = "unclassified"
# An answer to the agent's own question (needs_input): the agent asked, so it is new information.
ANSWER_CLASS: Final = "new_info"

_PREFIXES: Final[dict[str, SteerClass]] = {
    "fix": "correction",
    "correction": "correction",
    "redirect": "redirect",
    "info": "new_info",
}
# The prefix word, any case, a colon, then the message. Leading blanks and markup a chat client adds to a
# reply (``*fix*:`` / ``_fix_:``) are allowed; "fixed: …" or "info-sec: …" is not a prefix.
_PREFIX_RE: Final = re.compile(
    r"^\s*[*_]?(?P<word>fix|correction|redirect|info)[*_]?\s*:\s*", re.IGNORECASE | re.DOTALL
)

# Words a person may type for a class (``hangar session classify``, Jira's ``/hangar class …``).
_ALIASES: Final[dict[str, SteerClass]] = {
    "correction": "correction",
    "fix": "correction",
    "redirect": "redirect",
    "new_info": "new_info",
    "new-info": "new_info",
    "info": "new_info",
}


def classify_prefix(text: str, default: SteerClass = "unclassified") -> tuple[SteerClass, str]:
    """Recognise and strip a class prefix: ``"fix: use the v2 client"`` → ``("correction", "use the v2
    client")``. Without a prefix the text comes back unchanged with ``default``.

    The message after a prefix may be empty (``"redirect:"``); the caller decides what that means (an
    intake refuses an empty steer, or classifies the person's last follow-up instead).
    """
    m = _PREFIX_RE.match(text)
    if m is None:
        return default, text
    return _PREFIXES[m.group("word").lower()], text[m.end() :].strip()


def parse_class(word: str) -> SteerClass:
    """A class a person typed (``correction``, ``fix``, ``redirect``, ``new_info``, ``info``) → the class.
    Raises ValueError for anything else, ``unclassified`` included: it is not something one chooses."""
    found = _ALIASES.get(word.strip().lower())
    if found is None:
        raise ValueError(f"unknown class {word!r}: say correction (or fix), redirect, or new_info (or info)")
    return found
