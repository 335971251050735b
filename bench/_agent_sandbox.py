"""agent-sandbox (sigs.k8s.io/agent-sandbox), hangar's nearest peer, on a local control plane: its controller
built from the Go module proxy and cached, its CRDs installed, the controller run as a process.

See ../../shared/notes/control-plane.md ("agent-sandbox, for side-by-side benchmarks"): the checksum database
is not reachable here, so the module is downloaded with GONOSUMDB and built in a writable copy, its own
go.sum covering the dependencies. The CRDs declare a conversion webhook between v1alpha1 and v1beta1; without
the webhook they are installed with the conversion removed and only the storage version served.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from _stats import log
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

VERSION = "v0.5.2"
MODULE = "sigs.k8s.io/agent-sandbox"
CACHE = Path(os.environ.get("HANGAR_CACHE", Path.home() / ".cache" / "hangar")) / f"agent-sandbox-{VERSION}"
BINARY = CACHE / "agent-sandbox-controller"
CRDS = CACHE / "crds"


def ensure() -> Path:
    """The controller binary, built once from the module proxy (several minutes on 2 cores) and cached."""
    if BINARY.exists() and CRDS.is_dir():
        return BINARY
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "GONOSUMDB": MODULE}
    log(f"agent-sandbox: downloading {MODULE}@{VERSION} from the module proxy")
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], env=env, check=True, capture_output=True
    )
    src = Path(json.loads(out.stdout)["Dir"])
    with tempfile.TemporaryDirectory(prefix="agent-sandbox-build-") as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(src, work)
        for p in [work, *work.rglob("*")]:  # the module cache is read-only
            p.chmod(p.stat().st_mode | 0o200)
        log("agent-sandbox: building the controller (several minutes)")
        CACHE.mkdir(parents=True, exist_ok=True)
        part = BINARY.with_suffix(".part")
        subprocess.run(
            [go, "build", "-o", str(part), "./cmd/agent-sandbox-controller"], cwd=work, env=env, check=True
        )
        if CRDS.exists():
            shutil.rmtree(CRDS)
        shutil.copytree(work / "k8s" / "crds", CRDS)
        part.rename(BINARY)  # last: a cut-short build leaves no binary that looks complete
    return BINARY


def crd_bodies() -> list[dict[str, Any]]:
    """The CRDs without their conversion webhook, serving only the storage version."""
    out = []
    for f in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        crd["spec"].pop("conversion", None)
        crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v.get("storage")]
        out.append(crd)
    return out


async def install_crds(kubeconfig: Path) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        ext = client.ApiextensionsV1Api(api)
        for crd in crd_bodies():
            try:
                await ext.create_custom_resource_definition(crd)
            except ApiException as e:
                if e.status != 409:
                    raise
        # Established before anything is created of them.
        for crd in crd_bodies():
            for _ in range(300):
                got = await ext.read_custom_resource_definition(crd["metadata"]["name"])
                conds = got.status.conditions or []
                if any(c.type == "Established" and c.status == "True" for c in conds):
                    break
                await asyncio.sleep(0.1)


def start_controller(kubeconfig: Path, logfile: Path) -> subprocess.Popen[bytes]:
    """The controller as a process, claims and warm pools included (``--extensions``), no webhook."""
    args = [
        str(BINARY),
        "--extensions",
        "--enable-webhook=false",
        "--manage-webhook-certs=false",
        "--leader-elect=false",
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
    ]
    out = logfile.open("ab")
    return subprocess.Popen(
        args, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=out, stderr=subprocess.STDOUT
    )
