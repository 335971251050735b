"""The objects one sandbox run is made of: the run key Secret, the workspace PVC and the sandbox Pod.

Pure functions of the Session, its Environment and the settings, so they are easy to read and test.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hangar.config import Settings
from hangar.kube import SNAPSHOT_GROUP, Obj, owner_ref, status_of
from hangar.models import labels as L
from hangar.models.environment import EnvironmentSpec
from hangar_driver import precleared as pre
from hangar_driver.protocol import new_run_key

from .foreign_status import snapshot_status
from .runs import Run

# Paths inside the sandbox container. The local pod runner maps these to local directories.
DRIVER_DIR = "/opt/hangar/lib"
DRIVER_COMMAND = f"{DRIVER_DIR}/bin/hangar-driver"  # sandbox-image/bin/hangar-driver
DRIVER_IN_IMAGE = DRIVER_DIR.lstrip("/")  # where the driver image holds it (images/hangar/Containerfile)
KEY_DIR = "/var/run/hangar/key"
KEY_FILE = f"{KEY_DIR}/run-key"
PRECLEARED_FILE = f"{KEY_DIR}/precleared"
# Checkpoints live on the workspace volume (subPath checkpoints), root-only: beside the state they restore.
CHECKPOINT_DIR = "/var/lib/hangar/checkpoints"
WORKSPACE = "/workspace"
AGENT_HOME = "/home/agent"
REPO_CREDENTIALS_DIR = "/var/run/hangar/repo"
AGENT_UID = 1001
DRIVER_UID = 1000
SANDBOX = "sandbox"  # the component label of a session's sandbox pod (a claimed warm one too)


def labels(session: str, run: Run | None = None, component: str = SANDBOX) -> dict[str, str]:
    out = {**L.part_of(), L.COMPONENT: component, L.SESSION: session}
    if run:
        out[L.RUN] = run.pod  # the namespace-local name: a label value holds at most 63 characters
    return out


def pvc_name(session: str) -> str:
    return f"{session}-workspace"


def workspace_name(session: Obj) -> str:
    """The session's workspace volume: ``<session>-workspace``, or the warm sandbox's it took
    (``status.workspace``)."""
    recorded = status_of(session).get("workspace")
    return str(recorded) if recorded else pvc_name(session["metadata"]["name"])


def run_key_secret(
    session: Obj, run: Run, precleared: dict[str, Any] | None = None, key: str | None = None
) -> tuple[Obj, str]:
    """The run's key (``key``: one derived for an adopted warm sandbox, else a new one); with ``precleared``
    (a resumed run: the call Tower allowed) also that call, signed with the key and bound to the run
    (``hangar_driver/precleared.py``), for the driver alone to read."""
    key = key or new_run_key()
    name = session["metadata"]["name"]
    data = {"run-key": base64.b64encode(key.encode()).decode()}
    if precleared is not None:
        text = pre.encode(key.encode(), {**precleared, "run": run.id})
        data["precleared"] = base64.b64encode(text.encode()).decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": run.key_secret,
            "labels": labels(name, run, "run-key"),
            "ownerReferences": [owner_ref(session)],
        },
        "type": "Opaque",
        "data": data,
    }
    return secret, key


def workspace_pvc(
    session: Obj, settings: Settings, clone_of: Obj | None = None, restore_from: Obj | None = None
) -> Obj:
    """One volume per session, kept across sandboxes: the checkout and the agent's HOME (conversation).

    ``clone_of``: a fork's parent's PVC. The new volume is a CSI clone of it (``dataSource``), so the fork
    starts with the parent's checkout and the CLI's conversation files. A clone needs the source's storage
    class and at least its size, so both are taken from it.

    ``restore_from``: a VolumeSnapshot of the session's lost volume (``snapshots.py``). The new volume starts
    as that snapshot (``dataSource``), at its ``restoreSize``, which a restore must request at least."""
    name = session["metadata"]["name"]
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.workspace_size}},
    }
    if settings.storage_class:
        spec["storageClassName"] = settings.storage_class
    if clone_of is not None:
        src = clone_of["spec"]
        spec["dataSource"] = {"kind": "PersistentVolumeClaim", "name": clone_of["metadata"]["name"]}
        size = ((src.get("resources") or {}).get("requests") or {}).get("storage")
        if size:
            spec["resources"] = {"requests": {"storage": size}}
        if src.get("storageClassName"):
            spec["storageClassName"] = src["storageClassName"]
    if restore_from is not None:
        snap = restore_from["metadata"]["name"]
        spec["dataSource"] = {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": snap}
        size = snapshot_status(restore_from).restore_size
        if size:
            spec["resources"] = {"requests": {"storage": str(size)}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": pvc_name(name),
            "labels": labels(name, component="workspace"),
            "ownerReferences": [owner_ref(session)],
        },
        "spec": spec,
    }


def _merge(base: Any, override: Any) -> Any:
    """Deep merge of pod overrides: dicts merge, containers merge by name, anything else is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    if (
        isinstance(base, list)
        and isinstance(override, list)
        and all(isinstance(x, dict) and "name" in x for x in base + override)
    ):
        by_name = {x["name"]: x for x in base}
        merged = [_merge(by_name[x["name"]], x) if x["name"] in by_name else x for x in override]
        names = {x["name"] for x in override}
        return [x for x in base if x["name"] not in names] + merged
    return override


