"""Warm sandbox pools end to end (issue 15, item 1): a real apiserver, the local pod runner, the real driver
and Claude Code against the scripted model. Sessions take warm sandboxes (two at once never share one), a
turn runs in one, the pool refills, and a taken sandbox's old run key is refused by the gateway."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from hangar.devcluster.stack import Stack
from hangar.testing.model_server import ScriptedModel, Step
from hangar_driver import protocol as P

from .conftest import Cluster
from .helpers import Api, clis_installed, environment, model_env, new_session, wait

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)"),
]

ENV = "warm-env"


def kget(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def ready_members(cluster: Cluster) -> list[str]:
    """The pool's members whose driver is connected and verified (the operator records it on the pod)."""
    pods = kget(cluster, "pods", "-l", f"hangar.dev/pool={ENV},app.kubernetes.io/component=pool-member")
    return sorted(
        p["metadata"]["name"]
        for p in pods["items"]
        if (p["metadata"].get("annotations") or {}).get("hangar.dev/pool-ready") == "true"
    )


def pool(cluster: Cluster) -> dict[str, Any]:
    return dict((kget(cluster, "henv", ENV).get("status") or {}).get("pool") or {})


def hello_refused(stack: Stack, run: str, key: bytes) -> bool:
    """Does the gateway refuse a hello from ``run`` signed with ``key`` (close without a welcome)?"""
    frame = P.sign(key, P.make_frame(run, P.D2G, P.HELLO, {"run": run, "harness": "claude"}))
    with socket.create_connection(("127.0.0.1", stack.gateway_port), timeout=10) as sock:
        sock.sendall(P.encode(frame))
        data = b""
        try:
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
    return b"welcome" not in data


def test_sessions_take_warm_sandboxes_and_the_pool_refills(
    cluster: Cluster, stack: Stack, model: ScriptedModel
) -> None:
    model.add(Step(when="WARM", text="Writing.", command="echo warm > warm.txt; env > env.txt"))
    model.add(Step(when="tool_result", text="FINAL: written in a warm sandbox"))
    environment(cluster, ENV, model_env("claude", model), warmPool={"size": 2, "maxAgeSeconds": 600})
    api = Api(stack)
    try:
        first = wait(lambda: len(m := ready_members(cluster)) == 2 and m, 60, "two warm sandboxes ready")
        assert (
            wait(lambda: pool(cluster).get("ready") == 2, 20, "status.pool.ready 2")
            and pool(cluster)["summary"] == "2/2"
        )
        assert (
            f"{ENV}" in cluster.kubectl("get", "henv", ENV).stdout
            and "2/2" in cluster.kubectl("get", "henv", ENV).stdout
        )
        keys = {m: base64.b64decode(kget(cluster, "secret", f"{m}-key")["data"]["run-key"]) for m in first}
        # Two sessions at once: each takes its own warm sandbox.
        new_session(api, "warm-a", ENV, "claude", "WARM write the file")
        r = api.post("/api/sessions", {"name": "warm-b", "environment": ENV, "harness": "claude"})
        assert r.status_code == 201, r.text

        def both_connected() -> dict[str, Any] | None:
            x = {n: kget(cluster, "hsess", n) for n in ("warm-a", "warm-b")}
            return (
                x
                if all(((o.get("status") or {}).get("sandbox") or {}).get("connected") for o in x.values())
                else None
            )

        s = wait(both_connected, 30, "both connected", lambda: api.debug("warm-a") + api.debug("warm-b"))
        pods = {n: o["status"]["sandbox"]["pod"] for n, o in s.items()}
        assert sorted(pods.values()) == first, pods  # warm ones, one each
        for n, o in s.items():
            assert o["status"]["workspace"] == f"{pods[n]}-workspace"
            pod = kget(cluster, "pod", pods[n])["metadata"]
            assert pod["labels"]["hangar.dev/session"] == n and "hangar.dev/pool" not in pod["labels"]
            assert pod["annotations"]["hangar.dev/claimed-by"] == o["metadata"]["uid"]
        # A real turn in a warm sandbox.
        t1 = api.wait_turn("warm-a", 1)
        assert t1["phase"] == "Completed" and "written in a warm sandbox" in t1["summary"], api.debug(
            "warm-a"
        )
        files = stack.runner_root / "pvc" / stack.namespace / f"{pods['warm-a']}-workspace" / "workspace"
        assert (files / "warm.txt").read_text() == "warm\n"
        # Nothing of the pool reaches the agent: its environment holds no pool flag, run id or key. (The
        # local pod runner maps /workspace to the volume's own directory, so paths name the volume here; on
        # a cluster the agent sees the mount path.)
        seen = (files / "env.txt").read_text()
        assert "HANGAR_IO=" in seen and "HANGAR_POOL" not in seen and "HANGAR_RUN" not in seen, seen
        assert f"pool.{stack.namespace}." not in seen
        assert not any(k.decode() in seen for k in keys.values())
        # The pools' keys are dead: a hello with one is refused, as its run or as the session's.
        for n, pod_name in pods.items():
            assert hello_refused(stack, f"pool.{stack.namespace}.{pod_name}", keys[pod_name])
            assert hello_refused(stack, f"{n}-r1", keys[pod_name])
            assert not kget(cluster, "secrets", "-l", f"hangar.dev/pool={ENV}")["items"] or all(
                i["metadata"]["name"] != f"{pod_name}-key"
                for i in kget(cluster, "secrets", "-l", f"hangar.dev/pool={ENV}")["items"]
            )
        # The pool refills with new sandboxes.
        refilled = wait(
            lambda: len(m := ready_members(cluster)) == 2 and m,
            60,
            "the pool refilled",
            lambda: str(pool(cluster)),
        )
        assert not set(refilled) & set(first)
        wait(lambda: pool(cluster).get("ready") == 2, 20, "status.pool.ready 2 again")
    finally:
        for n in ("warm-a", "warm-b"):
            api.delete(f"/api/sessions/{n}")
        cluster.kubectl("delete", "henv", ENV, "--wait=false")
