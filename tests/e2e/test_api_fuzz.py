"""A property-based fuzzer over the published OpenAPI document (schemathesis) against a real api process on
the real control plane: any 5xx, an answer that breaks its declared schema, a status the document does not
declare for that route, a content type it does not declare, a schema-violating body accepted, a 405 whose
``Allow`` misses a method, an answer without authentication — every check schemathesis has but two
(``EXCLUDED``) — fails the run.

Bounded: a time budget of ``BUDGET_SECONDS`` for the whole run (schemathesis ``--max-time``: its phases
repeat until it is spent), at most ``EXAMPLES`` generated cases per operation and round, a fixed seed, one
worker; the process is killed (and the test fails) at ``HARD_SECONDS``. docs/limits.md states the same.

The api runs in a namespace of its own that no operator watches, seeded with the objects the document's
examples name (a session with a running turn and a pending approval, a job), so answers other than 404 are
checked against their schemas too, and with the write rate limit raised so the fuzzer exercises the routes
rather than the 429 (the limit itself: tests/unit/test_api_hardening.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from hangar.devcluster.stack import Stack, environment_object
from hangar.models import API_VERSION
from hangar.models import labels as L

from .conftest import Cluster

pytestmark = pytest.mark.e2e

NAMESPACE = "hangar-fuzz"
BUDGET_SECONDS = 50
HARD_SECONDS = 90
EXAMPLES = 20
SEED = 11
# Every check but two whose premise hangar's API does not share: that a schema-valid body is always accepted
# (an Environment the body names must exist: 422 `unknown environment`), and that what a create returns can
# be read at once through every route with its id (a job's patch is there once an attempt is verified).
CHECKS = "all"
EXCLUDED = "positive_data_acceptance,ensure_resource_availability"
MIN_CASES = 100  # a run that sent fewer did not fuzz: it fails (a loaded machine sends fewer in the budget)


def kube_apply(cluster: Cluster, obj: dict[str, Any], status: dict[str, Any] | None = None) -> None:
    obj["metadata"]["namespace"] = NAMESPACE
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
    if status is not None:
        kind = {"Session": "hsess", "Turn": "hturn", "Approval": "happ"}[obj["kind"]]
        cluster.kubectl(
            "patch",
            kind,
            obj["metadata"]["name"],
            "-n",
            NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )


def seed_objects(cluster: Cluster) -> None:
    """What the document's examples name, so the fuzzer gets past the 404s: the Environment ``default``, a
    session ``demo`` with a running turn (steered, withdrawn and interrupted as the fuzzer goes), a pending
    approval of it, and a job
    ``demo-job`` (no operator watches the namespace: they stay as they are until the fuzzer changes them)."""
    kube_apply(cluster, environment_object("default", {}))
    meta = {"labels": {L.SESSION: "demo"}}
    kube_apply(
        cluster,
        {
            "apiVersion": API_VERSION,
            "kind": "Session",
            "metadata": {"name": "demo"},
            "spec": {"environment": "default"},
        },
        {"phase": "Running", "currentTurn": "demo-1", "lastTurn": "demo-1"},
    )
    kube_apply(
        cluster,
        {
            "apiVersion": API_VERSION,
            "kind": "Turn",
            "metadata": {"name": "demo-1", **meta},
            "spec": {
                "session": "demo",
                "index": 1,
                "message": "list the files",
                "by": "admin",
            },
        },
        {"phase": "Running", "startedAt": "2026-12-01T10:00:00.000Z"},
    )
    kube_apply(
        cluster,
        {
            "apiVersion": API_VERSION,
            "kind": "Approval",
            "metadata": {"name": "ap-0123456789ab", **meta},
            "spec": {
                "session": "demo",
                "turn": "demo-1",
                "requestId": "r1",
                "tool": "Bash",
                "command": "ls",
                "argsHash": "h",
                "policy": "ask",
            },
        },
        {"phase": "Pending", "requestedAt": "2026-12-01T10:00:00.000Z"},
    )
    job = {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {"name": "demo-job"},
        "spec": {"submitter": "admin", "prompt": "list the files", "environment": "default"},
    }
    kube_apply(cluster, job)


def test_the_fuzzer_finds_no_server_error_schema_violation_or_undeclared_status(cluster: Cluster) -> None:
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    seed_objects(cluster)
    root = Path(tempfile.mkdtemp(prefix="hangar-fuzz-", dir="/tmp"))
    stack = Stack(
        root,
        cluster.kubeconfig,
        namespace=NAMESPACE,
        extra_env={
            "HANGAR_API_WRITE_RATE": "100000",
            "HANGAR_API_WRITE_BURST": "100000",
            # No driver answers a withdraw here: answer 202 at once rather than after 20 s.
            "HANGAR_API_WITHDRAW_WAIT_SECONDS": "0.2",
        },
    )
    stack.start_api()
    try:
        argv = [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{stack.api_url}/openapi.json",
            "--header",
            f"Authorization: Bearer {stack.token}",
            "--checks",
            CHECKS,
            "--exclude-checks",
            EXCLUDED,
            "--max-time",
            str(BUDGET_SECONDS),
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--request-timeout",
            "20",
        ]
        started = time.monotonic()
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=HARD_SECONDS, cwd=root, check=False
        )
        took = time.monotonic() - started
        report = out.stdout + out.stderr
        tail = report[-6000:]
        cases = re.search(r"(\d+) generated", report)
        print(f"schemathesis: {cases.group(0) if cases else '?'} in {took:.0f} s (budget {BUDGET_SECONDS} s)")
        assert out.returncode == 0, f"the fuzzer found failures:\n{tail}"
        assert cases is not None and int(cases.group(1)) >= MIN_CASES, f"too few cases ran:\n{tail}"
        # Every operation the published document declares was fuzzed (none skipped or filtered out).
        doc = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
        ops = sum(len(methods) for methods in doc["paths"].values())
        assert re.search(rf"Selected: {ops}/{ops}\s+Tested: {ops}\b", report), tail
    finally:
        stack.stop_all()