def mcp_servers_env(env: EnvironmentSpec) -> list[dict[str, Any]]:
    """``HANGAR_MCP_SERVERS`` for the driver, which hands the servers to the agent's CLI: for each of the
    Environment's ``mcp:`` servers only how to reach it (``command`` argv or ``url``). Its ``trust`` and
    ``write_tools`` stay here: taint and approvals are decided by the operator, never by the CLI."""
    servers: dict[str, dict[str, Any]] = {}
    for name, server in sorted(env.mcp.items()):
        if server.command:
            servers[name] = {"command": list(server.command)}
        elif server.url:
            servers[name] = {"url": server.url}
    if not servers:
        return []
    return [{"name": "HANGAR_MCP_SERVERS", "value": json.dumps(servers, sort_keys=True)}]


def repository_env(session: Obj, env: EnvironmentSpec) -> list[dict[str, Any]]:
    """Where the driver checks the Environment's repository out: its URL, the base branch and the session's
    branch (a job's attempts carry the job's in annotations; a session works on ``hangar/<session>``). The
    credentials are a root-only volume (``repository_volume``), never an environment variable."""
    repo = env.repository
    if repo is None:
        return []
    meta = session["metadata"]
    notes = meta.get("annotations") or {}
    out = [
        {"name": "HANGAR_REPO_URL", "value": repo.url},
        {"name": "HANGAR_REPO_BASE", "value": notes.get(L.BASE_BRANCH) or repo.base_branch},
        {"name": "HANGAR_REPO_BRANCH", "value": notes.get(L.BRANCH) or f"hangar/{meta['name']}"},
    ]
    if repo.credentials_secret:
        out.append({"name": "HANGAR_REPO_CREDENTIALS_DIR", "value": REPO_CREDENTIALS_DIR})
    return out


