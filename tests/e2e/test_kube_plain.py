"""``Kube``'s core-object calls on a real apiserver read its answers as JSON: no kubernetes_asyncio typed
model is built (a pod's took ~0.9 ms of CPU, and was turned back into a dict at once), and the answers,
the refusals (404, 409: ``Answer``) and a failed compare-and-set are what they were."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

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
