"""FakeKube's contract: one scripted sequence of Kube calls, run against the real kube-apiserver (with its
controller-manager, whose garbage collector does the owner-reference part) and against FakeKube, gives
the same outcomes: what exists, the statuses of refused calls, what patches leave, when the resource
version and the generation move, what is collected, what a watch sees.

This is what lets the unit tier's controller tests, which run on FakeKube, stand for the real thing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hangar.kube import ApiException, Kube, owner_ref
from hangar.testing.fake_kube import FakeKube

from .conftest import Cluster

Obj = dict[str, Any]
Check = Callable[[], Awaitable[bool]]
Eventually = Callable[[Check], Awaitable[None]]


def res(kind: str, name: str, spec: Obj, **meta: Any) -> Obj:
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def env(name: str, **meta: Any) -> Obj:
    return res("Environment", name, {"image": "python:3.12-slim"}, **meta)


def session(name: str, **meta: Any) -> Obj:
    return res("Session", name, {"environment": "dev"}, **meta)


def turn(name: str) -> Obj:
    return res("Turn", name, {"session": "s1", "index": 1, "message": "hi"})


def secret(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, **meta}, "data": {}}


def view(obj: Obj | None) -> Obj | None:
    """What the contract compares of an object: everything but the values only a server makes up."""
    if obj is None:
        return None
    meta = obj["metadata"]
    return {
        "top": sorted(obj),
        "spec": obj.get("spec"),
        "status": obj.get("status"),
        "labels": meta.get("labels"),
        "finalizers": meta.get("finalizers"),
        "generation": meta.get("generation"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "owners": [r["name"] for r in meta.get("ownerReferences") or []],
    }


async def status_of(call: Awaitable[Any]) -> int | str:
    try:
        await call
        return "ok"
    except ApiException as e:
        return int(e.status)


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


async def scenario(k: Kube, eventually: Eventually) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []

    def note(label: str, value: Any) -> None:
        out.append((label, value))

    # create: server metadata, status dropped (status subresource), unknown fields pruned, defaults set
    await k.create("environments", env("dev"))
    body = {**session("s1", labels={"hangar.dev/job": "j1"}), "status": {"phase": "Running"}, "junk": 1}
    body["spec"]["bogus"] = True
    s1 = await k.create("sessions", body)
    note("created", view(s1))
    note("metadata", sorted(m for m in s1["metadata"] if m not in ("managedFields",)))
    note("namespace", s1["metadata"]["namespace"] == k.namespace)
    note("create existing", await status_of(k.create("sessions", session("s1"))))
    note(
        "create, wrong namespace", await status_of(k.create("sessions", session("s9", namespace="elsewhere")))
    )
    note(
        "create, invalid spec", await status_of(k.create("sessions", res("Session", "s9", {"harness": "x"})))
    )
    note("get missing", await k.get("sessions", "nope"))
    note("patch missing", await status_of(k.patch("sessions", "nope", {"spec": {"stopped": True}})))
    json_op = [{"op": "add", "path": "/metadata/labels", "value": {}}]
    note("json patch missing", await status_of(k.patch("sessions", "nope", json_op)))
    note("patch_status missing", await status_of(k.patch_status("sessions", "nope", {"phase": "Idle"})))
    note("delete missing", await k.delete("sessions", "nope"))

    # merge patch and the generation
    p = await k.patch("sessions", "s1", {"metadata": {"labels": {"hangar.dev/job": None, "x": "1"}}})
    note("labels merged", view(p))
    note("metadata patch: rv moves", rv(p) > rv(s1))
    p2 = await k.patch(
        "sessions", "s1", {"spec": {"stopped": True, "model": "m"}, "status": {"phase": "Failed"}}
    )
    note("spec patched, status ignored", view(p2))
    p3 = await k.patch("sessions", "s1", {"spec": {"stopped": True}})
    note("no-op patch: rv stays", rv(p3) == rv(p2))
    p4 = await k.patch("sessions", "s1", {"spec": {"harness": None}})
    note("removed default comes back", (view(p4), rv(p4) == rv(p3)))

    # the status subresource and its precondition
    st = await k.patch_status("sessions", "s1", {"phase": "Idle", "counters": {"turns": 1}}, str(rv(p4)))
    note("status patched", (view(st), rv(st) > rv(p4)))
    note(
        "stale precondition",
        await status_of(k.patch_status("sessions", "s1", {"phase": "Running"}, str(rv(p4)))),
    )
    st2 = await k.patch_status("sessions", "s1", {"counters": {"steers": 2}, "reason": None, "junk": 1})
    note("status merged", view(st2))
    st3 = await k.patch_status("sessions", "s1", {"counters": {"steers": 2}})
    note("no-op status patch: rv stays", rv(st3) == rv(st2))
    note("invalid status", await status_of(k.patch_status("sessions", "s1", {"phase": "Dancing"})))
    stale = {"metadata": {"resourceVersion": str(rv(p4))}, "spec": {"model": "n"}}
    note("stale precondition on patch", await status_of(k.patch("sessions", "s1", stale)))
    note("rename by patch", await status_of(k.patch("sessions", "s1", {"metadata": {"name": "s2"}})))
    note("precondition after all that", rv(st3) == rv(await k.get("sessions", "s1") or {}))

    # JSON patch
    jp = await k.patch(
        "sessions",
        "s1",
        [
            {"op": "test", "path": "/metadata/labels/x", "value": "1"},
            {"op": "add", "path": "/metadata/finalizers", "value": ["hangar.dev/a"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "hangar.dev/b"},
            {"op": "replace", "path": "/spec/environment", "value": "prod"},
            {"op": "remove", "path": "/metadata/labels/x"},
        ],
    )
    note("json patched", view(jp))
    failed_test = [{"op": "test", "path": "/spec/environment", "value": "dev"}]
    note("json patch, failed test", await status_of(k.patch("sessions", "s1", failed_test)))
    remove_missing = [{"op": "remove", "path": "/spec/nothing"}]
    note("json patch, missing path", await status_of(k.patch("sessions", "s1", remove_missing)))
    note("failed json patches change nothing", view(await k.get("sessions", "s1")) == view(jp))

    # finalizers
    note("delete with finalizers", await k.delete("sessions", "s1"))
    note("held", view(await k.get("sessions", "s1")))
    note("deleted again", await k.delete("sessions", "s1"))
    more = {"metadata": {"finalizers": ["hangar.dev/a", "hangar.dev/b", "hangar.dev/c"]}}
    note("no new finalizer while deleting", await status_of(k.patch("sessions", "s1", more)))
    note("status while deleting", view(await k.patch_status("sessions", "s1", {"phase": "Stopped"})))
    await k.patch("sessions", "s1", {"metadata": {"finalizers": ["hangar.dev/b"]}})
    note("one finalizer left", view(await k.get("sessions", "s1")))
    await k.patch("sessions", "s1", {"metadata": {"finalizers": None}})
    note("gone with its last finalizer", await k.get("sessions", "s1"))

    # label selectors
    await k.create("sessions", session("a", labels={"job": "j1", "tier": "x"}))
    await k.create("sessions", session("b", labels={"job": "j1"}))
    await k.create("sessions", session("c", labels={"job": "j2"}))
    for sel in ("job=j1", "job==j1,tier", "job!=j1", "!tier", "job in (j1,j2),tier notin (x)", "nope"):
        note(f"select {sel}", [s["metadata"]["name"] for s in await k.list("sessions", sel)])
    note("select, malformed", await status_of(k.list("sessions", "a=b=c")))

    # core objects
    note("create_core", await k.create_core("secrets", secret("k1", labels={"job": "j1"})))
    note("create_core existing", await k.create_core("secrets", secret("k1")))
    await k.create_core("secrets", {"metadata": {"name": "k2"}, "stringData": {"key": "value"}})
    k2 = await k.get_core("secrets", "k2")
    note("stringData", (k2 or {}).get("data"))
    note("list_core", [s["metadata"]["name"] for s in await k.list_core("secrets", "job=j1")])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1"},
        # Placed nowhere: no scheduler or kwok node of a shared control plane moves its phase on.
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "nodeSelector": {"hangar.dev/contract": "nowhere"},
        },
        "status": {"phase": "Running"},
    }
    await k.create_core("pods", pod)
    got = await k.get_core("pods", "p1")
    note("pod status is the server's", (got or {}).get("status", {}).get("phase"))
    # A dry run (the image-volume check at the operator's start): the pod as it would be, nothing stored.
    dry = {**pod, "metadata": {"name": "p2"}}
    dry["spec"] = {**pod["spec"], "volumes": [{"name": "d", "image": {"reference": "busybox"}}]}
    made = await k.dry_run_create_core("pods", dry)
    note(
        "dry run: its image volume",
        [v["image"]["reference"] for v in made["spec"]["volumes"] if "image" in v],
    )
    note("dry run: its namespace", made["metadata"]["namespace"] == k.namespace)
    note("dry run: stored nowhere", await k.get_core("pods", "p2"))
    note("delete_core", await k.delete_core("pods", "p1", grace_period_seconds=0))

    async def pod_gone() -> bool:
        return await k.get_core("pods", "p1") is None

    await eventually(pod_gone)
    note("delete_core missing", await k.delete_core("pods", "p1"))
    note("get_core missing", await k.get_core("secrets", "nope"))

    # owner references: the garbage collector
    parent = await k.create("environments", env("gc"))
    child = await k.create("sessions", session("gc-child", ownerReferences=[owner_ref(parent)]))
    await k.create(
        "sessions", session("gc-held", ownerReferences=[owner_ref(parent)], finalizers=["x.dev/f"])
    )
    await k.create_core("secrets", secret("gc-grandchild", ownerReferences=[owner_ref(child)]))
    dev = await k.get("environments", "dev")
    assert dev is not None
    both = [owner_ref(parent), owner_ref(dev, controller=False)]
    await k.create_core("secrets", secret("gc-shared", ownerReferences=both))
    note("delete owner", await k.delete("environments", "gc"))

    async def collected() -> bool:
        shared = await k.get_core("secrets", "gc-shared")
        held = await k.get("sessions", "gc-held")
        return (
            await k.get("sessions", "gc-child") is None
            and await k.get_core("secrets", "gc-grandchild") is None
            and shared is not None
            and len(shared["metadata"].get("ownerReferences") or []) == 1
            and held is not None
            and bool(held["metadata"].get("deletionTimestamp"))
        )

    await eventually(collected)
    ghost = {**env("ghost"), "metadata": {"name": "ghost", "uid": str(uuid.uuid4())}}
    note(
        "create with a gone owner",
        await k.create_core("secrets", secret("orphan", ownerReferences=[owner_ref(ghost)])),
    )

    async def orphan_collected() -> bool:
        return await k.get_core("secrets", "orphan") is None

    await eventually(orphan_collected)
    note("child", await k.get("sessions", "gc-child"))
    note("grandchild", await k.get_core("secrets", "gc-grandchild"))
    note("shared", view(await k.get_core("secrets", "gc-shared")))
    note("held child", view(await k.get("sessions", "gc-held")))

    # a watch: what exists when it starts, then every change, no-ops not included
    w0 = await k.create("turns", turn("w0"))
    events: list[tuple[str, str, Any]] = []
    started = asyncio.Event()

    async def follow(since: str | None = None) -> None:
        async for ev in k.watch("turns", since):
            obj = ev["object"]
            name = obj["metadata"]["name"]
            events.append((ev["type"], name, (obj.get("status") or {}).get("phase")))
            started.set()
            if ev["type"] == "DELETED" and name == "w1":
                return

    task = asyncio.create_task(follow())
    await asyncio.wait_for(started.wait(), 30)
    await k.create("turns", turn("w1"))
    await k.patch_status("turns", "w1", {"phase": "Running"})
    await k.patch_status("turns", "w1", {"phase": "Running"})
    await k.patch("turns", "w1", {"metadata": {"labels": {"a": "b"}}})
    await k.create("sessions", session("not-a-turn"))
    await k.delete("turns", "w1")
    await asyncio.wait_for(task, 30)
    note("watch", list(events))
    events.clear()
    await asyncio.wait_for(follow(w0["metadata"]["resourceVersion"]), 30)
    note("watch from a resource version", list(events))

    # a listing's version: a watch from it tells only what came after the listing
    items, at = await k.list_at("turns")
    note("listed", sorted(o["metadata"]["name"] for o in items))
    stream = k.watch("turns", at)
    after = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.5)  # the watch is open (the real one answers nothing until an event)
    await k.create("turns", turn("w2"))
    ev = await asyncio.wait_for(after, 30)
    note("watch from a listing", (ev["type"], ev["object"]["metadata"]["name"]))
    await stream.aclose()
    return out


async def _instant(check: Check) -> None:
    assert await check(), "FakeKube collects at once"


async def _polling(check: Check, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "the real control plane did not get there in time"
        await asyncio.sleep(0.25)


def _wait_for_default_service_account(cluster: Cluster, ns: str) -> None:
    """Pods are admitted once the controller-manager has made the namespace's default service account."""
    deadline = time.monotonic() + 60
    while cluster.kubectl("-n", ns, "get", "serviceaccount", "default", check=False).returncode != 0:
        assert time.monotonic() < deadline, "no default service account"
        time.sleep(0.25)


