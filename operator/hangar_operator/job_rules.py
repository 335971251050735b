"""The rules a delivering job follows, as pure functions: what verification does next for an attempt, which
attempt of a best-of-N job is delivered (and why the others lost), the job's state from its attempts, and
the pull request's title and body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hangar.models.environment import Verification as VerificationSpec
from hangar.models.job import Attempt, Verification

# Which attempt state speaks for the job when attempts differ: whoever needs a person comes first, then work
# still going on; "verified" (an attempt ready to deliver) only once nothing else moves.
PRECEDENCE = (
    "awaiting_approval",
    "needs_input",
    "running",
    "verifying",
    "queued",
    "verified",
    "done",
    "failed",
    "cancelled",
)
REPAIRED_BY = "hangar:verification"  # Turn.spec.by of a repair turn: how they are counted, even after a crash
OUTPUT_TAIL = 4000


def job_state(states: list[str], cancelled: bool) -> str:
    if cancelled:
        return "cancelled"
    for s in PRECEDENCE:
        if s in states:
            return s
    return "failed"


@dataclass(frozen=True)
class Step:
    """What verification does for an attempt whose last turn completed."""

    state: str  # the attempt's state: verifying, verified, running (a repair turn), failed
    action: Literal["none", "verify", "repair"] = "none"
    outcome: str | None = None


def verification_step(
    attempt: Attempt, last_turn: str, spec: VerificationSpec | None, repairs_used: int
) -> Step:
    """After the agent's turn ``last_turn`` completed: verify it (once per turn), wait for the result, give a
    repair turn with the failure (while ``repairs_used`` < ``repair_turns``), or settle passed / failed."""
    if spec is None:
        return Step("verified")  # nothing to check: the finished work is what is delivered
    runs = [v for v in attempt.verifications if v.turn == last_turn]
    if not runs:
        return Step("verifying", "verify")
    last = runs[-1]
    if last.passed is None:
        return Step("verifying")
    if last.passed:
        return Step("verified")
    if repairs_used < spec.repair_turns:
        return Step("running", "repair")
    tries = repairs_used + 1
    return Step(
        "failed",
        outcome=f"verification failed ({_result(last)}) after {tries} {'try' if tries == 1 else 'tries'}",
    )


def _result(v: Verification) -> str:
    if v.error:
        return v.error
    if v.timed_out:
        return "timed out"
    return f"exit {v.exit_code}"


def repair_message(command: str, v: Verification) -> str:
    return (
        f"The verification command `{command}` failed ({_result(v)}). Its output ends with:\n\n"
        f"```\n{v.output_tail[-OUTPUT_TAIL:]}\n```\n\n"
        "Fix the work so that it passes, then finish."
    )


def rank(attempts: list[Attempt], costs: dict[int, float]) -> list[Attempt]:
    """The attempts that may be delivered, best first: verified ones only; then the smallest diff (lines
    added and removed against the base), then the lowest cost, then the first started. Each other attempt's
    ``lost`` says why it was not delivered; the winner's ``rank`` is 1."""
    ready = [a for a in attempts if a.state == "verified"]
    ordered = sorted(
        ready,
        key=lambda a: (
            a.diff_lines if a.diff_lines is not None else 1 << 30,
            costs.get(a.index, 0.0),
            a.index,
        ),
    )
    for n, a in enumerate(ordered, 1):
        a.rank = n
        a.lost = None
    if not ordered:
        return []
    best = ordered[0]
    for a in ordered[1:]:
        if (a.diff_lines or 0) != (best.diff_lines or 0):
            why = f"a smaller diff ({best.diff_lines} lines against {a.diff_lines})"
        elif costs.get(a.index, 0.0) != costs.get(best.index, 0.0):
            why = f"a lower cost (${costs.get(best.index, 0.0):.4f} against ${costs.get(a.index, 0.0):.4f})"
        else:
            why = "an equal result, started first"
        a.lost = f"attempt {best.index} was delivered: it passed verification with {why}"
    for a in attempts:
        if a.state != "verified" and a.rank is None:
            a.lost = f"not delivered: {a.outcome or a.state}"
    return ordered


def pr_title(prompt: str) -> str:
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "the agent's work")
    return first if len(first) <= 72 else first[:71].rstrip() + "…"


def pr_body(
    *,
    job: str,
    prompt: str,
    summary: str,
    verification: Verification | None,
    command: str | None,
    tainted: bool,
    taint_reasons: list[str],
    cost_usd: float,
    attempt: int,
    attempts: int,
) -> str:
    quoted = "\n".join(f"> {line}" if line else ">" for line in prompt.strip().splitlines())
    lines = [f"Opened by hangar for job `{job}`.", "", "### Task", "", quoted, ""]
    if summary.strip():
        lines += ["### What the agent says it did", "", summary.strip(), ""]
    lines += ["### Verification", ""]
    if verification is None or command is None:
        lines.append("No verification command is configured for this repository.")
    else:
        verdict = "passed" if verification.passed else "failed"
        lines.append(f"`{command}` {verdict} ({_result(verification)}).")
    lines.append("")
    if tainted:
        reasons = "; ".join(taint_reasons) or "unknown"
        lines += [f"**Tainted**: the agent read untrusted input ({reasons}). Review with care.", ""]
    else:
        lines += ["Taint: none.", ""]
    chosen = f"attempt {attempt} of {attempts} (best-of-{attempts})" if attempts > 1 else "one attempt"
    lines.append(f"Cost: ${cost_usd:.4f}; {chosen}.")
    return "\n".join(lines)
