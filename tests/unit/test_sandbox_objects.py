"""The objects one sandbox run is made of, built from the Session, its Environment and the settings."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from hangar.config import Settings, SettingsError, load
from hangar.models.environment import EnvironmentSpec
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import (
    KEY_FILE,
    WORKSPACE,
    labels,
    mcp_servers_env,
    pvc_name,
    run_key_secret,
    sandbox_pod,
    workspace_pvc,
)

SESSION: dict[str, Any] = {
    "apiVersion": "hangar.dev/v1alpha1",
    "kind": "Session",
    "metadata": {"name": "s1", "uid": "uid-s1"},
    "spec": {"environment": "dev", "harness": "codex"},
}


def settings(**kw: Any) -> Settings:
    base: dict[str, Any] = {
        "driver_image": "driver:1",
        "cli_path": "/clis/bin",
        "workspace_size": "5Gi",
        "storage_class": None,
        "runtime_class": None,
    }
    return Settings(**{**base, **kw})


def env_var(pod: dict[str, Any], name: str) -> str | None:
    container = pod["spec"]["containers"][0]
    return next((e["value"] for e in container["env"] if e["name"] == name), None)


def owned_by_session(obj: dict[str, Any]) -> bool:
    (ref,) = obj["metadata"]["ownerReferences"]
    return ref["uid"] == "uid-s1" and ref["kind"] == "Session" and ref["controller"] is True


RUN = make_run("default", "default", "s1", 1)


def test_labels() -> None:
    assert labels("s1") == {
        "app.kubernetes.io/part-of": "hangar",
        "app.kubernetes.io/component": "sandbox",
        "hangar.dev/session": "s1",
    }
    assert labels("s1", make_run("default", "default", "s1", 2), "run-key")["hangar.dev/run"] == "s1-r2"
    # Outside the home namespace the run id is qualified; the label keeps the namespace-local name.
    elsewhere = make_run("default", "team-a", "s1", 2)
    assert elsewhere.id == "team-a.s1-r2" and labels("s1", elsewhere)["hangar.dev/run"] == "s1-r2"


def test_the_run_key_secret_holds_a_fresh_key() -> None:
    secret, key = run_key_secret(SESSION, RUN)
    assert secret["metadata"]["name"] == "s1-r1-key" and owned_by_session(secret)
    assert base64.b64decode(secret["data"]["run-key"]).decode() == key and len(key) >= 32
    assert secret["metadata"]["labels"]["hangar.dev/run"] == "s1-r1"
    assert run_key_secret(SESSION, RUN)[1] != key


def test_the_workspace_pvc() -> None:
    pvc = workspace_pvc(SESSION, settings(storage_class="fast"))
    assert pvc["metadata"]["name"] == pvc_name("s1") == "s1-workspace" and owned_by_session(pvc)
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "fast",
    }
    assert "storageClassName" not in workspace_pvc(SESSION, settings())["spec"]


def test_a_forks_pvc_clones_its_parents_with_its_class_and_size() -> None:
    parent = {
        "metadata": {"name": "p-workspace"},
        "spec": {"resources": {"requests": {"storage": "20Gi"}}, "storageClassName": "csi"},
    }
    spec = workspace_pvc(SESSION, settings(storage_class="fast"), clone_of=parent)["spec"]
    assert spec["dataSource"] == {"kind": "PersistentVolumeClaim", "name": "p-workspace"}
    assert spec["resources"] == {"requests": {"storage": "20Gi"}} and spec["storageClassName"] == "csi"


def test_the_sandbox_pod() -> None:
    env = EnvironmentSpec.model_validate(
        {
            "image": "python:3.12",
            "env": [{"name": "FOO", "value": "bar"}],
            "secretRefs": [{"name": "creds", "prefix": "GH_"}],
            "resources": {"limits": {"cpu": "2"}},
        }
    )
    pod = sandbox_pod(SESSION, env, RUN, settings(), "gw:7443")
    assert pod["metadata"]["name"] == "s1-r1" and owned_by_session(pod)
    assert pod["metadata"]["labels"]["hangar.dev/run"] == "s1-r1"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert "runtimeClassName" not in spec
    (c,) = spec["containers"]
    assert c["image"] == "python:3.12" and c["workingDir"] == WORKSPACE
    assert spec["initContainers"][0]["image"] == "driver:1"
    assert env_var(pod, "HANGAR_GATEWAY") == "gw:7443" and env_var(pod, "HANGAR_RUN_ID") == "s1-r1"
    assert env_var(pod, "HANGAR_HARNESS") == "codex" and env_var(pod, "HANGAR_RUN_KEY_FILE") == KEY_FILE
    assert env_var(pod, "HANGAR_CLI_PATH") == "/clis/bin"
    assert env_var(pod, "HANGAR_AGENT_ENV_FOO") == "bar" and env_var(pod, "HANGAR_MCP_SERVERS") is None
    assert c["envFrom"] == [{"prefix": "HANGAR_AGENT_ENV_GH_", "secretRef": {"name": "creds"}}]
    assert c["resources"] == {"requests": {}, "limits": {"cpu": "2"}}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"]["claimName"] == "s1-workspace"
    assert volumes["run-key"]["secret"]["secretName"] == "s1-r1-key"
    assert volumes["driver"] == {"name": "driver", "emptyDir": {}}
    assert spec["initContainers"][0]["command"] == ["cp", "-a", "/opt/hangar/lib/.", "/driver/"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["driver"] == {"name": "driver", "mountPath": "/opt/hangar/lib", "readOnly": True}


def test_the_driver_as_an_image_volume() -> None:
    """HANGAR_DRIVER_MOUNT=image-volume: no init container; the driver image's /opt/hangar/lib is mounted
    read-only where the copy would be, so the command and PYTHONPATH are the same."""
    env = EnvironmentSpec.model_validate({"image": "python:3.12"})
    copied = sandbox_pod(SESSION, env, RUN, settings(), "gw:7443")
    pod = sandbox_pod(SESSION, env, RUN, settings(driver_mount="image-volume"), "gw:7443")
    spec = pod["spec"]
    assert "initContainers" not in spec
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["driver"] == {
        "name": "driver",
        "image": {"reference": "driver:1", "pullPolicy": "IfNotPresent"},
    }
    (c,) = spec["containers"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["driver"] == {
        "name": "driver",
        "mountPath": "/opt/hangar/lib",
        "readOnly": True,
        "subPath": "opt/hangar/lib",
    }
    assert c["command"] == copied["spec"]["containers"][0]["command"]
    assert c["env"] == copied["spec"]["containers"][0]["env"]


def test_an_unknown_driver_mount_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGAR_DRIVER_MOUNT", "hostpath")
    with pytest.raises(SettingsError, match="HANGAR_DRIVER_MOUNT") as e:
        load()
    assert "image-volume" in str(e.value)


def test_runtime_class_and_pod_overrides() -> None:
    env = EnvironmentSpec.model_validate(
        {
            "image": "img",
            "podOverrides": {
                "nodeSelector": {"pool": "sandboxes"},
                "containers": [{"name": "sandbox", "resources": {"limits": {"memory": "1Gi"}}}],
            },
        }
    )
    pod = sandbox_pod(SESSION, env, RUN, settings(runtime_class="gvisor"), "gw")
    assert pod["spec"]["runtimeClassName"] == "gvisor" and pod["spec"]["nodeSelector"] == {
        "pool": "sandboxes"
    }
    (c,) = pod["spec"]["containers"]
    # Merged by name: the override adds to the container, it does not replace it.
    assert c["resources"] == {"requests": {}, "limits": {"memory": "1Gi"}} and c["image"] == "img"
    env2 = env.model_copy(update={"runtime_class_name": "kata"})
    assert (
        sandbox_pod(SESSION, env2, RUN, settings(runtime_class="gvisor"), "gw")["spec"]["runtimeClassName"]
        == "kata"
    )


def test_mcp_servers_reach_the_driver_without_their_trust() -> None:
    env = EnvironmentSpec.model_validate(
        {
            "image": "img",
            "mcp": {
                "b": {"url": "http://b", "trust": "trusted", "write_tools": ["x*"]},
                "a": {"command": ["srv", "--x"]},
                "empty": {},
            },
        }
    )
    (var,) = mcp_servers_env(env)
    assert var["name"] == "HANGAR_MCP_SERVERS"
    assert json.loads(var["value"]) == {"a": {"command": ["srv", "--x"]}, "b": {"url": "http://b"}}
    assert mcp_servers_env(EnvironmentSpec(image="img")) == []
