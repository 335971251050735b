"""Volumes of a service pod that the base runner leaves empty, filled the way a kubelet fills them:
projected volumes (the ServiceAccount token from the TokenRequest API, ConfigMaps, Secrets, the downward
API) and ``fsGroup`` ownership of writable volumes."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("hangar.podrunner.service")

# A kubelet's default for a projected token's life (what the ServiceAccount admission plugin asks for).
DEFAULT_TOKEN_SECONDS = 3607


def _write(path: Path, data: bytes, mode: int, gid: int | None) -> None:
    """Atomically (write, then rename): a client re-reading the token never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    if gid is not None:
        os.chown(tmp, 0, gid)
    os.replace(tmp, path)


def _fs_group(pod: dict[str, Any]) -> int | None:
    g = (pod["spec"].get("securityContext") or {}).get("fsGroup")
    return int(g) if g is not None else None


async def request_token(core: client.CoreV1Api, pod: dict[str, Any], source: dict[str, Any]) -> bytes:
    """A token for the pod's ServiceAccount, bound to the pod: it stops working when the pod is deleted."""
    meta = pod["metadata"]
    spec: dict[str, Any] = {
        "expirationSeconds": int(source.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS),
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
    }
    if source.get("audience"):
        spec["audiences"] = [source["audience"]]
    sa = pod["spec"].get("serviceAccountName") or "default"
    answer = await core.create_namespaced_service_account_token(sa, meta["namespace"], {"spec": spec})
    return str(answer.status.token).encode()


async def _config_map(core: client.CoreV1Api, name: str, ns: str, optional: bool) -> dict[str, str]:
    """A ConfigMap's data; kube-root-ca.crt appears shortly after its namespace does (the controller-manager
    publishes it), so a missing one is waited for a little."""
    for _ in range(60):
        try:
            cm = await core.read_namespaced_config_map(name, ns)
            return dict(cm.data or {})
        except ApiException as e:
            if e.status != 404:
                raise
        if optional:
            return {}
        await asyncio.sleep(0.5)
    raise RuntimeError(f"configmap {ns}/{name} not found")


def _items(data: dict[str, bytes], items: list[dict[str, Any]] | None) -> dict[str, bytes]:
    if not items:
        return data
    return {i["path"]: data[i["key"]] for i in items if i["key"] in data}


async def fill_projected(core: client.CoreV1Api, pod: dict[str, Any], vols: dict[str, Path]) -> list[Path]:
    """Fills the pod's projected volumes; returns the token files written (to be refreshed)."""
    ns, gid = pod["metadata"]["namespace"], _fs_group(pod)
    tokens: list[Path] = []
    for vol in pod["spec"].get("volumes") or []:
        proj = vol.get("projected")
        if proj is None:
            continue
        root, mode = vols[vol["name"]], int(proj.get("defaultMode", 0o644))
        for src in proj.get("sources") or []:
            files: dict[str, bytes] = {}
            if "serviceAccountToken" in src:
                sat = src["serviceAccountToken"]
                files[sat["path"]] = await request_token(core, pod, sat)
                tokens.append(root / sat["path"])
            elif "configMap" in src:
                ref = src["configMap"]
                cm = await _config_map(core, ref["name"], ns, bool(ref.get("optional")))
                files = _items({k: v.encode() for k, v in cm.items()}, ref.get("items"))
            elif "secret" in src:
                ref = src["secret"]
                s = await core.read_namespaced_secret(ref["name"], ns)
                raw = {k: base64.b64decode(v) for k, v in (s.data or {}).items()}
                files = _items(raw, ref.get("items"))
            elif "downwardAPI" in src:
                fields = {"metadata.namespace": ns, "metadata.name": pod["metadata"]["name"]}
                for item in src["downwardAPI"].get("items") or []:
                    fp = (item.get("fieldRef") or {}).get("fieldPath", "")
                    if fp not in fields:
                        raise ValueError(f"downwardAPI field {fp!r} is not supported by the local runner")
                    files[item["path"]] = fields[fp].encode()
            for rel, content in files.items():
                _write(root / rel, content, mode, gid)
        os.chmod(root, 0o755)
    return tokens


async def refresh_tokens(core: client.CoreV1Api, pod: dict[str, Any], paths: list[Path]) -> None:
    """A kubelet renews a projected token at 80% of its life; clients re-read the file."""
    sources = [
        src["serviceAccountToken"]
        for vol in pod["spec"].get("volumes") or []
        for src in (vol.get("projected") or {}).get("sources") or []
        if "serviceAccountToken" in src
    ]
    life = min(int(s.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS) for s in sources)
    while True:
        await asyncio.sleep(life * 0.8)
        for path, src in zip(paths, sources, strict=False):
            try:
                _write(path, await request_token(core, pod, src), path.stat().st_mode & 0o777, _fs_group(pod))
            except (ApiException, OSError) as e:
                log.warning("token refresh for %s failed: %s", pod["metadata"]["name"], e)


def group_owned(pod: dict[str, Any], vols: dict[str, Path]) -> None:
    """``fsGroup``: writable volumes (PVCs, emptyDirs) belong to that group, group-writable, setgid, as a
    kubelet leaves them, so a non-root container can write its database there."""
    gid = _fs_group(pod)
    if gid is None:
        return
    for vol in pod["spec"].get("volumes") or []:
        if "persistentVolumeClaim" in vol or "emptyDir" in vol:
            top = vols[vol["name"]]
            for dirpath, dirnames, filenames in os.walk(top):
                for n in [*dirnames, *filenames]:
                    p = os.path.join(dirpath, n)
                    os.chown(p, -1, gid, follow_symlinks=False)
            os.chown(top, 0, gid)
            os.chmod(top, 0o2775)
