"""A real local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (and kwok).

Started on free loopback ports with a generated PKI; ``stop()`` ends every process it started. Used by the
test fixtures, the benchmarks and ``hangar dev``.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .binaries import Binaries, default_dir
from .pki import write_pki

_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port() -> int:
    """A loopback port free now, for a process started next to listen on.

    Picked below the kernel's ephemeral range when there is room: a port ``bind(0)`` hands out is one an
    outgoing connection may take as its own before the process binds it (a test's API replica failed so
    under load: "address already in use"); outgoing connections never take a port below the range."""
    low = _ephemeral_low()
    if low > 12_000:
        for _ in range(200):
            port = random.randrange(10_000, low)
            if port in _given:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _given.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def peak_rss_kib(self) -> int:
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0


@dataclass
class ControlPlane:
    bins: Binaries
    dir: Path
    components: tuple[str, ...] = ("kube-controller-manager", "kube-scheduler")
    # The apiserver's ImageVolume gate (HANGAR_DRIVER_MOUNT=image-volume): on, as from Kubernetes 1.35; off
    # as a 1.34 cluster has it by default.
    image_volumes: bool = True
    processes: list[Process] = field(default_factory=list)
    api_port: int = 0
    etcd_port: int = 0

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def _spawn(self, name: str, argv: list[str]) -> Process:
        log = self.dir / f"{name}.log"
        fh = log.open("ab")
        p = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        fh.close()
        proc = Process(name, p, log)
        self.processes.append(proc)
        return proc

    def start(self, timeout: float = 90.0, crds: bool = False) -> ControlPlane:
        """Starts everything; with ``crds``, hangar's CRDs are installed before the controller-manager
        starts, so its garbage collector knows them from the first discovery (else it learns of them only at
        its next 30-second refresh, and owned objects of a session deleted before then linger)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        pki = self.dir / "pki"
        write_pki(pki)
        self.etcd_port, peer, self.api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.bins.need("etcd")),
                "--name",
                "n0",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"n0={peer_url}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
                "--quota-backend-bytes",
                str(2 * 1024**3),
            ],
        )
        run_kcm = "kube-controller-manager" in self.components and self.bins.path("kube-controller-manager")
        api_args = [
            str(self.bins.need("kube-apiserver")),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--cert-dir={pki}",
        ]
        if self.image_volumes and self.bins.dir == default_dir():
            # Image volumes (a sandbox's driver with HANGAR_DRIVER_MOUNT=image-volume): beta but off in the
            # pinned 1.34, on by default from 1.35. Binaries from KUBEBUILDER_ASSETS may predate the gate.
            api_args.append("--feature-gates=ImageVolume=true")
        if not run_kcm:
            # Without the controller-manager no default ServiceAccount is ever created.
            api_args.append("--disable-admission-plugins=ServiceAccount")
        self._spawn("kube-apiserver", api_args)
        self._write_kubeconfig(pki)
        self._wait_ready(timeout)
        if crds:
            import asyncio

            from .snapshots import install_at
            from .stack import install_crds

            asyncio.run(install_crds(str(self.kubeconfig)))
            # The CSI snapshot API the local pod runner emulates: known to the garbage collector from the start.
            asyncio.run(install_at(str(self.kubeconfig)))
        if run_kcm:
            self._spawn(
                "kube-controller-manager",
                [
                    str(self.bins.need("kube-controller-manager")),
                    f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                    "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                ],
            )
        if "kube-scheduler" in self.components and self.bins.path("kube-scheduler"):
            self._spawn(
                "kube-scheduler",
                [
                    str(self.bins.need("kube-scheduler")),
                    f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    # A pod first found unschedulable (its volume not bound yet) is retried when the claim
                    # binds; once in a CI run that retry never came and a sandbox waited out the default
                    # 5 minutes. Here the scheduler looks again after 10 s (checked every 30 s).
                    "--pod-max-in-unschedulable-pods-duration=10s",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                ],
            )
        if "kwok" in self.components and self.bins.path("kwok") and self.bins.kwok_dir:
            stages = self.bins.kwok_dir / "kustomize" / "stage"
            self._spawn(
                "kwok",
                [
                    str(self.bins.need("kwok")),
                    f"--kubeconfig={self.kubeconfig}",
                    # Only nodes that ask for kwok: the local pod runner's node stays ours.
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    f"--config={stages / 'node' / 'fast' / 'node-initialize.yaml'}",
                    f"--config={stages / 'node' / 'heartbeat-with-lease' / 'node-heartbeat-with-lease.yaml'}",
                    f"--config={stages / 'pod' / 'fast' / 'pod-ready.yaml'}",
                    f"--config={stages / 'pod' / 'fast' / 'pod-complete.yaml'}",
                    f"--config={stages / 'pod' / 'fast' / 'pod-delete.yaml'}",
                    "--cidr=10.0.0.0/24",
                    "--node-ip=10.0.0.1",
                    "--node-lease-duration-seconds=40",
                    f"--server-address=127.0.0.1:{free_port()}",
                ],
            )
        time.sleep(0.2)
        for p in self.processes:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited at start-up: {p.log.read_text()[-2000:]}")
        self._write_state()
        return self

    def _write_kubeconfig(self, pki: Path) -> None:
        def b64(name: str) -> str:
            return base64.b64encode((pki / name).read_bytes()).decode()

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "hangar-dev",
                    "cluster": {"server": self.server, "certificate-authority-data": b64("ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "hangar-admin",
                    "user": {
                        "client-certificate-data": b64("admin.crt"),
                        "client-key-data": b64("admin.key"),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "hangar-dev",
                    "context": {"cluster": "hangar-dev", "user": "hangar-admin", "namespace": "default"},
                }
            ],
            "current-context": "hangar-dev",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg))
        self.kubeconfig.chmod(0o600)

    def ssl_context(self) -> ssl.SSLContext:
        pki = self.dir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ctx = self.ssl_context()
        last = ""
        while time.monotonic() < deadline:
            for p in self.processes:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited: {p.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception as e:  # not up yet
                last = str(e)
            time.sleep(0.25)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s: {last}")

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": {p.name: p.popen.pid for p in self.processes},
        }
        (self.dir / "controlplane.json").write_text(json.dumps(state, indent=2))

    def peak_memory_kib(self) -> dict[str, int]:
        return {p.name: p.peak_rss_kib() for p in self.processes}

    def stop(self) -> None:
        # apiserver and clients first, etcd last: the apiserver must not outlive its storage in a retry loop.
        for p in reversed(self.processes):
            stop_process(p.popen.pid, p.popen)
        self.processes.clear()


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs. A process that is not our child (`hangar dev down` stops what `dev up`
    started) stays a zombie until whoever adopted it reaps it, which may take seconds: it has exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # gone since, or no /proc: the next look (kill 0) tells
        return True


def stop_process(pid: int, popen: subprocess.Popen[bytes] | None = None, grace: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return
        elif not _running(pid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if popen is not None:
        popen.wait(5)
