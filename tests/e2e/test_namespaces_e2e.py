"""Several namespaces: an operator serving two namespaces runs sessions of the same name in both, created with
kubectl, and never touches a third namespace it does not serve."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hangar.devcluster.stack import Stack, environment_object

from .conftest import Cluster
from .helpers import namespace_stack, wait

pytestmark = pytest.mark.e2e

WATCHED = ("multi-a", "multi-b")
UNWATCHED = "multi-c"


@pytest.fixture(scope="module")
def two_namespaces(cluster: Cluster, stack: Stack) -> Iterator[Stack]:
    for ns in (*WATCHED, UNWATCHED):
        cluster.kubectl("create", "namespace", ns, check=False)
    env = {"HANGAR_WATCH_NAMESPACES": ",".join(WATCHED)}
    with namespace_stack(cluster, WATCHED[0], "hangar-multi-", extra_env=env) as s:
        yield s


def get(cluster: Cluster, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_sessions_run_in_every_watched_namespace_and_nowhere_else(
    cluster: Cluster, two_namespaces: Stack
) -> None:
    for ns in (*WATCHED, UNWATCHED):
        say = f"echo hello from {ns}"
        env = environment_object("multi-env", harnessOptions={"command": ["sh", "-c", say, "x"]})
        session = {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Session",
            "metadata": {"name": "same"},
            "spec": {"environment": "multi-env", "harness": "antigravity", "prompt": "hello"},
        }
        for obj in (env, session):
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))
    for ns in WATCHED:
        turn = wait(
            lambda ns=ns: (
                (t := get(cluster, ns, "turns.hangar.dev", "same-1"))
                and (t.get("status") or {}).get("phase") == "Completed"
                and t
            ),
            90,
            f"the turn in {ns}",
        )
        assert f"hello from {ns}" in turn["status"]["summary"]
        s = get(cluster, ns, "sessions.hangar.dev", "same")
        assert s is not None and s["status"]["observedGeneration"] == s["metadata"]["generation"]
        ready = {c["type"]: c for c in s["status"]["conditions"]}["Ready"]
        assert ready["status"] == "True", s["status"]
        assert cluster.kubectl("get", "pod", "same-r1", "-n", ns, check=False).returncode == 0
        described = cluster.kubectl("describe", "session", "same", "-n", ns).stdout
        assert "SandboxStarted" in described and "SandboxConnected" in described, described
        print(described)
    # The unwatched namespace: no status, no pod, no turn.
    s = get(cluster, UNWATCHED, "sessions.hangar.dev", "same")
    assert s is not None and not s.get("status")
    assert cluster.kubectl("get", "pod", "same-r1", "-n", UNWATCHED, check=False).returncode != 0
    assert get(cluster, UNWATCHED, "turns.hangar.dev", "same-1") is None
