"""Who may release (approve) or reject a job waiting in awaiting_approval, and the exact refusal texts that REST
and MCP share (hangar_api/release_rules.py)."""

from __future__ import annotations

import pytest

from hangar_api import release_rules as R
from hangar_api.auth import Caller

APPROVERS = ["carol", "dave"]


@pytest.mark.parametrize(
    ("who", "want"),
    [
        (Caller("carol", "jobs"), None),  # a policy approver with a login token
        (Caller("ops", "admin"), None),  # an admin
        (
            Caller("alice", "jobs"),
            "alice submitted job 'j1': a job can't be released or rejected by its own submitter",
        ),
        (
            Caller("alice", "admin"),  # never one's own job, admin or not
            "alice submitted job 'j1': a job can't be released or rejected by its own submitter",
        ),
        (
            Caller("carol", "mcp"),  # an approver's name on an mcp-only token is still an mcp-only token
            "carol has an mcp-only token (hangar connect): releasing or rejecting a job needs a person's login "
            "token",
        ),
        (
            Caller("bob", "jobs"),
            "bob may not release or reject job 'j1': only admins and the repository's policy approvers "
            "(carol, dave) may",
        ),
    ],
)
def test_who_may_release(who: Caller, want: str | None) -> None:
    assert R.refusal(who, "j1", "alice", APPROVERS) == want


def test_no_approvers_named() -> None:
    assert R.refusal(Caller("bob", "jobs"), "j1", "alice", []) == (
        "bob may not release or reject job 'j1': only admins and the repository's policy approvers (none named) may"
    )


def test_who_learns_the_job_exists() -> None:
    assert R.may_see(Caller("carol", "jobs"), "alice", APPROVERS)
    assert R.may_see(Caller("alice", "jobs"), "alice", APPROVERS)
    assert R.may_see(Caller("ops", "admin"), "alice", APPROVERS)
    assert R.may_see(Caller("bot", "mcp"), "alice", APPROVERS)
    assert not R.may_see(Caller("bob", "jobs"), "alice", APPROVERS)
