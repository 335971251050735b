"""The api's tokens (hangar_api/auth.py): the tokens file and the admin token, and each entry the api
refuses to start with, named by its place and subject, never by its token."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hangar.config import Settings, SettingsError
from hangar_api.auth import Caller, Tokens

SECRET = "s3cr3t-token-value"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HANGAR_"):
            monkeypatch.delenv(name)


def tokens(tmp_path: Path, entries: Any, **settings: Any) -> Tokens:
    path = tmp_path / "tokens.yaml"
    path.write_text(entries if isinstance(entries, str) else json.dumps(entries))
    return Tokens.from_settings(Settings(api_tokens_file=path, **settings))


def test_entries_and_the_admin_token(tmp_path: Path) -> None:
    t = tokens(
        tmp_path,
        [
            {"token": "a-token", "subject": "alice", "role": "jobs"},
            {"token": "m-token", "subject": "bot", "role": "mcp"},
            {"token": "x-token", "subject": "ops", "role": "admin"},
        ],
        admin_token="root-token",
        admin_subject="root",
    )
    assert t.lookup("a-token") == Caller("alice", "jobs")
    assert t.lookup("m-token") == Caller("bot", "mcp")
    assert t.lookup("x-token") == Caller("ops", "admin")
    assert t.lookup("root-token") == Caller("root", "admin")
    assert t.lookup("nope") is None and t.lookup("") is None


def test_yaml_and_an_empty_file(tmp_path: Path) -> None:
    t = tokens(tmp_path, "- token: y-token\n  subject: yael\n  role: jobs\n")
    assert t.lookup("y-token") == Caller("yael", "jobs")
    assert tokens(tmp_path, "").lookup("y-token") is None


def test_no_file_and_no_admin_token_means_no_callers() -> None:
    assert Tokens.from_settings(Settings()).lookup("anything") is None


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [{"token": SECRET, "subject": "bob"}],
            "entry 1 (subject 'bob'): has no role: give one of admin, jobs, mcp",
        ),
        (
            [
                {"token": "t1", "subject": "a", "role": "jobs"},
                {"token": SECRET, "subject": "bob", "role": "root"},
            ],
            "entry 2 (subject 'bob'): unknown role 'root': the roles are admin, jobs, mcp",
        ),
        ([{"token": SECRET, "subject": "bob", "role": None}], "entry 1 (subject 'bob'): has no role"),
        ([{"subject": "bob", "role": "jobs"}], "entry 1 (subject 'bob'): has no token"),
        ([{"token": "", "subject": "bob", "role": "jobs"}], "entry 1 (subject 'bob'): has no token"),
        ([{"token": SECRET, "role": "jobs"}], "entry 1: has no subject"),
        ([{"token": SECRET, "subject": "bob", "rol": "jobs"}], "has no role"),
        ([{"token": SECRET, "subject": "bob", "role": "jobs", "team": 1}], "unknown keys team"),
        ([SECRET], "entry 1: must be a mapping"),
        ({"token": SECRET}, "must be a list"),
        (
            [
                {"token": SECRET, "subject": "a", "role": "jobs"},
                {"token": SECRET, "subject": "b", "role": "mcp"},
            ],
            "b's token is also a's",
        ),
        ("[unclosed", "not YAML or JSON"),
    ],
)
def test_an_entry_not_allowed_refuses_to_start(tmp_path: Path, entries: Any, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        tokens(tmp_path, entries)
    assert message in str(err.value)
    assert str(err.value).startswith("HANGAR_API_TOKENS_FILE")
    assert SECRET not in str(err.value)


def test_a_named_file_that_is_missing_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="can't read it"):
        Tokens.from_settings(Settings(api_tokens_file=tmp_path / "gone.yaml"))


def test_expired_and_revoked_tokens_are_refused_with_why(tmp_path: Path) -> None:
    t = tokens(
        tmp_path,
        [
            {"token": "old", "subject": "olga", "role": "jobs", "expires": "2020-01-01T00:00:00Z"},
            {"token": "later", "subject": "liam", "role": "jobs", "expires": "2999-01-01T00:00:00+00:00"},
            {"token": "gone", "subject": "gus", "role": "mcp", "revoked": True},
        ],
    )
    assert t.lookup("old") is None and t.lookup("gone") is None, "refused everywhere (MCP uses lookup)"
    who, why = t.check("old")
    assert who == Caller("olga", "jobs") and why == "expired token (it expired at 2020-01-01T00:00:00+00:00)"
    assert t.check("gone")[1] == "revoked token"
    assert t.lookup("later") == Caller("liam", "jobs") and t.check("later")[1] is None
    assert t.check("nope") == (None, "unknown token")
    assert Caller("liam", "jobs").kind == "login" and Caller("a", "admin").kind == "login"
    assert Caller("gus", "mcp").kind == "mcp"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"expires": "next week"}, "expires must be an ISO 8601 time"),
        ({"expires": "2027-01-01T00:00:00"}, "expires needs a time zone"),
        ({"expires": 5}, "expires must be an ISO 8601 time"),
        ({"revoked": "yes"}, "revoked must be true or false"),
    ],
)
def test_bad_expiry_or_revocation_stops_the_api(tmp_path: Path, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message) as err:
        tokens(tmp_path, [{"token": SECRET, "subject": "alice", "role": "jobs", **extra}])
    assert SECRET not in str(err.value)
