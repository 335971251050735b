"""The floor of a session without a warm pool: what hangar's sandbox is made of, minus hangar.

A Secret, a PVC and a pod made by hangar's own functions (``hangar_operator.sandbox_objects``: the same run-key
Secret, the same workspace claim with the same size and storage class, the same volumes and mounts, the same
init container copying the driver out of the driver image), with three differences: no owner (no Session
exists), bench labels (nothing of hangar's selects them), and a main container that runs ``python3 -c`` which
dials a TCP listener this bench holds on 127.0.0.1 and sends one line instead of ``python3 -m hangar_driver``.

Timed: the first object's create → the listener has that line. Its goal in issue 15: a session without a pool
takes ≤ 1.3x this.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _kube import NAMESPACE, TIMEOUT, Cluster
from _watch import call
from kubernetes_asyncio.client.exceptions import ApiException

from hangar.config import Settings
from hangar.devcluster.stack import SANDBOX_IMAGE
from hangar.models.environment import EnvironmentSpec
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import run_key_secret, sandbox_pod, workspace_pvc

DIAL = (
    "import os, socket, time\n"
    "host, port = os.environ['HANGAR_BENCH_DIAL'].rsplit(':', 1)\n"
    "s = socket.create_connection((host, int(port)))\n"
    "s.sendall(os.environ['HANGAR_BENCH_NAME'].encode() + b'\\n')\n"
    "time.sleep(600)\n"
)
LABELS = {"app": "hangar-bench-floor"}


class DialListener:
    """The bench's end of the floor: when each pod's line arrived (``time.monotonic()``)."""

    def __init__(self) -> None:
        self.arrived: dict[str, asyncio.Future[float]] = {}
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    def expect(self, name: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.arrived[name] = fut
        return fut

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        at = time.monotonic()
        fut = self.arrived.get(line.decode(errors="replace").strip())
        if fut is not None and not fut.done():
            fut.set_result(at)
        writer.close()


def objects(name: str, port: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(Secret, PVC, Pod) as hangar makes them for session ``name``'s first run, but dialling the bench."""
    session = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Session",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": "bench-floor"},
        "spec": {"harness": "claude"},
        "status": {},
    }
    # The bench's environment has no HANGAR_* settings, nor has the Stack's operator: both take the defaults.
    settings = Settings()
    run = make_run(NAMESPACE, NAMESPACE, name, 1)
    secret, _ = run_key_secret(session, run)
    pvc = workspace_pvc(session, settings)
    env = EnvironmentSpec.model_validate({"image": SANDBOX_IMAGE})
    pod = sandbox_pod(session, env, run, settings, "127.0.0.1:1")
    for obj in (secret, pvc, pod):
        obj["metadata"].pop("ownerReferences", None)
        obj["metadata"].pop("annotations", None)
        obj["metadata"]["labels"] = dict(LABELS)
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    main = pod["spec"]["containers"][0]
    main["command"] = ["python3", "-c", DIAL]
    main["env"] = [
        *main["env"],
        {"name": "HANGAR_BENCH_DIAL", "value": f"127.0.0.1:{port}"},
        {"name": "HANGAR_BENCH_NAME", "value": name},
    ]
    return secret, pvc, pod


async def dial_sample(
    c: Cluster,
    listener: DialListener,
    name: str,
    at_end: Callable[[], Awaitable[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """One floor sample: create the three objects → the pod's line arrives; then all three gone. ``at_end``:
    called when the line has arrived, before the clean-up; what it returns goes into the sample."""
    secret, pvc, pod = objects(name, listener.port)
    arrived = listener.expect(name)
    w0, t0 = time.time(), time.monotonic()
    await call(c.core.create_namespaced_secret, NAMESPACE, secret)  # JSON only, as every side's watch
    await call(c.core.create_namespaced_persistent_volume_claim, NAMESPACE, pvc)
    await call(c.core.create_namespaced_pod, NAMESPACE, pod)
    t_created = time.monotonic()
    try:
        at = await asyncio.wait_for(arrived, TIMEOUT)
    except TimeoutError:
        raise TimeoutError(f"floor pod {name} did not dial in after {TIMEOUT:g}s") from None
    pod_name, pvc_name, secret_name = (o["metadata"]["name"] for o in (pod, pvc, secret))
    # ``w0``: the wall clock at ``t0``, for the stamps of the bench's pod watch (``_observe.PodTimes``).
    sample = {"total": at - t0, "to_objects_created": t_created - t0, "pod": pod_name, "w0": w0}
    if at_end is not None:
        sample.update(await at_end())
    deletes: list[Callable[[], Awaitable[Any]]] = [
        lambda: c.core.delete_namespaced_pod(pod_name, NAMESPACE, grace_period_seconds=0),
        lambda: c.core.delete_namespaced_persistent_volume_claim(pvc_name, NAMESPACE),
        lambda: c.core.delete_namespaced_secret(secret_name, NAMESPACE),
    ]
    for delete in deletes:
        try:
            await delete()
        except ApiException as e:
            if e.status != 404:
                raise
    await c.wait_gone(
        f"floor {name}",
        c.pod_gone(pod_name),
        lambda: c.core.read_namespaced_persistent_volume_claim(pvc_name, NAMESPACE),
    )
    return sample
