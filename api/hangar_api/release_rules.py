"""Who may release (approve) or reject a job that waits in ``awaiting_approval``, and the refusals' texts: one
set of strings for REST (``POST /api/jobs/{id}/approve|reject``) and MCP (``approve_job``/``reject_job``).

The rule, in the order it is checked: an mcp-only token (``hangar connect``) never may, whoever it names; a
job's own submitter never may, admin or not; an admin may; a login token whose subject is one of the
repository's policy approvers (``Environment.spec.repository.policy.approvers``) may; nobody else.

MCP tools must check the caller as its token says (``mcp_caller``), not as ``mcp.auth.acting`` widens it.
"""

from __future__ import annotations

from typing import Literal

from .auth import Caller

Decision = Literal["approve", "reject"]

MCP_TOKEN = (
    "{who} has an mcp-only token (hangar connect): releasing or rejecting a job needs a person's login token"
)
OWN_JOB = "{who} submitted job {job!r}: a job can't be released or rejected by its own submitter"
NOT_APPROVER = (
    "{who} may not release or reject job {job!r}: only admins and the repository's policy approvers "
    "({approvers}) may"
)
NOT_AWAITING = "job {job!r} is not awaiting approval (it is {state}): there is nothing to {verb}"
ALREADY = "job {job!r} was already {decision} by {by}"
NO_POLICY = "job {job!r} needs no release: its repository's policy doesn't ask for one"

VERBS: dict[Decision, str] = {"approve": "approve", "reject": "reject"}
DECIDED: dict[Decision, Literal["approved", "rejected"]] = {"approve": "approved", "reject": "rejected"}


def refusal(who: Caller, job: str, submitter: str, approvers: list[str]) -> str | None:
    """Why ``who`` may not release or reject ``job`` (None: they may). Their own job comes before their role:
    nobody releases their own work, admins included."""
    if who.kind == "mcp":
        return MCP_TOKEN.format(who=who.subject)
    if who.subject == submitter:
        return OWN_JOB.format(who=who.subject, job=job)
    if who.admin or who.subject in approvers:
        return None
    return NOT_APPROVER.format(who=who.subject, job=job, approvers=", ".join(approvers) or "none named")


def may_see(who: Caller, submitter: str, approvers: list[str]) -> bool:
    """Does ``who`` learn that the job exists? Its submitter, admins and its approvers do; other jobs tokens
    get the same 404 as for a job that doesn't exist."""
    return who.admin or who.kind == "mcp" or who.subject == submitter or who.subject in approvers