async def test_fake_kube_behaves_like_the_apiserver(cluster: Cluster) -> None:
    ns = f"contract-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    _wait_for_default_service_account(cluster, ns)
    fake = await scenario(FakeKube(ns), _instant)
    real_kube = await Kube.connect(str(cluster.kubeconfig), ns)
    try:
        real = await scenario(real_kube, _polling)
    finally:
        await real_kube.close()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert [label for label, _ in real] == [label for label, _ in fake]
    differ = [
        f"{label}: the apiserver gave {want!r}, FakeKube {got!r}"
        for (label, want), (_, got) in zip(real, fake, strict=True)
        if got != want
    ]
    assert differ == [], "\n".join(differ)


async def test_a_watch_from_an_expired_version_says_410_to_its_caller(cluster: Cluster) -> None:
    """Kube.watch does not watch on from "now" after a 410 (that would skip what happened in the gap): the
    caller gets it and lists again. Version 1 is older than any apiserver's watch window here."""
    k = await Kube.connect(str(cluster.kubeconfig), "default")
    try:
        with pytest.raises(ApiException) as e:
            await asyncio.wait_for(anext(k.watch("turns", "1")), 30)
        assert e.value.status == 410
        _, at = await k.list_at("turns")
        assert at is not None and int(at) > 1
    finally:
        await k.close()


