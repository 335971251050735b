"""`hangar dev up | down | status`: the embedded default, everything on this machine."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from ..cli.context import Context, context_file, save
from ..paths import repo_root, state_dir
from . import binaries
from .controlplane import ControlPlane, free_port, stop_process
from .scripted_envs import config_map, environment
from .stack import Stack, kill_under, wait_http, write_state

DEMO_ENV = "default"


def dev_root() -> Path:
    return Path(os.environ.get("HANGAR_DEV_ROOT") or state_dir() / "dev")


def _state_file() -> Path:
    return dev_root() / "state.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def up(with_clis: bool = True, tower: bool = False) -> dict[str, Any]:
    root = dev_root()
    if _state_file().exists():
        st = json.loads(_state_file().read_text())
        if any(_alive(pid) for pid in st.get("pids", {}).values()):
            print("hangar dev is already up; `hangar dev status` shows it, `hangar dev down` stops it")
            return dict(st)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    bins = binaries.ensure()
    if with_clis:
        subprocess.run(
            ["bash", str(repo_root() / "tools" / "install-clis.sh")], check=True, stdout=subprocess.DEVNULL
        )
    cp = ControlPlane(bins, root / "cluster").start(crds=True)
    pids: dict[str, int] = {p.name: p.popen.pid for p in cp.processes}
    try:
        # A scripted model server so the demo runs the real CLIs with no model account and no network.
        model_port = free_port()
        model = _serve(root, "model", "hangar.testing.model_server", "--anthropic", "--port", str(model_port))
        pids["model"] = model.pid
        stack = Stack(root / "hangar", cp.kubeconfig)
        tower_url = ""
        if tower:
            tower_url, pids["tower"] = _start_tower(root, stack, str(cp.kubeconfig))
        stack.start_operator()
        stack.start_api()
        stack.start_runner()
        pids.update({n: p.pid for n, p in stack.procs.items()})
        wait_http(f"http://127.0.0.1:{model_port}/healthz", 30)
        _demo_environment(str(cp.kubeconfig), model_port)
    except BaseException:
        for pid in reversed(list(pids.values())):
            stop_process(pid)
        raise
    ctx = Context(stack.api_url, stack.token, str(cp.kubeconfig), stack.namespace)
    save(ctx)
    state = {
        **stack.state(),
        "pids": pids,
        "server": cp.server,
        "model_url": f"http://127.0.0.1:{model_port}",
        "tower_url": tower_url,
        "started_in_seconds": round(time.monotonic() - t0, 1),
        "root": str(root),
        "kubectl": str(bins.path("kubectl") or "kubectl"),
    }
    write_state(_state_file(), state)
    return state


def _serve(root: Path, name: str, module: str, *args: str) -> subprocess.Popen[bytes]:
    """``python -m module args`` in a session of its own, logging to ``root/<name>.log``."""
    with (root / f"{name}.log").open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _start_tower(root: Path, stack: Stack, kubeconfig: str) -> tuple[str, int]:
    """A Tower simulator (hangar.testing.tower) the dev stack is governed by: its signing secret in the
    Secret ``tower-webhook``, the operator and api told where it is. ``hangar dev tower`` decides."""
    port, secret, credential = free_port(), secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    secret_obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tower-webhook", "namespace": stack.namespace},
        "stringData": {"webhook-secret": secret, "credential": credential},
    }
    subprocess.run(  # apply, not create: a cluster kept from an earlier `up` has one already
        ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"],
        input=json.dumps(secret_obj).encode(),
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PATH": _kubectl_path()},
    )
    url = f"http://127.0.0.1:{port}"
    stack.extra_env.update(
        {
            "HANGAR_GOVERNANCE": "enforce",
            "HANGAR_GOVERNANCE_WEBHOOK_SECRET": "tower-webhook",
            "HANGAR_GOVERNANCE_URL": url,
            "HANGAR_GOVERNANCE_CREDENTIAL": credential,
            "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS": "20",
        }
    )
    proc = _serve(
        root,
        "tower",
        "hangar.testing.tower",
        # --name=value: a random secret may start with "-", which argparse would take for an option.
        *("--port", str(port), f"--secret={secret}", f"--credential={credential}"),
        *("--webhook", f"{stack.api_url}/api/governance/events"),
    )
    (root / "tower.json").write_text(json.dumps({"url": url, "credential": credential}))
    (root / "tower.json").chmod(0o600)
    return url, proc.pid


def tower_call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """A request to the dev stack's Tower simulator (``hangar dev up --tower``)."""
    import httpx

    conf_file = dev_root() / "tower.json"
    if not conf_file.exists():
        raise SystemExit("no Tower simulator: start the dev stack with `hangar dev up --tower`")
    conf = json.loads(conf_file.read_text())
    r = httpx.request(
        method, conf["url"] + path, json=body, headers={"Authorization": f"Bearer {conf['credential']}"}
    )
    if r.status_code >= 300:
        raise SystemExit(f"Tower simulator: {r.status_code} {r.text}")
    return r.json()


def _demo_environment(kubeconfig: str, model_port: int) -> None:
    """The ``default`` Environment, in which every harness runs against the scripted model (and the
    ConfigMap it mounts for pi and the Antigravity stand-in)."""
    url = f"http://127.0.0.1:{model_port}"
    items = {"kind": "List", "apiVersion": "v1", "items": [config_map(url), environment(DEMO_ENV, url)]}
    subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"],
        input=json.dumps(items).encode(),
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PATH": _kubectl_path()},
    )


def _kubectl_path() -> str:
    bins = binaries.ensure(build=False)
    return f"{bins.dir}:{os.environ.get('PATH', '')}"


def status() -> int:
    if not _state_file().exists():
        print("hangar dev is down")
        return 1
    st = json.loads(_state_file().read_text())
    ok = True
    for name, pid in st["pids"].items():
        alive = _alive(pid)
        ok = ok and alive
        print(f"{name:24} pid {pid:<8} {'running' if alive else 'NOT RUNNING'}")
    for name, url in (("operator", st["operator_url"] + "/healthz"), ("api", st["api_url"] + "/healthz")):
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                health = "healthy" if r.status == 200 else f"HTTP {r.status}"
        except Exception as e:
            health, ok = f"unhealthy ({e})", False
        print(f"{name + ' health':24} {health}")
    print(f"API      {st['api_url']}")
    print(f"kubectl  KUBECONFIG={st['kubeconfig']} kubectl get hangar")
    print(f"context  {context_file()}")
    return 0 if ok else 1


def down() -> int:
    if not _state_file().exists():
        print("hangar dev is down")
        return 0
    st = json.loads(_state_file().read_text())
    order = [
        "api",
        "operator",
        "runner",
        "model",
        "kwok",
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "etcd",
    ]
    pids: dict[str, int] = st["pids"]
    for name in sorted(pids, key=lambda n: order.index(n) if n in order else -1):
        stop_process(pids[name], grace=10)
    (dev_root() / "tower.json").unlink(missing_ok=True)
    killed = kill_under(Path(st["root"]))
    if st.get("runner_root"):
        killed += kill_under(Path(st["runner_root"]))
    _state_file().unlink()
    ctx = context_file()
    if ctx.exists():
        ctx.unlink()
    left = [n for n, p in pids.items() if _alive(p)]
    print(
        f"hangar dev stopped ({len(pids)} processes{', and ' + str(len(killed)) + ' sandbox processes' if killed else ''})"
    )
    if left:
        print(f"still running: {', '.join(left)}", file=sys.stderr)
        return 1
    return 0
