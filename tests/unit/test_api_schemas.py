"""The OpenAPI document says what the api answers: the views' keys are the response models' fields, the
published docs/openapi.json is the app's, every route declares its errors with the schema hangar sends."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from hangar_api import openapi
from hangar_api import schemas as S
from hangar_api.approvals import approval_view
from hangar_api.views import interrupt_view, job_view, session_view, steer_view, turn_view

AT = "2026-12-01T10:00:00.000Z"
STEER = {
    "id": "st-1",
    "message": "also this",
    "by": "root",
    "class": "correction",
    "classifiedBy": "root",
    "classifiedAt": AT,
}
INTERRUPT = {"id": "in-1", "by": "root", "message": "stop", "class": "unclassified"}
TURN = {
    "metadata": {"name": "s1-2", "creationTimestamp": AT},
    "spec": {
        "session": "s1",
        "index": 2,
        "message": "go",
        "by": "root",
        "steers": [STEER],
        "interrupts": [INTERRUPT],
        "fromSteer": "st-0",
    },
    "status": {
        "phase": "Completed",
        "outcome": "completed",
        "exitStatus": 0,
        "summary": "done",
        "result": {"text": "ok"},
        "question": "why?",
        "usage": {"inputTokens": 3, "outputTokens": 4},
        "costUsd": 0.5,
        "artifacts": [{"name": "a", "path": "/a", "size": 1, "sha256": "x"}],
        "steers": [{"id": "st-1", "status": "delivered", "at": AT, "writtenAt": AT}],
        "interrupts": [
            {"id": "in-1", "status": "confirmed", "at": AT, "messageStatus": "delivered", "nextTurn": "s1-3"}
        ],
        "startedAt": AT,
        "finishedAt": AT,
    },
}
SESSION = {
    "metadata": {"name": "s1", "creationTimestamp": AT},
    "spec": {"harness": "codex", "environment": "default", "model": "m", "approvals": "ask", "forkOf": "s0"},
    "status": {
        "phase": "Idle",
        "policy": "ask",
        "sandbox": {"pod": "p", "run": "r", "connected": True, "startedAt": AT},
        "conversation": "c",
        "forkedFrom": {"session": "s0", "conversation": "c0", "policy": "ask", "tainted": True, "at": AT},
        "currentTurn": "s1-2",
        "taint": {"tainted": True, "reasons": ["web"], "since": AT},
        "checkpoints": [{"id": "cp", "turn": "s1-1", "at": AT}],
        "suspended": {"reason": "approval", "approval": "ap-1", "since": AT},
        "resuming": {"approval": "ap-1", "turn": "s1-2", "tool": "Bash", "argsHash": "h"},
        "pendingApprovals": [{"id": "ap-1", "turn": "s1-2", "tool": "Bash"}],
    },
}
JOB = {
    "metadata": {"name": "j1", "creationTimestamp": AT},
    "spec": {
        "submitter": "alice",
        "prompt": "p",
        "environment": "default",
        "model": "m",
        "attempts": 2,
        "tainted": True,
    },
    "status": {
        "state": "running",
        "question": "q?",
        "awaitingApproval": True,
        "pendingApprovals": [{"id": "ap-1", "session": "j1-a1", "turn": "j1-a1-1", "tool": "Bash"}],
        "attempts": [{"index": 1, "session": "j1-a1", "state": "running"}],
        "turns": ["j1-a1-1"],
        "verification": {"turn": "j1-a1-1", "commandId": "v1", "passed": True},
        "delivery": {"attempt": 1, "stage": "done", "branch": "b"},
        "costUsd": 1.5,
        "startedAt": AT,
    },
}
APPROVAL = {
    "metadata": {"name": "ap-1"},
    "spec": {
        "session": "s1",
        "turn": "s1-2",
        "tool": "Bash",
        "command": "ls",
        "argsHash": "h",
        "policy": "ask",
        "tower": "shadow",
        "decision": "allow",
        "decidedBy": "root",
    },
    "status": {
        "phase": "Allowed",
        "decision": "allow",
        "by": "root",
        "resolvedBy": "person",
        "requestedAt": AT,
        "deadline": AT,
        "decidedAt": AT,
        "deliveredAt": AT,
        "receipt": "A-9",
        "tower": {"status": "allowed"},
    },
}
BARE_TURN = {"metadata": {"name": "s1-1"}, "spec": {"session": "s1", "index": 1, "message": "go"}}
BARE_SESSION = {"metadata": {"name": "s1"}, "spec": {"environment": "default"}}
BARE_JOB = {"metadata": {"name": "j1"}, "spec": {"submitter": "a", "prompt": "p", "environment": "default"}}
BARE_APPROVAL = {"metadata": {"name": "ap-1"}, "spec": {}, "status": {"phase": "Pending"}}


def keys(model: type[BaseModel]) -> tuple[set[str], set[str]]:
    """(every key, the required keys) of a response model, as they are on the wire."""
    every = {f.alias or n for n, f in model.model_fields.items()}
    required = {f.alias or n for n, f in model.model_fields.items() if f.is_required()}
    return every, required


CASES: list[tuple[str, type[BaseModel], Any]] = [
    ("turn", S.TurnView, lambda: turn_view(TURN)),
    ("bare turn", S.TurnView, lambda: turn_view(BARE_TURN)),
    ("steer", S.SteerView, lambda: steer_view(TURN, STEER)),
    ("interrupt", S.InterruptView, lambda: interrupt_view(TURN, INTERRUPT)),
    ("session", S.SessionView, lambda: session_view(SESSION, [TURN])),
    ("session in a list", S.SessionView, lambda: session_view(BARE_SESSION)),
    ("job", S.JobView, lambda: job_view(JOB, [TURN])),
    ("job in a list", S.JobView, lambda: job_view(BARE_JOB)),
    ("approval", S.ApprovalView, lambda: approval_view(APPROVAL)),
    ("pending approval", S.ApprovalView, lambda: approval_view(BARE_APPROVAL)),
]


@pytest.mark.parametrize(("what", "model", "make"), CASES, ids=[c[0] for c in CASES])
def test_each_view_has_exactly_the_keys_its_model_declares(
    what: str, model: type[BaseModel], make: Any
) -> None:
    view = make()
    every, required = keys(model)
    assert set(view) <= every, f"{what}: keys the document does not declare: {set(view) - every}"
    assert required <= set(view), f"{what}: declared required but missing: {required - set(view)}"
    parsed = model.model_validate(view)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == json.loads(json.dumps(view))


def test_the_published_document_is_the_apps() -> None:
    assert openapi.main(["--check"]) == 0, "docs/openapi.json is stale: run `python -m hangar_api.openapi`"


def test_every_route_declares_its_errors_with_the_schema_hangar_sends() -> None:
    doc = json.loads(openapi.DOC.read_text())
    assert "HTTPValidationError" not in doc["components"]["schemas"], "422 is {detail: str}, not a list"
    assert doc["components"]["schemas"]["Problem"]["properties"]["detail"]["type"] == "string"
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            where = f"{method.upper()} {path}"
            ok = [c for c in codes if c.startswith("2")]
            assert ok, where
            for c in ok:
                content = op["responses"][c].get("content", {})
                assert content and all(m.get("schema") for m in content.values()), (
                    f"{where}: {c} has no schema"
                )
            if path.startswith("/api/governance"):
                continue
            assert op["security"] == [{"HTTPBearer": []}], where
            assert {"401", "403", "413", "422", "503"} <= codes, where
            if "{" in path:
                assert "404" in codes, where
            if method != "get":
                assert {"409", "429"} <= codes, where
            for c in codes - set(ok):
                schema = op["responses"][c]["content"]["application/json"]["schema"]
                assert schema.get("$ref", "").split("/")[-1] in ("Problem", "WithdrawRefused"), (where, c)
    withdraw = doc["paths"]["/api/sessions/{ref}/steers/{steer_id}/withdraw"]["post"]["responses"]
    assert {"200", "202", "409"} <= set(withdraw)
