"""A person's ``exec`` (and ``process`` start) under the session's approvals policy: judged like an agent's
Bash call by the same rules (``hangar.approvals``), with the session's taint.

An ``exec`` runs only on ``allow``. ``deny`` is refused with the policy's reason; ``ask`` (and governed's
"Tower decides") is refused too, saying why: the caller waits on the answer, and a person's command is not
held as an Approval (there is no turn to hold, and the one who could approve is the one asking). Send the
work to the agent instead (a message): its call is then asked, or filed with Tower, as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

from hangar.approvals import ToolCall, Verdict, decide
from hangar.models import Session

WORKSPACE = "/workspace"
AGENT_HOME = "/home/agent"


@dataclass(frozen=True)
class Judged:
    policy: str | None
    verdict: Verdict | None  # None: no policy in force yet (refused)

    @property
    def allowed(self) -> bool:
        return self.verdict is not None and self.verdict.decision == "allow"

    @property
    def refusal(self) -> str | None:
        """The tool error's text when the command may not run; None when it may."""
        v = self.verdict
        if v is None:
            return "refused: the session has no approvals policy in force yet (its sandbox has not started)"
        if v.decision == "allow":
            return None
        if v.decision == "deny":
            return f"refused: {v.reason}"
        why = "Tower decides it" if v.governed else "it needs a person's approval"
        return (
            f"refused: under the session's approvals policy ({self.policy}) {why} ({v.reason}); exec does "
            "not hold a command for approval: send it to the agent as a message, where it is asked as usual"
        )

    def audit(self) -> dict[str, object]:
        v = self.verdict
        return {
            "policy": self.policy,
            "verdict": v.decision if v else "deny",
            "rule": v.rule if v else "no-policy",
            "reason": v.reason if v else "no policy in force",
        }


def judge(s: Session, command: str) -> Judged:
    policy = s.status.policy or s.spec.approvals
    if policy is None:
        return Judged(None, None)
    call = ToolCall(
        tool="Bash",
        input={"command": command},
        command=command,
        cwd=WORKSPACE,
        home=AGENT_HOME,
        hangar_io="",
        tainted=s.status.taint.tainted,
    )
    return Judged(policy, decide(policy, call))
