"""The operator's and the api's logs as `hangar dev` and a cluster get them: one JSON object a line, and a
record about a resource carries its kind, namespace and name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hangar.devcluster.stack import Stack

from .conftest import Cluster
from .helpers import Api, wait


def records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)  # a line that is not JSON fails here
            assert {"time", "level", "logger", "message"} <= rec.keys(), line
            out.append(rec)
    return out


def test_operator_and_api_log_json_lines_naming_the_resource(cluster: Cluster, stack: Stack) -> None:
    session = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": "logs-demo", "namespace": stack.namespace},
        "spec": {"harness": "claude", "environment": "logs-no-such-env"},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(session))
    try:
        assert Api(stack).get("/api/sessions/logs-demo").status_code == 200

        def about_it() -> list[dict[str, Any]]:
            return [
                r
                for r in records(stack.root / "operator.log")
                if (r.get("kind"), r.get("namespace"), r.get("name"))
                == ("Session", stack.namespace, "logs-demo")
            ]

        found = wait(about_it, 60, "an operator record about Session logs-demo")
        assert all(r["logger"] for r in found)
        api = records(stack.root / "api.log")
        assert any("/api/sessions/logs-demo" in r["message"] for r in api), "uvicorn's access line"
    finally:
        cluster.kubectl("delete", "session", "logs-demo", "-n", stack.namespace, "--wait=false", check=False)
