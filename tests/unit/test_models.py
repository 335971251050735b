"""The resource models: the wire form (camelCase, nothing unset), round trips, and what they refuse."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hangar.models import (
    API_VERSION,
    KINDS,
    ApprovalStatus,
    Environment,
    EnvironmentSpec,
    Job,
    JobStatus,
    Session,
    SessionSpec,
    SessionStatus,
    Turn,
    TurnStatus,
)
from hangar.models.base import Model
from hangar.models.job import attempt_session


def camel_keys(value: Any) -> list[str]:
    """Every key with an underscore, anywhere in a dumped structure (the wire has none)."""
    if isinstance(value, dict):
        return [k for k in value if "_" in k] + [k for v in value.values() for k in camel_keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in camel_keys(v)]
    return []


def test_a_default_status_dumps_camel_case_without_none() -> None:
    for model in (SessionStatus, TurnStatus, JobStatus, ApprovalStatus):
        out = model().dump()
        assert camel_keys(out) == [], model
        assert None not in out.values(), model
    assert SessionStatus().dump() == {
        "phase": "Pending",
        "reason": "",
        "message": "",
        "sandbox": {"connected": False},
        "taint": {"tainted": False, "reasons": []},
        "checkpoints": [],
        "pendingApprovals": [],
        "counters": {
            "turns": 0,
            "steers": 0,
            "interrupts": 0,
            "approvals": 0,
            "sandboxes": 0,
            "inputTokens": 0,
            "outputTokens": 0,
            "costUsd": 0.0,
        },
        "conditions": [],
    }


def test_a_session_status_round_trips_through_its_wire_form() -> None:
    wire = {
        "phase": "Running",
        "policy": "ask",
        "sandbox": {"pod": "s1-1", "run": "s1-r1", "connected": True, "startedAt": "2026-01-02T03:04:05Z"},
        "currentTurn": "s1-t2",
        "lastTurn": "s1-t1",
        "taint": {"tainted": True, "reasons": ["read web content (WebFetch)"]},
        "pendingApprovals": [{"id": "ap-1", "turn": "s1-t2", "tool": "Bash", "command": "ls"}],
        "counters": {"turns": 2, "costUsd": 0.5, "inputTokens": 10},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Idle"}],
        "observedGeneration": 3,
    }
    st = SessionStatus.model_validate(wire)
    assert st.sandbox.started_at is not None and st.sandbox.started_at.year == 2026
    assert st.current_turn == "s1-t2" and st.counters.cost_usd == 0.5 and st.observed_generation == 3
    out = st.dump()
    assert camel_keys(out) == []
    assert out["sandbox"]["startedAt"] == "2026-01-02T03:04:05Z"
    assert SessionStatus.model_validate(out) == st
    # What was not set stays off the wire (a merge patch of it must not erase other writers' fields).
    assert "conversation" not in out and "forkedFrom" not in out
    assert "session" not in out["pendingApprovals"][0]


def test_snake_case_names_are_accepted_too() -> None:
    assert SessionStatus.model_validate({"current_turn": "t"}).current_turn == "t"
    assert SessionSpec(environment="dev", fork_of="p").dump()["forkOf"] == "p"


def test_turn_and_job_statuses_round_trip() -> None:
    turn = {
        "phase": "Completed",
        "outcome": "completed",
        "exitStatus": 0,
        "usage": {"inputTokens": 3, "outputTokens": 4},
        "costUsd": 0.01,
        "steers": [{"id": "st-1", "status": "delivered", "class": "correction"}],
    }
    ts = TurnStatus.model_validate(turn)
    assert ts.steers[0].klass == "correction"
    out = ts.dump()
    assert out["steers"][0]["class"] == "correction" and "klass" not in out["steers"][0]
    assert TurnStatus.model_validate(out) == ts
    job = {"state": "running", "attempts": [{"index": 1, "session": "j-a1", "lastTurn": "j-a1-t1"}]}
    js = JobStatus.model_validate(job)
    assert js.attempts[0].last_turn == "j-a1-t1"
    assert JobStatus.model_validate(js.dump()) == js


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (SessionStatus, {"phase": "Dancing"}),
        (SessionSpec, {"environment": ""}),
        (SessionSpec, {"environment": "dev", "harness": "gpt"}),
        (SessionSpec, {"environment": "dev", "approvals": "deny_risky"}),
        (EnvironmentSpec, {"image": "x", "env": [{"name": "1BAD"}]}),
        (JobStatus, {"state": "paused"}),
    ],
)
def test_values_outside_the_schema_are_refused(model: type[Model], body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(body)


def test_every_kind_reads_a_whole_object() -> None:
    assert {k.info.plural for k in KINDS} == {"environments", "sessions", "turns", "approvals", "jobs"}
    s = Session.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "Session",
            "metadata": {"name": "s1", "namespace": "ns"},
            "spec": {"environment": "dev"},
        }
    )
    assert s.name == "s1" and s.namespace == "ns" and s.spec.harness == "claude"
    # An object without a status (a new one) reads as the status's defaults, and so does a null status.
    assert s.status.phase == "Pending" and s.status.sandbox.run is None
    assert (
        Session.model_validate({"metadata": {}, "spec": {"environment": "d"}, "status": None}).status.phase
        == "Pending"
    )
    e = Environment.model_validate({"metadata": {"name": "dev"}, "spec": {"image": "img"}})
    assert e.kind == "Environment" and e.api_version == API_VERSION
    t = Turn.model_validate({"metadata": {}, "spec": {"session": "s1", "index": 1, "message": "hi"}})
    assert t.spec.klass == "unclassified"
    j = Job.model_validate(
        {"metadata": {"name": "j"}, "spec": {"submitter": "me", "prompt": "do", "environment": "dev"}}
    )
    assert j.spec.attempts == 1 and j.spec.deliver == "pr" and attempt_session("j", 2) == "j-a2"
    with pytest.raises(ValidationError):
        Job.model_validate(
            {"metadata": {}, "spec": {"submitter": "me", "prompt": "do", "environment": "d", "attempts": 9}}
        )
