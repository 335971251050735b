"""Prometheus metrics of the operator (served on /metrics of the operator's health port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SANDBOXES_STARTED = Counter("hangar_sandboxes_started_total", "Sandbox pods created")
SANDBOX_CONNECT = Histogram(
    "hangar_sandbox_connect_seconds",
    "Sandbox created to driver connected",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
SANDBOXES_ACTIVE = Gauge("hangar_sandboxes_active", "Sessions holding a sandbox slot")
TURNS = Counter("hangar_turns_total", "Turns finished, by outcome", ["outcome"])
TURN_SECONDS = Histogram(
    "hangar_turn_seconds", "Turn duration", buckets=(1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600)
)
STEERS = Counter("hangar_steers_total", "Steers by final status", ["status"])
INTERRUPTS = Counter("hangar_interrupts_total", "Interrupts sent to drivers")
INTERRUPT_KILLS = Counter(
    "hangar_interrupt_kills_total", "Runs killed because an interrupt was not confirmed"
)
# Steering (steering.py): every steer and interrupt once, by the class it arrived with, and every
# classification after that (REST, kubectl, an intake prefix), by the class given.
INTERVENTIONS = Counter(
    "hangar_interventions_total",
    "Steers and interrupts received, by kind and class on arrival",
    ["kind", "class"],
)
STEER_CLASSIFICATIONS = Counter(
    "hangar_steer_classifications_total", "Steers and interrupts classified, by class", ["class"]
)
DRIVER_REJECTED = Counter("hangar_driver_messages_rejected_total", "Driver frames refused", ["reason"])
DRIVER_EVENTS_FAILED = Counter(
    "hangar_driver_events_failed_total",
    "Driver events the apiserver refused to apply: recorded as failed and acknowledged",
    ["name"],
)
DRIVER_EVENTS = Counter("hangar_driver_events_total", "Driver events stored", ["name"])
# A person's live work in a sandbox (live_work.py): outcome ok | failed (the driver refused it) | refused
# (no connected sandbox, a bad request) | ended (the link broke, no answer in time, a watch that ended).
LIVE_REQUESTS = Counter(
    "hangar_live_requests_total",
    "Live sandbox commands (exec, process, watch), by op and outcome",
    ["op", "outcome"],
)
# Approvals: outcome allow | deny | allow_always | withdrawn; resolver person | policy | timeout | tower | none.
APPROVALS = Counter(
    "hangar_approvals_total",
    "Tool calls decided under a policy other than auto",
    ["policy", "outcome", "resolver"],
)
APPROVAL_PENDING_SECONDS = Histogram(
    "hangar_approval_pending_seconds",
    "Time an approval waited for its decision (requested to decided)",
    ["resolver"],
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
APPROVAL_DECISION_SECONDS = Histogram(
    "hangar_approval_policy_decision_seconds",
    "Permission request to answer sent, when the policy answers at once",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)
TAINTED = Counter("hangar_taints_total", "Sessions that became tainted")
JOBS = Counter("hangar_jobs_total", "Jobs that ended, by final state", ["state"])

# Governance by Tower (governance/): calls filed, sessions suspended, how long, and how fast they come back.
TOWER_CALLS = Counter("hangar_tower_calls_total", "Calls to Tower's decisions API, by outcome", ["outcome"])
SUSPENSIONS = Counter("hangar_sessions_suspended_total", "Sessions suspended, by reason", ["reason"])
SUSPENDED_SECONDS = Histogram(
    "hangar_session_suspended_seconds",
    "Suspended (sandbox given back) to the decision that resumes it, by reason",
    ["reason"],
    buckets=(10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600),
)
RESUME_SECONDS = Histogram(
    "hangar_session_resume_seconds",
    "Tower's allow to the resumed turn running in a new sandbox",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)
