"""A small typed layer over kubernetes_asyncio for hangar's resources and the core objects it manages."""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import helpers as aiohttp_helpers
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import rest
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from .models import GROUP, VERSION

Obj = dict[str, Any]
JsonPatch = list[Obj]
Objs = list[Obj]  # spelt once here: inside Kube, ``list`` is the method

__all__ = ["EXT", "SNAPSHOT_GROUP", "Answer", "ApiException", "Kube", "Obj", "OnWrite", "merge_patch"]

# Told of every hangar object as a write returned it (plural, object): the operator's cache reads its writes.
OnWrite = Callable[[str, Obj], None]


class Answer:
    """``with Answer(404) as gone:`` an ``ApiException`` of that status is an answer, not a failure (a get of
    a missing object is None, a create of an existing one False): it is swallowed and ``gone.given`` says so.
    Any other error goes on up. ``Kube`` and the unit tier's fake both answer this way."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.given = False

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: Any) -> bool:
        self.given = isinstance(e, ApiException) and e.status == self.status
        return self.given


def status_of(obj: Obj | None) -> dict[str, Any]:
    """An object's ``status`` as a dict: empty when it has none yet (or, fail closed, one that isn't a map).
    For the few raw reads that a status model would only slow down (counts, compare-before-write)."""
    st = (obj or {}).get("status")
    return st if isinstance(st, dict) else {}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``None`` deletes a key, objects merge recursively, anything else replaces
    (a copy: neither ``target`` nor ``patch`` is changed, and the result shares no value with ``patch``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def proxy_once(cfg: client.Configuration, api: client.ApiClient) -> None:
    """kubernetes_asyncio's aiohttp session trusts the environment, so aiohttp looks a proxy (and ~/.netrc)
    up on a worker thread for every request: two thread hops on the way of each apiserver call (0.5 ms p50,
    ~4 ms p99 on a loaded machine). The environment is the process's own: the proxy it names for the
    apiserver (HTTPS_PROXY and NO_PROXY, as aiohttp reads them) is found once, here, and given with every
    request. A ~/.netrc login was never the apiserver's concern (basic auth went in Kubernetes 1.19)."""
    rest = api.rest_client
    find = getattr(aiohttp_helpers, "get_env_proxy_for_url", None)
    if find is None or not hasattr(rest.pool_manager, "_trust_env"):
        return  # an aiohttp without these (private) parts: it keeps looking the proxy up itself, as before
    if not cfg.proxy:
        with contextlib.suppress(LookupError):
            proxy, auth = find(URL(cfg.host))
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": auth.encode()}
    rest.pool_manager._trust_env = False


