"""The label and annotation keys hangar puts on the objects it makes (one spelling for every process)."""

from __future__ import annotations

PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
SESSION = "hangar.dev/session"
TURN = "hangar.dev/turn"
RUN = "hangar.dev/run"
JOB = "hangar.dev/job"
ATTEMPT = "hangar.dev/attempt"
CREATED_BY = "hangar.dev/created-by"
SUBMITTER = "hangar.dev/submitter"
CHECKPOINT = "hangar.dev/checkpoint"
# A warm pool's sandbox: the Environment it was started for (pods, key Secrets, volumes), and on a claimed
# one the uid of the Session that claimed it (the claim's record; docs/architecture.md, warm pools).
POOL = "hangar.dev/pool"
CLAIMED_BY = "hangar.dev/claimed-by"
# The branch a session's checkout works on, and the base it starts from (a job's attempts get its own).
BRANCH = "hangar.dev/branch"
BASE_BRANCH = "hangar.dev/base-branch"
# Tower's receipt for a governed call (the webhook finds the Approval by it), and an annotation the webhook
# sets to tell the operator Tower answered (shadow: the answer is recorded, not applied).
TOWER_APPROVAL = "hangar.dev/tower-approval"
TOWER_DECISION = "hangar.dev/tower-decision"

# On the Approval of a call that asks (a person decides), set by the operator as it creates it: the times its
# status will hold (requestedAt, deadline), so that it is pending from its create on (docs/approvals.md).
REQUESTED_AT = "hangar.dev/requested-at"
DEADLINE = "hangar.dev/deadline"
SANDBOX_ASKED_AT = "hangar.dev/sandbox-asked-at"  # status.sandboxAskedAt's value, bounded, when there is one
ASKED_STAMPS = (REQUESTED_AT, DEADLINE, SANDBOX_ASKED_AT)

HANGAR = "hangar"


def part_of() -> dict[str, str]:
    return {PART_OF: HANGAR}


def session_selector(session: str) -> str:
    return f"{SESSION}={session}"