async def snapshot_scenario(k: Kube) -> list[tuple[str, Any]]:
    """The CSI snapshot API's part (the local control plane installs its CRDs): discovery, and a
    VolumeSnapshot made, found by its label, refused twice, deleted."""
    body = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "vs1", "labels": {"hangar.dev/session": "s1"}},
        "spec": {"source": {"persistentVolumeClaimName": "s1-workspace"}},
    }
    other = {**body, "metadata": {"name": "vs2", "labels": {"hangar.dev/session": "s2"}}}
    out: list[tuple[str, Any]] = []
    out.append(("served", "volumesnapshots" in await k.served("snapshot.storage.k8s.io", "v1")))
    out.append(("not served", await k.served("snapshot.storage.k8s.io", "v9")))
    out.append(("create", await k.create_ext("volumesnapshots", body)))
    out.append(("create again", await k.create_ext("volumesnapshots", body)))
    await k.create_ext("volumesnapshots", other)
    got = await k.get_ext("volumesnapshots", "vs1")
    assert got is not None
    out.append(("get", (got["apiVersion"], got["kind"], got["spec"], got["metadata"]["labels"])))
    listed = await k.list_ext("volumesnapshots", label_selector="hangar.dev/session=s1")
    out.append(("list by label", [o["metadata"]["name"] for o in listed]))
    out.append(("delete", await k.delete_ext("volumesnapshots", "vs1")))
    out.append(("delete again", await k.delete_ext("volumesnapshots", "vs1")))
    out.append(("get gone", await k.get_ext("volumesnapshots", "vs1")))
    return out


async def test_fake_kube_serves_volume_snapshots_like_the_apiserver(cluster: Cluster) -> None:
    ns = f"contract-vs-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    fake = await snapshot_scenario(FakeKube(ns, snapshot_api=True))
    real_kube = await Kube.connect(str(cluster.kubeconfig), ns)
    try:
        real = await snapshot_scenario(real_kube)
    finally:
        await real_kube.close()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert real == fake
    # Without the API (a cluster with no snapshot CRDs), FakeKube answers as the apiserver does then.
    plain = FakeKube(ns)
    assert await plain.served("snapshot.storage.k8s.io", "v1") == set()
    assert await plain.get_ext("volumesnapshots", "vs1") is None
    try:
        await plain.create_ext("volumesnapshots", {"metadata": {"name": "vs1"}, "spec": {}})
        raise AssertionError("creating a resource the cluster does not serve is a 404")
    except ApiException as e:
        assert e.status == 404