class Kube:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.on_write: OnWrite | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, namespace: str | None = None) -> Kube:
        cfg = client.Configuration()
        if kubeconfig or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        else:
            config.load_incluster_config(client_configuration=cfg)
        ns = namespace or os.environ.get("HANGAR_NAMESPACE") or "default"
        api = client.ApiClient(cfg)
        proxy_once(cfg, api)
        return cls(api, ns)

    def scoped(self, namespace: str) -> Kube:
        """The same connection, acting in another namespace (the operator serves several)."""
        if namespace == self.namespace:
            return self
        out = Kube.__new__(Kube)
        out.api, out.custom, out.core, out.namespace = self.api, self.custom, self.core, namespace
        out.on_write = self.on_write
        return out

    def _wrote(self, plural: str, obj: Obj) -> Obj:
        if self.on_write is not None and isinstance(obj, dict) and obj.get("metadata"):
            self.on_write(plural, obj)
        return obj

    async def close(self) -> None:
        await self.api.close()

    # hangar resources -------------------------------------------------------------------------------
    async def get(self, plural: str, name: str) -> Obj | None:
        with Answer(404):
            out: Obj = await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, name
            )
            return out
        return None

    async def list(self, plural: str, label_selector: str | None = None) -> list[Obj]:
        kw: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        out = await self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, **kw)
        items: list[Obj] = out.get("items", [])
        return items

    async def list_all(self, plural: str, label_selector: str | None = None) -> Objs:
        """Every namespace's (an operator serving all of them counts slots across the cluster)."""
        kw: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        out = await self.custom.list_cluster_custom_object(GROUP, VERSION, plural, **kw)
        items: Objs = out.get("items", [])
        return items

    async def create(self, plural: str, body: Obj) -> Obj:
        out: Obj = await self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, body
        )
        return self._wrote(plural, out)

    async def patch(self, plural: str, name: str, body: Obj | JsonPatch) -> Obj:
        ctype = "application/json-patch+json" if isinstance(body, list) else "application/merge-patch+json"
        out: Obj = await self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, body, _content_type=ctype
        )
        return self._wrote(plural, out)

    async def patch_status(
        self, plural: str, name: str, status: Obj, resource_version: str | None = None
    ) -> Obj:
        """A merge patch of ``status``; with ``resource_version``, only if the object is still at it (409 else)."""
        body: Obj = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        out: Obj = await self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, plural, name, body, _content_type="application/merge-patch+json"
        )
        return self._wrote(plural, out)

    async def delete(self, plural: str, name: str) -> bool:
        with Answer(404) as gone:
            await self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, name, propagation_policy="Background"
            )
        return not gone.given

    # core objects the operator manages: pods, secrets, persistentvolumeclaims, events --------------------
    # Answered as JSON (``_plain``), as the hangar resources are: kubernetes_asyncio would build its typed
    # models from every answer (a pod: ~0.9 ms of CPU) for these to turn them back into dicts.
    async def _plain(self, op: str, kind: str, *args: Any, decode: bool = True, **kw: Any) -> Obj:
        """``{op}_namespaced_{kind}`` with the apiserver's answer read as bytes and decoded with ``json.loads``;
        a status that is not 2xx raises ``ApiException`` as the typed call does (status, reason, body)."""
        call = getattr(self.core, f"{op}_namespaced_{_CORE[kind]}")
        resp = await call(*args, _preload_content=False, **kw)
        try:
            data = await resp.read()
        finally:
            resp.release()
        if not 200 <= resp.status <= 299:
            e = ApiException(http_resp=rest.RESTResponse(resp, data))
            e.body = data.decode("utf-8", "replace")
            raise e
        out: Obj = json.loads(data) if decode else {}
        return out

    async def get_core(self, kind: str, name: str) -> Obj | None:
        with Answer(404):
            return await self._plain("read", kind, name, self.namespace)
        return None

    async def create_core(self, kind: str, body: Obj) -> bool:
        """Creates the object; False when one of that name exists already (409). The answer is read as
        bytes and dropped, not decoded into kubernetes_asyncio's typed model (a pod's: ~0.3 ms of the loop,
        between a sandbox's volume and its pod): no caller uses it."""
        with Answer(409) as exists:
            await self._plain("create", kind, self.namespace, body, decode=False)  # the answer: unused
        return not exists.given

    async def dry_run_create_core(self, kind: str, body: Obj) -> Obj:
        """The object as the apiserver would create it (defaulted, with fields it does not serve dropped),
        without creating it (``dryRun=All``)."""
        return await self._plain("create", kind, self.namespace, body, dry_run="All")

    async def patch_core(self, kind: str, name: str, body: Obj | JsonPatch) -> Obj:
        """A merge patch; with ``metadata.resourceVersion`` in it, only if the object is still at that
        version (409 else): a compare-and-set. A list is a JSON patch, applied whole or not at all: a
        failed ``test`` in it is 422 (a test-and-set that needs no version read first)."""
        ctype = "application/json-patch+json" if isinstance(body, list) else "application/merge-patch+json"
        return await self._plain("patch", kind, name, self.namespace, body, _content_type=ctype)

    async def delete_core(self, kind: str, name: str, grace_period_seconds: int | None = None) -> bool:
        """Deletes the object; False when it was gone already (404)."""
        kw: dict[str, Any] = {}
        if grace_period_seconds is not None:
            kw["grace_period_seconds"] = grace_period_seconds
        with Answer(404) as gone:
            await self._plain("delete", kind, name, self.namespace, **kw)
        return not gone.given

    async def list_core(self, kind: str, label_selector: str | None = None) -> Objs:
        kw: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        items: Objs = (await self._plain("list", kind, self.namespace, **kw)).get("items") or []
        return items

    # other API groups' objects hangar makes: VolumeSnapshots (``EXT``) -------------------------------------
    async def served(self, group: str, version: str) -> set[str]:
        """API discovery: the resources (plurals) the cluster serves in ``group/version``; empty if none."""
        with Answer(404) as absent:
            found = await self.custom.get_api_resources(group, version)
        if absent.given:
            return set()
        return {r.name for r in found.resources or [] if "/" not in r.name}

    async def get_ext(self, plural: str, name: str) -> Obj | None:
        group, version, _ = EXT[plural]
        with Answer(404):
            out: Obj = await self.custom.get_namespaced_custom_object(
                group, version, self.namespace, plural, name
            )
            return out
        return None

    async def list_ext(self, plural: str, label_selector: str | None = None) -> Objs:
        group, version, _ = EXT[plural]
        kw: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        out = await self.custom.list_namespaced_custom_object(group, version, self.namespace, plural, **kw)
        items: Objs = out.get("items", [])
        return items

    async def create_ext(self, plural: str, body: Obj) -> bool:
        """Creates the object; False when one of that name exists already (409)."""
        group, version, _ = EXT[plural]
        with Answer(409) as exists:
            await self.custom.create_namespaced_custom_object(group, version, self.namespace, plural, body)
        return not exists.given

    async def delete_ext(self, plural: str, name: str) -> bool:
        """Deletes the object; False when it was gone already (404)."""
        group, version, _ = EXT[plural]
        with Answer(404) as gone:
            await self.custom.delete_namespaced_custom_object(group, version, self.namespace, plural, name)
        return not gone.given

    async def list_at(self, plural: str) -> tuple[Objs, str | None]:
        """Every object of ``plural`` in the namespace, and the listing's resourceVersion: where a watch
        that misses nothing goes on from (:meth:`watch`)."""
        out = await self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)
        items: Objs = out.get("items") or []
        rv = (out.get("metadata") or {}).get("resourceVersion")
        return items, None if rv is None else str(rv)

    async def watch(
        self, plural: str, resource_version: str | None = None, *, bookmarks: bool = False
    ) -> AsyncIterator[Obj]:
        """Watch events ({"type", "object", "raw_object"}: the same dict) of one plural after
        ``resource_version`` (a :meth:`list_at`'s), forever: when the apiserver ends a watch (its timeout) it
        is watched again from the last version seen. ``bookmarks``: BOOKMARK events too (they keep that
        version recent). Without a version it starts with an ADDED for every object there is.

        Each line is read as bytes and decoded once with ``json.loads``: kubernetes_asyncio's ``Watch``
        decoded it, encoded the object again and decoded that (three passes an event, on the loop of
        whoever watches), and built an API client of its own (an SSL context: ~30 ms of CPU) per watch.

        A 410 Gone (the version expired: what happened since is beyond the apiserver's window) is raised,
        never papered over by watching again from "now", which would skip the gap's changes and deletions:
        the caller lists again (:meth:`list_at`) and goes on from the listing."""
        while True:
            kw: dict[str, Any] = {"timeout_seconds": 300}
            if resource_version:
                kw["resource_version"] = resource_version
            if bookmarks:
                kw["allow_watch_bookmarks"] = True
            resp = await self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, watch=True, _preload_content=False, **kw
            )
            try:
                if resp.status != 200:
                    data = await resp.read()
                    raise ApiException(status=resp.status, reason=data.decode("utf-8", "replace")[:2000])
                while line := await resp.content.readline():
                    ev: Obj = json.loads(line)
                    obj = ev.get("object")
                    if ev.get("type") == "ERROR":  # the stream's end: 410 when the version expired
                        st = obj if isinstance(obj, dict) else {}
                        raise ApiException(
                            status=st.get("code"), reason=f"{st.get('reason')}: {st.get('message')}"
                        )
                    ev["raw_object"] = obj
                    if isinstance(obj, dict):
                        resource_version = (obj.get("metadata") or {}).get(
                            "resourceVersion", resource_version
                        )
                    yield ev
            finally:
                resp.close()  # a watch left early can't go back to the pool mid-stream


# The kubernetes_asyncio method suffix of each core kind the operator manages.
_CORE = {
    "pods": "pod",
    "secrets": "secret",
    "persistentvolumeclaims": "persistent_volume_claim",
    "events": "event",
}


# Objects of other API groups hangar makes: plural → (group, version, kind).
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
EXT = {"volumesnapshots": (SNAPSHOT_GROUP, "v1", "VolumeSnapshot")}


def owner_ref(obj: Obj, controller: bool = True) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }
