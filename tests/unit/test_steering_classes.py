"""The class prefixes every intake reads (hangar.steering): recognised, stripped, nothing else touched."""

from __future__ import annotations

import pytest

from hangar.steering import CHOSEN_CLASSES, CLASSES, classify_prefix, parse_class


@pytest.mark.parametrize(
    ("text", "klass", "rest"),
    [
        ("fix: use the v2 client", "correction", "use the v2 client"),
        ("correction: the test is in tests/unit", "correction", "the test is in tests/unit"),
        ("redirect: do the CLI first", "redirect", "do the CLI first"),
        ("info: the staging DB is read-only", "new_info", "the staging DB is read-only"),
        ("FIX: shouting works", "correction", "shouting works"),
        ("  Info :spaces around the colon", "new_info", "spaces around the colon"),
        ("*fix*: Slack bold", "correction", "Slack bold"),
        ("_redirect_: Slack italics", "redirect", "Slack italics"),
        ("fix:\nline one\nline two", "correction", "line one\nline two"),
        ("redirect:", "redirect", ""),
    ],
)
def test_prefix_is_recognised_and_stripped(text: str, klass: str, rest: str) -> None:
    assert classify_prefix(text) == (klass, rest)


@pytest.mark.parametrize(
    "text",
    [
        "please fix: the import",  # not at the start
        "fixed: it already",  # another word
        "info-sec: rotate the key",
        "information: more",
        "fix the import",  # no colon
        "redirect the output to a file",
        "",
        "https://example.test/fix:1",
    ],
)
def test_anything_else_is_left_alone(text: str) -> None:
    assert classify_prefix(text) == ("unclassified", text)


def test_the_default_is_the_callers() -> None:
    # An answer to the agent's own question is new information unless the person says otherwise.
    assert classify_prefix("yes, keep the signature", default="new_info") == (
        "new_info",
        "yes, keep the signature",
    )
    assert classify_prefix("fix: no, change it", default="new_info") == ("correction", "no, change it")


def test_classes_match_the_resource_schema() -> None:
    assert set(CLASSES) == {"correction", "redirect", "new_info", "unclassified"}
    assert set(CHOSEN_CLASSES) == set(CLASSES) - {"unclassified"}


@pytest.mark.parametrize(
    ("word", "klass"),
    [
        ("correction", "correction"),
        ("fix", "correction"),
        ("Redirect", "redirect"),
        ("new_info", "new_info"),
        ("new-info", "new_info"),
        ("info", "new_info"),
    ],
)
def test_parse_class(word: str, klass: str) -> None:
    assert parse_class(word) == klass


@pytest.mark.parametrize("word", ["unclassified", "bug", "", "corrections"])
def test_parse_class_refuses_the_rest(word: str) -> None:
    with pytest.raises(ValueError, match="unknown class"):
        parse_class(word)
