"""A whole local hangar: control plane, CRDs, operator, API and the local pod runner, as processes.

``hangar dev up`` and the end-to-end tests both use it, so a developer runs exactly what the tests run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..config import Settings
from ..crdgen import render_all
from ..paths import cli_dir, repo_root
from .controlplane import ControlPlane, free_port, stop_process
from .podrunner import DEFAULT_PATH


async def install_crds(kubeconfig: str, timeout: float = 60) -> None:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        ext = client.ApiextensionsV1Api(api)
        names = []
        for text in render_all().values():
            body = yaml.safe_load(text)
            names.append(body["metadata"]["name"])
            try:
                await ext.create_custom_resource_definition(body)
            except ApiException as e:
                if e.status != 409:
                    raise
                current = await ext.read_custom_resource_definition(body["metadata"]["name"])
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                await ext.replace_custom_resource_definition(body["metadata"]["name"], body)
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = await ext.read_custom_resource_definition(name)
                conds = {c.type: c.status for c in (crd.status.conditions or [])}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not established")
                await asyncio.sleep(0.1)


# The image local Environments name. The local pod runner runs the driver on this machine's python3, so the
# image is never pulled; a cluster would run it.
SANDBOX_IMAGE = "ghcr.io/hangar-dev/hangar-sandbox:0.1.0"


def environment_object(name: str, env: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """An Environment for a local stack: ``env`` as plain variables, other spec fields (camelCase) as given."""
    body: dict[str, Any] = {"image": SANDBOX_IMAGE}
    if env:
        body["env"] = [{"name": k, "value": v} for k, v in env.items()]
    body.update({k: v for k, v in spec.items() if v is not None})
    return {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Environment",
        "metadata": {"name": name},
        "spec": body,
    }


def compile_driver(lib: Path) -> None:
    """The driver's bytecode for the python3 the local pod runner starts (the first on its PATH), as
    images/hangar/Containerfile makes it for the image's: a sandbox whose python3 is that version imports
    the driver without compiling it (most of its way to the hello); any other version compiles it as before.
    Hash-checked: a copy that does not keep the files' times still uses it, a changed source never."""
    python = shutil.which("python3", path=DEFAULT_PATH)
    if python is None:
        return
    subprocess.run(
        [python, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash", str(lib / "hangar_driver")],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def sandbox_image_copy(root: Path) -> Path:
    """A world-readable copy of sandbox-image/: the agent runs as another uid and may not reach the repo."""
    dst = root / "image" / "lib"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(repo_root() / "sandbox-image", dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    compile_driver(dst)
    for p in [root, root / "image", *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() or os.access(p, os.X_OK) else 0o644)
    dst.chmod(0o755)
    return dst


def wait_http(
    url: str, timeout: float = 60, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"process for {url} exited with {proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout}s")


@dataclass
class Stack:
    root: Path
    kubeconfig: Path
    namespace: str = "default"
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    api_port: int = field(default_factory=free_port)
    operator_port: int = field(default_factory=free_port)
    gateway_port: int = field(default_factory=free_port)
    database_url: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Callers besides the admin, as subject -> (token, role): two job submitters and an MCP client.
    callers: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {
            subject: (secrets.token_urlsafe(24), role)
            for subject, role in (("alice", "jobs"), ("bob", "jobs"), ("mcp-client", "mcp"))
        }
    )

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.database_url:
            self.database_url = f"sqlite:///{self.root / 'hangar.db'}"

    @property
    def runner_root(self) -> Path:
        """Where the local pod runner keeps pod volumes. The agent runs as another uid and must reach its
        workspace and HOME there, so it can't be under a private directory (``/root`` is 0700: a root user's
        ``hangar dev`` state lives there); then it is a directory of its own under ``/var/tmp``."""
        if traversable(self.root):
            return self.root / "runner"
        digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:10]
        alt = Path("/var/tmp") / f"hangar-runner-{os.getuid()}-{digest}"
        alt.mkdir(mode=0o711, exist_ok=True)
        os.chmod(alt, 0o711)  # others may pass through to their volume, not list what is there
        return alt

    def token_for(self, subject: str) -> str:
        return self.callers[subject][0]

    def tokens_file(self) -> Path:
        """The API's HANGAR_API_TOKENS_FILE: the callers above (the admin token comes from the env)."""
        path = self.root / "tokens.json"
        entries = [{"token": t, "subject": s, "role": r} for s, (t, r) in self.callers.items()]
        path.write_text(json.dumps(entries))
        path.chmod(0o600)
        return path

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def operator_url(self) -> str:
        return f"http://127.0.0.1:{self.operator_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "HANGAR_NAMESPACE": self.namespace,
                "HANGAR_DATABASE_URL": self.database_url,
                "HANGAR_API_PORT": str(self.api_port),
                "HANGAR_OPERATOR_PORT": str(self.operator_port),
                "HANGAR_OPERATOR_HOST": "127.0.0.1",
                "HANGAR_GATEWAY_PORT": str(self.gateway_port),
                "HANGAR_GATEWAY_HOST": "127.0.0.1",
                "HANGAR_GATEWAY_ADDRESS": f"127.0.0.1:{self.gateway_port}",
                "HANGAR_ADMIN_TOKEN": self.token,
                "HANGAR_API_TOKENS_FILE": str(self.tokens_file()),
                "HANGAR_SANDBOX_CLI_PATH": "/opt/hangar/clis/node_modules/.bin",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = self.root / f"{name}.log"
        with log.open("ab") as fh:
            p = subprocess.Popen(
                argv,
                env=self.env(),
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=str(self.root),
            )
        self.procs[name] = p
        return p

    def hangar(self) -> list[str]:
        return [sys.executable, "-m", "hangar.cli.main"]

    def start_operator(self) -> None:
        p = self._spawn("operator", [*self.hangar(), "operator"])
        wait_http(f"{self.operator_url}/readyz", 60, p, self.root / "operator.log")

    def start_api(self) -> None:
        p = self._spawn("api", [*self.hangar(), "api", "--host", "127.0.0.1"])
        wait_http(f"{self.api_url}/readyz", 60, p, self.root / "api.log")

    def start_runner(self) -> None:
        image = sandbox_image_copy(self.root)
        # The driver image as an image volume (HANGAR_DRIVER_MOUNT=image-volume) is a root whose
        # opt/hangar/lib is that same copy.
        rootfs = self.root / "image" / "rootfs"
        (rootfs / "opt" / "hangar").mkdir(parents=True, exist_ok=True)
        for p in (rootfs, rootfs / "opt", rootfs / "opt" / "hangar"):
            p.chmod(0o755)
        link = rootfs / "opt" / "hangar" / "lib"
        if not link.is_symlink():
            link.symlink_to(image)
        self._spawn(
            "runner",
            [
                *self.hangar(),
                "dev",
                "runner",
                "--root",
                str(self.runner_root),
                "--map",
                f"/opt/hangar/lib={image}",
                "--map",
                f"/opt/hangar/clis={cli_dir()}",
                "--image",
                f"{self.driver_image}={rootfs}",
            ],
        )

    @property
    def driver_image(self) -> str:
        """The driver image the operator names in sandbox pods (its HANGAR_DRIVER_IMAGE)."""
        default = Settings.model_fields["driver_image"].default
        return self.extra_env.get("HANGAR_DRIVER_IMAGE") or os.environ.get("HANGAR_DRIVER_IMAGE") or default

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is not None:
            stop_process(p.pid, p, grace=10)

    def stop_all(self) -> None:
        for name in ("api", "operator", "runner", *list(self.procs)):
            self.stop(name)
        kill_under(self.root)
        kill_under(self.runner_root)

    def state(self) -> dict[str, Any]:
        return {
            "api_url": self.api_url,
            "operator_url": self.operator_url,
            "token": self.token,
            "kubeconfig": str(self.kubeconfig),
            "namespace": self.namespace,
            "runner_root": str(self.runner_root),
            "pids": {n: p.pid for n, p in self.procs.items()},
        }


def traversable(path: Path) -> bool:
    """May any uid pass through every directory from / down to ``path``?"""
    p = path.resolve()
    return all(os.stat(d).st_mode & 0o001 for d in (p, *p.parents))


def kill_under(root: Path) -> list[int]:
    """Kills every process whose working directory is under ``root`` (sandbox drivers and agents)."""
    killed = []
    root_s = str(root.resolve())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if cwd == root_s or cwd.startswith(root_s + "/"):
            try:
                os.kill(int(d.name), signal.SIGKILL)
                killed.append(int(d.name))
            except ProcessLookupError:
                pass
    return killed


def write_state(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


__all__ = ["ControlPlane", "Stack", "environment_object", "install_crds", "kill_under", "wait_http"]
