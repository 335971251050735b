"""``Kube``'s core-object calls and its watch on a real apiserver read its answers as JSON: no
kubernetes_asyncio typed model is built (a pod's took ~0.9 ms of CPU, and was turned back into a dict at
once; a watch event was decoded, encoded and decoded again), and the answers, the refusals (404, 409:
``Answer``), a failed compare-and-set and a watch's events are what they were."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from hangar.kube import ApiException, Kube

from .conftest import Cluster
from .test_fake_kube_contract import _wait_for_default_service_account


async def test_core_objects_are_answered_as_json_without_typed_models(cluster: Cluster) -> None:
    ns = f"plain-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    _wait_for_default_service_account(cluster, ns)
    k = await Kube.connect(str(cluster.kubeconfig), ns)

    def typed(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a typed model was built from an answer")

    k.api.deserialize = typed  # type: ignore[method-assign]
    try:
        secret = {"metadata": {"name": "s1", "labels": {"tier": "a"}}, "stringData": {"key": "value"}}
        assert await k.create_core("secrets", secret) is True
        assert await k.create_core("secrets", secret) is False  # 409: it exists
        got = await k.get_core("secrets", "s1")
        assert got is not None and got["data"] == {"key": "dmFsdWU="}
        assert got["metadata"]["creationTimestamp"].endswith("Z")  # the apiserver's own JSON
        assert await k.get_core("secrets", "nope") is None
        patched = await k.patch_core("secrets", "s1", {"metadata": {"labels": {"more": "b"}}})
        assert patched["metadata"]["labels"] == {"tier": "a", "more": "b"}
        stale = {"metadata": {"resourceVersion": got["metadata"]["resourceVersion"], "labels": {"x": "y"}}}
        with pytest.raises(ApiException) as refused:
            await k.patch_core("secrets", "s1", stale)
        assert refused.value.status == 409 and "modified" in str(refused.value.body)
        assert [s["metadata"]["name"] for s in await k.list_core("secrets", "tier=a")] == ["s1"]
        assert await k.list_core("secrets", "tier=none") == []
        assert await k.delete_core("secrets", "s1") is True
        assert await k.delete_core("secrets", "s1") is False  # 404: gone already
    finally:
        await k.close()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


async def test_the_watch_reads_its_events_as_json(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    k = await Kube.connect(str(cluster.kubeconfig), "default")
    name = f"plain-{uuid.uuid4().hex[:6]}"
    env = {"apiVersion": "hangar.dev/v1alpha1", "kind": "Environment", "metadata": {"name": name}}
    env["spec"] = {"image": "python:3.12-slim"}
    try:
        async with asyncio.timeout(60):
            while True:  # a control plane just started may still be setting up the resource's storage
                try:
                    _, at = await k.list_at("environments")
                    break
                except ApiException as e:
                    if e.status != 429:
                        raise
                    await asyncio.sleep(0.5)

        def typed(*args: Any, **kw: Any) -> Any:
            raise AssertionError("a typed model was built from an event")

        monkeypatch.setattr(ApiClient, "deserialize", typed)  # a Watch's own client's too
        events = k.watch("environments", at)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(env))
        cluster.kubectl("label", "environment", name, "seen=yes")
        cluster.kubectl("delete", "environment", name, "--wait=false")
        seen: list[tuple[str, str]] = []
        async with asyncio.timeout(30):
            async for ev in events:
                obj = ev["object"]
                assert ev["raw_object"] is obj and isinstance(obj, dict)
                if obj["metadata"]["name"] == name:
                    seen.append((ev["type"], (obj["metadata"].get("labels") or {}).get("seen", "")))
                    if ev["type"] == "DELETED":
                        break
        await events.aclose()
        assert seen[0] == ("ADDED", "") and ("MODIFIED", "yes") in seen and seen[-1][0] == "DELETED"
    finally:
        cluster.kubectl("delete", "environment", name, "--ignore-not-found", "--wait=false", check=False)
        await k.close()
