"""The benches' observer (bench/_watch.py) against a real kube-apiserver: a create answered as JSON, an
object's state seen by its list or its watch (not earlier, not missed), a failure seen, every event of a
kind seen by the watch that runs for the whole bench."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from hangar.paths import repo_root

from .conftest import Cluster

# bench/ is a directory of scripts, not a package; appended, so none of its names shadows another module.
sys.path.append(str(repo_root() / "bench"))
import _watch

NS = "default"


@pytest.fixture
async def core(cluster: Cluster) -> AsyncIterator[client.CoreV1Api]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield client.CoreV1Api(api)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"  # a rerun on a kept cluster (HANGAR_TEST_KUBECONFIG) starts clean


def configmap(name: str, step: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"step": step}}


def at(step: str) -> _watch.Check:
    return lambda cm: (cm.get("data") or {}).get("step") == step


async def test_a_create_is_answered_as_json_and_a_conflict_raises(core: client.CoreV1Api) -> None:
    name = unique("bw-create")
    made = await _watch.call(core.create_namespaced_config_map, NS, configmap(name, "1"))
    assert isinstance(made, dict) and made["metadata"]["name"] == name and made["data"] == {"step": "1"}
    with pytest.raises(ApiException) as e:
        await _watch.call(core.create_namespaced_config_map, NS, configmap(name, "1"))
    assert e.value.status == 409


async def test_until_sees_the_state_when_it_comes_and_not_before(core: client.CoreV1Api) -> None:
    name = unique("bw-until")
    await _watch.call(core.create_namespaced_config_map, NS, configmap(name, "1"))
    wait = asyncio.create_task(_watch.until(name, core.list_namespaced_config_map, (NS,), name, at("3"), 30))
    for step in ("2", "3", "4"):
        await asyncio.sleep(0.3)
        assert not wait.done() or step == "4"
        await core.patch_namespaced_config_map(name, NS, {"data": {"step": step}})
    seen = await asyncio.wait_for(wait, 30)
    assert seen["data"]["step"] == "3"  # the watch's event of that write, not the object read later


async def test_until_takes_a_state_already_there_from_its_list(core: client.CoreV1Api) -> None:
    name = unique("bw-listed")
    await _watch.call(core.create_namespaced_config_map, NS, configmap(name, "5"))
    seen = await _watch.until(name, core.list_namespaced_config_map, (NS,), name, at("5"), 5)
    assert seen["metadata"]["name"] == name


async def test_a_check_that_raises_ends_the_wait(core: client.CoreV1Api) -> None:
    name = unique("bw-fail")
    await _watch.call(core.create_namespaced_config_map, NS, configmap(name, "1"))

    def failed(cm: dict[str, Any]) -> bool:
        if cm["data"]["step"] == "failed":
            raise RuntimeError("it failed")
        return False

    wait = asyncio.create_task(_watch.until(name, core.list_namespaced_config_map, (NS,), name, failed, 30))
    await asyncio.sleep(0.3)
    await core.patch_namespaced_config_map(name, NS, {"data": {"step": "failed"}})
    with pytest.raises(RuntimeError, match="it failed"):
        await asyncio.wait_for(wait, 30)


async def test_until_times_out(core: client.CoreV1Api) -> None:
    name = unique("bw-late")
    await _watch.call(core.create_namespaced_config_map, NS, configmap(name, "1"))
    with pytest.raises(TimeoutError):
        await _watch.until(name, core.list_namespaced_config_map, (NS,), name, at("never"), 0.5)


async def test_forever_hands_over_every_object_and_change(core: client.CoreV1Api) -> None:
    prefix = unique("bw-forever") + "-"
    a, b = prefix + "a", prefix + "b"
    await _watch.call(core.create_namespaced_config_map, NS, configmap(a, "1"))
    seen: list[tuple[str, str, str]] = []

    async def handle(kind: str, cm: dict[str, Any]) -> None:
        if cm["metadata"]["name"].startswith(prefix):
            seen.append((kind, cm["metadata"]["name"], (cm.get("data") or {}).get("step", "")))

    async def until_seen(want: list[tuple[str, str, str]]) -> None:
        async with asyncio.timeout(30):
            while seen != want:
                assert seen == want[: len(seen)], seen
                await asyncio.sleep(0.05)

    task = asyncio.create_task(_watch.forever(handle, core.list_namespaced_config_map, NS))
    try:
        await until_seen([("ADDED", a, "1")])  # there before the watch began
        await _watch.call(core.create_namespaced_config_map, NS, configmap(b, "1"))
        await core.patch_namespaced_config_map(a, NS, {"data": {"step": "2"}})
        await core.delete_namespaced_config_map(b, NS)
        await until_seen([("ADDED", a, "1"), ("ADDED", b, "1"), ("MODIFIED", a, "2"), ("DELETED", b, "1")])
    finally:
        task.cancel()
