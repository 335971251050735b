"""FakeKube: the in-memory Kube the unit tier reconciles against. Its agreement with the real apiserver is
shown by tests/e2e/test_fake_kube_contract.py; here, its own behaviour case by case."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from hangar.kube import ApiException, Kube, owner_ref
from hangar.testing.fake_kube import FakeKube
from hangar.testing.kube_patch import json_patch, label_matcher, merge_patch


def env(name: str = "dev", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Environment",
        "metadata": {"name": name, **meta},
        "spec": {"image": "img"},
    }


def session(name: str = "s1", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": name, **meta},
        "spec": {"environment": "dev"},
    }


def secret(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, **meta}, "data": {}}


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        n: inspect.signature(getattr(cls, n))
        for n in dir(cls)
        if not n.startswith("_") and callable(getattr(cls, n))
    }


def test_the_fake_has_every_method_of_kube_with_the_same_parameters() -> None:
    real, fake = public_methods(Kube), public_methods(FakeKube)
    for name, sig in real.items():
        assert name in fake, name
        assert list(sig.parameters.values()) == list(fake[name].parameters.values()), name
        # Overridden, not inherited: an inherited one would reach for a connection the fake doesn't have.
        assert name in FakeKube.__dict__, name
        assert inspect.iscoroutinefunction(getattr(Kube, name)) == inspect.iscoroutinefunction(
            getattr(FakeKube, name)
        ), name
        assert inspect.isasyncgenfunction(getattr(Kube, name)) == inspect.isasyncgenfunction(
            getattr(FakeKube, name)
        ), name


async def test_create_sets_server_metadata_and_drops_status() -> None:
    k = FakeKube("ns1")
    out = await k.create("sessions", {**session(), "status": {"phase": "Running"}})
    meta = out["metadata"]
    assert meta["namespace"] == "ns1" and meta["generation"] == 1 and meta["uid"]
    assert meta["creationTimestamp"].endswith("Z") and meta["resourceVersion"].isdigit()
    assert "status" not in out
    assert await k.get("sessions", "s1") == out
    with pytest.raises(ApiException) as e:
        await k.create("sessions", session())
    assert e.value.status == 409
    assert await k.get("sessions", "nope") is None


async def test_create_checks_kind_namespace_name_and_the_model() -> None:
    k = FakeKube("ns1")
    for body, status in [
        ({**session(), "kind": "Turn"}, 400),
        (session(namespace="other"), 400),
        ({**session(), "metadata": {}}, 422),
        ({**session(), "spec": {"harness": "nope", "environment": "dev"}}, 422),
        ({**session(), "spec": {}}, 422),
    ]:
        with pytest.raises(ApiException) as e:
            await k.create("sessions", body)
        assert e.value.status == status, body
    made = await k.create("sessions", {**session(), "metadata": {"generateName": "s-"}})
    assert made["metadata"]["name"].startswith("s-") and len(made["metadata"]["name"]) == 7


async def test_patch_and_patch_status_of_a_missing_object_are_404() -> None:
    k = FakeKube()
    for call in (k.patch("sessions", "x", {"spec": {}}), k.patch_status("sessions", "x", {"phase": "Idle"})):
        with pytest.raises(ApiException) as e:
            await call
        assert e.value.status == 404
    assert await k.delete("sessions", "x") is False


async def test_merge_patch_and_generation() -> None:
    k = FakeKube()
    made = await k.create("sessions", session(labels={"a": "1", "b": "2"}))
    rv0 = made["metadata"]["resourceVersion"]
    out = await k.patch("sessions", "s1", {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert out["metadata"]["generation"] == 1 and int(out["metadata"]["resourceVersion"]) > int(rv0)
    out = await k.patch("sessions", "s1", {"spec": {"stopped": True}, "status": {"phase": "Failed"}})
    assert out["metadata"]["generation"] == 2 and out["spec"]["stopped"] is True and "status" not in out
    # The same patch again changes nothing: no new resource version, no new generation.
    again = await k.patch("sessions", "s1", {"spec": {"stopped": True}})
    assert again == out


async def test_patch_status_changes_only_status_and_honours_the_precondition() -> None:
    k = FakeKube()
    made = await k.create("sessions", session())
    rv = made["metadata"]["resourceVersion"]
    out = await k.patch_status("sessions", "s1", {"phase": "Idle", "counters": {"turns": 1}}, rv)
    assert out["status"]["phase"] == "Idle" and out["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as e:
        await k.patch_status("sessions", "s1", {"phase": "Running"}, rv)
    assert e.value.status == 409
    out = await k.patch_status("sessions", "s1", {"counters": {"steers": 2}, "reason": None})
    assert out["status"]["counters"] == {"turns": 1, "steers": 2} and out["status"]["phase"] == "Idle"
    with pytest.raises(ApiException) as e:
        await k.patch_status("sessions", "s1", {"phase": "Dancing"})
    assert e.value.status == 422


async def test_json_patch() -> None:
    k = FakeKube()
    await k.create("sessions", session(labels={"a": "1"}))
    out = await k.patch(
        "sessions",
        "s1",
        [
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "x/z"},
            {"op": "replace", "path": "/spec/environment", "value": "prod"},
            {"op": "remove", "path": "/metadata/labels/a"},
        ],
    )
    assert out["metadata"]["finalizers"] == ["x/y", "x/z"] and out["spec"]["environment"] == "prod"
    assert "labels" not in out["metadata"] and out["metadata"]["generation"] == 2
    for ops in (
        [{"op": "test", "path": "/spec/environment", "value": "dev"}],
        [{"op": "remove", "path": "/spec/nothing"}],
        [{"op": "replace", "path": "/metadata/finalizers/5", "value": "q"}],
    ):
        with pytest.raises(ApiException) as e:
            await k.patch("sessions", "s1", ops)
        assert e.value.status == 422, ops
    assert (await k.get("sessions", "s1")) == out  # all or nothing


def test_patch_functions_follow_their_rfcs() -> None:
    # RFC 7386's appendix examples.
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch(["a"], {"a": {"b": None}}) == {"a": {}}
    assert merge_patch({"a": "foo"}, "bar") == "bar"
    # RFC 6902's: escaping, move, copy, insertion into an array.
    doc = {"a/b": 1, "m~n": 2, "arr": ["x", "z"]}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/arr/1", "value": "y"},
            {"op": "move", "from": "/a~1b", "path": "/moved"},
            {"op": "copy", "from": "/m~0n", "path": "/copied"},
        ],
    )
    assert out == {"m~n": 2, "arr": ["x", "y", "z"], "moved": 1, "copied": 2}
    assert doc == {"a/b": 1, "m~n": 2, "arr": ["x", "z"]}


def test_label_selectors() -> None:
    labels = {"app": "hangar", "tier": "sandbox", "run": "r1"}
    for sel, want in [
        ("app=hangar", True),
        ("app==hangar,tier=sandbox", True),
        ("app=hangar,tier=api", False),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("tier!=api", True),
        ("missing!=x", True),
        ("tier in (api, sandbox)", True),
        ("tier notin (api,sandbox),app", False),
        ("missing notin (a)", True),
        ("", True),
    ]:
        assert label_matcher(sel)(labels) is want, sel
    with pytest.raises(ApiException) as e:
        label_matcher("a=b=c")
    assert e.value.status == 400


async def test_list_with_selectors_in_one_namespace() -> None:
    k = FakeKube("ns1")
    await k.create("sessions", session("b", labels={"hangar.dev/job": "j1"}))
    await k.create("sessions", session("a", labels={"hangar.dev/job": "j1"}))
    await k.create("sessions", session("c", labels={"hangar.dev/job": "j2"}))
    await k.scoped("ns2").create("sessions", session("a", labels={"hangar.dev/job": "j1"}))
    names = [s["metadata"]["name"] for s in await k.list("sessions", "hangar.dev/job=j1")]
    assert names == ["a", "b"]
    assert len(await k.list("sessions")) == 3 and len(await k.scoped("ns2").list("sessions")) == 1
    assert k.scoped("ns1") is k and k.scoped("ns2").namespace == "ns2"
    await k.create_core("secrets", secret("k1", labels={"hangar.dev/session": "a"}))
    assert [s["metadata"]["name"] for s in await k.list_core("secrets", "hangar.dev/session")] == ["k1"]
    assert await k.list_core("secrets", "hangar.dev/session=b") == []


async def test_finalizers_hold_a_deleted_object_until_removed() -> None:
    k = FakeKube()
    await k.create("sessions", session(finalizers=["hangar.dev/x"]))
    assert await k.delete("sessions", "s1") is True
    held = await k.get("sessions", "s1")
    assert held is not None and held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["generation"] == 2  # as the apiserver: a graceful deletion bumps it
    assert await k.delete("sessions", "s1") is True  # deleting again: still there, still True
    with pytest.raises(ApiException) as e:
        await k.patch("sessions", "s1", {"metadata": {"finalizers": ["hangar.dev/x", "other"]}})
    assert e.value.status == 422
    await k.patch_status("sessions", "s1", {"phase": "Stopped"})  # status is still writable
    await k.patch("sessions", "s1", {"metadata": {"finalizers": None}})
    assert await k.get("sessions", "s1") is None


async def test_owner_references_are_garbage_collected_recursively() -> None:
    k = FakeKube()
    parent = await k.create("environments", env())
    s1 = await k.create("sessions", session("s1", ownerReferences=[owner_ref(parent)]))
    await k.create("sessions", session("s2", ownerReferences=[owner_ref(parent)], finalizers=["f"]))
    await k.create_core("secrets", secret("k1", ownerReferences=[owner_ref(s1)]))
    other = await k.create("environments", env("other"))
    await k.create_core(
        "secrets", secret("k2", ownerReferences=[owner_ref(parent), owner_ref(other, controller=False)])
    )
    # Owners are namespace-local: one of the same name in another namespace is not touched.
    ns2 = k.scoped("ns2")
    await ns2.create_core(
        "secrets", secret("k1", ownerReferences=[owner_ref(await ns2.create("environments", env()))])
    )
    assert await k.delete("environments", "dev") is True
    assert await k.get("sessions", "s1") is None and await k.get_core("secrets", "k1") is None
    s2 = await k.get("sessions", "s2")
    assert s2 is not None and s2["metadata"]["deletionTimestamp"]
    k2 = await k.get_core("secrets", "k2")
    assert k2 is not None and [r["name"] for r in k2["metadata"]["ownerReferences"]] == ["other"]
    assert await k.scoped("ns2").get_core("secrets", "k1") is not None


async def test_core_objects() -> None:
    k = FakeKube()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    assert await k.create_core("pods", {**pod, "status": {"phase": "Running"}}) is True
    assert await k.create_core("pods", pod) is False
    got = await k.get_core("pods", "p")
    assert got is not None and got["status"] == {"phase": "Pending"} and "generation" not in got["metadata"]
    k.set_status("pods", "p", {"phase": "Running", "podIP": "10.0.0.1"})
    got = await k.get_core("pods", "p")
    assert got is not None and got["status"]["phase"] == "Running"
    assert await k.delete_core("pods", "p", grace_period_seconds=0) is True
    assert await k.delete_core("pods", "p") is False and await k.get_core("pods", "p") is None
    await k.create_core("secrets", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    got = await k.get_core("secrets", "s")
    assert got is not None and got["data"] == {"k": "dg=="} and got["kind"] == "Secret"
    with pytest.raises(KeyError):
        await k.get_core("configmaps", "x")


async def test_watch_starts_with_what_exists_then_follows_changes() -> None:
    k = FakeKube()
    made = await k.create("sessions", session("a"))
    events: list[tuple[str, str]] = []
    done = asyncio.Event()

    async def follow(rv: str | None) -> None:
        async for ev in k.watch("sessions", rv):
            events.append((ev["type"], ev["object"]["metadata"]["name"]))
            if ev["type"] == "DELETED":
                done.set()
                return

    task = asyncio.create_task(follow(None))
    await asyncio.sleep(0)
    await k.create("sessions", session("b"))
    await k.patch_status("sessions", "b", {"phase": "Idle"})
    await k.create(
        "turns",
        {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Turn",
            "metadata": {"name": "t"},
            "spec": {"session": "b", "index": 1, "message": "hi"},
        },
    )
    await k.scoped("ns2").create("sessions", session("c"))
    await k.delete("sessions", "b")
    await asyncio.wait_for(done.wait(), 5)
    await task
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]
    # From a resource version: what happened after it, without the synthetic ADDED of what exists.
    events.clear()
    done.clear()
    await asyncio.wait_for(follow(made["metadata"]["resourceVersion"]), 5)
    assert events == [("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]


async def test_writes_are_recorded_and_faults_injected() -> None:
    k = FakeKube()
    await k.create("sessions", session())
    await k.get("sessions", "s1")
    await k.list("sessions")
    assert [(w.verb, w.resource, w.name) for w in k.writes] == [("create", "sessions", "s1")]
    k.writes.clear()
    k.fail_next("patch_status", "sessions", 500)
    with pytest.raises(ApiException) as e:
        await k.patch_status("sessions", "s1", {"phase": "Idle"})
    assert e.value.status == 500
    await k.patch_status("sessions", "s1", {"phase": "Idle"})  # the retry goes through
    assert [(w.verb, w.error) for w in k.writes] == [("patch_status", 500), ("patch_status", None)]
    assert k.writes[1].body == {"phase": "Idle"}
    # As the apiserver would answer, through Kube's own translation of it.
    k.fail_next("get", "sessions", 404)
    assert await k.get("sessions", "s1") is None and await k.get("sessions", "s1") is not None
    k.fail_next("create_core", "secrets", 409)
    assert await k.create_core("secrets", secret("x")) is False
    k.fail_next("list", "sessions", 503, times=2)
    for _ in range(2):
        with pytest.raises(ApiException):
            await k.list("sessions")
    assert len(await k.list("sessions")) == 1
    k.fail_next("delete", "sessions", 409, name="other")
    assert await k.delete("sessions", "s1") is True


async def test_seed_and_peek_are_not_writes() -> None:
    k = FakeKube()
    seeded = k.seed("sessions", {**session(), "status": {"phase": "Running"}})
    assert seeded["status"] == {"phase": "Running"} and k.writes == []
    assert k.peek("sessions", "s1") == seeded and k.names("sessions") == ["s1"]


async def test_unknown_fields_are_pruned_and_schema_defaults_set() -> None:
    k = FakeKube()
    body = session()
    body["spec"]["bogus"] = 1
    body["spec"]["model"] = None  # nullable: kept
    body["extra"] = {"x": 1}
    made = await k.create("sessions", body)
    assert "extra" not in made and "bogus" not in made["spec"]
    assert made["spec"] == {
        "environment": "dev",
        "harness": "claude",
        "model": None,
        "stopped": False,
        "tainted": False,
    }
    # Removing a defaulted field puts the default back: nothing changed, so no write happened.
    again = await k.patch("sessions", "s1", {"spec": {"harness": None}})
    assert again == made
    out = await k.patch_status("sessions", "s1", {"phase": "Idle", "nonsense": 1})
    assert "nonsense" not in out["status"]


async def test_an_object_created_with_only_gone_owners_is_collected() -> None:
    k = FakeKube()
    ghost = {"apiVersion": "v1", "kind": "Session", "metadata": {"name": "gone", "uid": "no-such-uid"}}
    assert await k.create_core("secrets", secret("orphan", ownerReferences=[owner_ref(ghost)])) is True
    assert await k.get_core("secrets", "orphan") is None
    held = await k.create("sessions", session("held", ownerReferences=[owner_ref(ghost)], finalizers=["f"]))
    assert "deletionTimestamp" not in held["metadata"]  # what create answered, before the collector came
    now = await k.get("sessions", "held")
    assert now is not None and now["metadata"]["deletionTimestamp"]


async def test_graceful_pods_terminate_until_their_kubelet_is_done() -> None:
    k = FakeKube(graceful_pods=True)
    spec = {"nodeName": "n1", "containers": [], "terminationGracePeriodSeconds": 10}
    for name in ("p1", "p2", "p3"):
        await k.create_core("pods", {"metadata": {"name": name}, "spec": spec})
    await k.create_core("pods", {"metadata": {"name": "unbound"}, "spec": {"containers": []}})
    assert await k.delete_core("pods", "p1") is True
    p1 = await k.get_core("pods", "p1")
    assert p1 is not None and p1["metadata"]["deletionGracePeriodSeconds"] == 10
    k.finish_pod("p1")
    assert await k.get_core("pods", "p1") is None
    await k.delete_core("pods", "p2", grace_period_seconds=3)
    p2 = await k.get_core("pods", "p2")
    assert p2 is not None and p2["metadata"]["deletionGracePeriodSeconds"] == 3
    await k.delete_core("pods", "p2", grace_period_seconds=0)  # forced
    assert await k.get_core("pods", "p2") is None
    await k.delete_core("pods", "p3", grace_period_seconds=0)
    await k.delete_core("pods", "unbound")
    assert k.names("pods") == []


async def test_a_watch_whose_resource_version_expired_is_raised_for_a_relist_like_kube_watch() -> None:
    k = FakeKube()
    made = await k.create("sessions", session("a"))
    await k.create("sessions", session("b"))
    k.fail_next("watch", "sessions", 410)
    with pytest.raises(ApiException) as e:
        await anext(k.watch("sessions", made["metadata"]["resourceVersion"]))
    assert e.value.status == 410  # not started over from "now": the caller lists again
    items, rv = await k.list_at("sessions")
    assert [o["metadata"]["name"] for o in items] == ["a", "b"]
    stream = k.watch("sessions", rv)
    await k.create("sessions", session("c"))
    got = await anext(stream)
    assert (got["type"], got["object"]["metadata"]["name"]) == ("ADDED", "c")  # only what follows the listing
    k.break_watches("sessions", 410)
    with pytest.raises(ApiException) as e:
        await anext(stream)
    assert e.value.status == 410
    k.fail_next("watch", "sessions", 403)
    with pytest.raises(ApiException) as e:
        await anext(k.watch("sessions"))
    assert e.value.status == 403
    assert k.server.watchers == []


async def test_a_refused_write_is_recorded_with_its_status() -> None:
    k = FakeKube()
    with pytest.raises(ApiException):
        await k.patch("sessions", "missing", {"spec": {"stopped": True}})
    await k.create("sessions", session())
    assert await k.create_core("secrets", secret("x")) and not await k.create_core("secrets", secret("x"))
    assert [(w.verb, w.name, w.error) for w in k.writes] == [
        ("patch", "missing", 404),
        ("create", "s1", None),
        ("create_core", "x", None),
        ("create_core", "x", 409),
    ]