# The driver, always the operator's release (HANGAR_DRIVER_IMAGE), reaches the pod one of two ways
# (HANGAR_DRIVER_MOUNT): copied into an emptyDir by an init container, which costs a container's start and
# the copy on every cold start; or the image itself mounted read-only (an image volume), which costs neither.
def _driver_init(settings: Settings) -> dict[str, Any]:
    if settings.driver_mount == "image-volume":
        return {}
    return {
        "initContainers": [
            {
                "name": "install-driver",
                "image": settings.driver_image,
                "command": ["cp", "-a", f"{DRIVER_DIR}/.", "/driver/"],
                "volumeMounts": [{"name": "driver", "mountPath": "/driver"}],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ]
    }


def driver_volume(settings: Settings) -> dict[str, Any]:
    if settings.driver_mount == "image-volume":
        return {"name": "driver", "image": {"reference": settings.driver_image, "pullPolicy": "IfNotPresent"}}
    return {"name": "driver", "emptyDir": {}}


def driver_volume_mount(settings: Settings) -> dict[str, Any]:
    sub = {"subPath": DRIVER_IN_IMAGE} if settings.driver_mount == "image-volume" else {}
    return {"name": "driver", "mountPath": DRIVER_DIR, "readOnly": True, **sub}


def sandbox_pod(session: Obj, env: EnvironmentSpec, run: Run, settings: Settings, gateway: str) -> Obj:
    name = session["metadata"]["name"]
    spec = session["spec"]
    agent_env: list[dict[str, Any]] = [
        {"name": f"HANGAR_AGENT_ENV_{e.name}", "value": e.value} for e in env.env
    ]
    container: dict[str, Any] = {
        "name": "sandbox",
        "image": env.image,
        # -S: no site (the driver is stdlib only; site's imports are ~15% of its way to the hello). A file,
        # not -m: the workspace (the working directory) stays off the driver's sys.path (bin/hangar-driver).
        "command": ["python3", "-S", DRIVER_COMMAND],
        "workingDir": WORKSPACE,
        "env": [
            {"name": "PYTHONPATH", "value": DRIVER_DIR},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "HANGAR_GATEWAY", "value": gateway},
            {"name": "HANGAR_RUN_ID", "value": run.id},
            {"name": "HANGAR_SESSION", "value": name},
            {"name": "HANGAR_HARNESS", "value": spec.get("harness", "claude")},
            {"name": "HANGAR_RUN_KEY_FILE", "value": KEY_FILE},
            {"name": "HANGAR_PRECLEARED_FILE", "value": PRECLEARED_FILE},
            {"name": "HANGAR_CHECKPOINT_DIR", "value": CHECKPOINT_DIR},
            {"name": "HANGAR_WORKSPACE", "value": WORKSPACE},
            {"name": "HANGAR_AGENT_HOME", "value": AGENT_HOME},
            {"name": "HANGAR_AGENT_UID", "value": str(AGENT_UID)},
            {"name": "HANGAR_AGENT_GID", "value": str(AGENT_UID)},
            {"name": "HANGAR_CLI_PATH", "value": settings.cli_path},
            *mcp_servers_env(env),
            *repository_env(session, env),
            *agent_env,
        ],
        "envFrom": [
            {"prefix": f"HANGAR_AGENT_ENV_{ref.prefix}", "secretRef": {"name": ref.name}}
            for ref in env.secret_refs
        ],
        "volumeMounts": [
            {"name": "workspace", "mountPath": WORKSPACE, "subPath": "workspace"},
            {"name": "workspace", "mountPath": AGENT_HOME, "subPath": "home"},
            driver_volume_mount(settings),
            {"name": "run-key", "mountPath": KEY_DIR, "readOnly": True},
            {"name": "workspace", "mountPath": CHECKPOINT_DIR, "subPath": "checkpoints"},
        ],
        "resources": env.resources.dump(),
        # The driver starts as root only to drop the agent to its own uid; nothing else needs privilege.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {
                "drop": ["ALL"],
                "add": ["SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"],
            },
        },
    }
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": run.pod,
            "labels": labels(name, run),
            "annotations": {L.RUN: run.id},
            "ownerReferences": [owner_ref(session)],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 10,
            **_driver_init(settings),
            "containers": [container],
            "volumes": [
                {"name": "workspace", "persistentVolumeClaim": {"claimName": workspace_name(session)}},
                driver_volume(settings),
                {"name": "run-key", "secret": {"secretName": run.key_secret, "defaultMode": 0o400}},
            ],
        },
    }
    if env.repository is not None and env.repository.credentials_secret:
        # Root-only (0400): the driver clones and pushes with it; the agent's uid can't read it.
        container["volumeMounts"].append(
            {"name": "repo-credentials", "mountPath": REPO_CREDENTIALS_DIR, "readOnly": True}
        )
        pod["spec"]["volumes"].append(
            {
                "name": "repo-credentials",
                "secret": {"secretName": env.repository.credentials_secret, "defaultMode": 0o400},
            }
        )
    if settings.sandbox_service_account:
        # Its token stays unmounted (above): the account only names what the sandbox runs as (e.g. GKE
        # Workload Identity binds cloud access to it); it never gives the agent a Kubernetes credential.
        pod["spec"]["serviceAccountName"] = settings.sandbox_service_account
    runtime_class = env.runtime_class_name or settings.runtime_class
    if runtime_class:
        pod["spec"]["runtimeClassName"] = runtime_class
    if env.pod_overrides:
        pod["spec"] = _merge(pod["spec"], env.pod_overrides)
    return pod
