"""What the stack benchmarks do on the cluster alike: the clients (Kubernetes and hangar's REST API), the
node Ready, a bench Environment, an object gone, an object's state seen by a watch, and the floors' pods: a
bare one, and one made like hangar's sandbox that dials the bench (``DialFloor``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self

import _watch
import httpx
from _stats import log
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from hangar.devcluster.stack import Stack, environment_object

NAMESPACE = "default"
NODE = "hangar-local"  # the local pod runner's node
TIMEOUT = 120.0  # per sample
HANGAR = ("hangar.dev", "v1alpha1")

Check = _watch.Check


class Cluster:
    """The clients one bench uses, opened and closed with it (``async with``)."""

    def __init__(self, stack: Stack, kubeconfig: Path, http_timeout: float = 30) -> None:
        self.stack = stack
        self.kubeconfig = kubeconfig
        self.http_timeout = http_timeout

    async def __aenter__(self) -> Self:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        self.kapi = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.kapi)
        self.custom = client.CustomObjectsApi(self.kapi)
        self.http = httpx.AsyncClient(
            base_url=self.stack.api_url,
            headers={"Authorization": f"Bearer {self.stack.token}"},
            timeout=self.http_timeout,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()
        await self.kapi.close()

    async def wait_node(self, node: str = NODE, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                n = await self.core.read_node(node)
                if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []):
                    return
            except ApiException as e:
                if e.status != 404:
                    raise
            await asyncio.sleep(0.2)
        raise TimeoutError(f"node {node} not Ready after {timeout}s (see {self.stack.root}/runner.log)")

    async def create_environment(self, name: str, env: dict[str, str] | None = None, **spec: Any) -> None:
        body = environment_object(name, env, **spec)
        await self.custom.create_namespaced_custom_object(*HANGAR, NAMESPACE, "environments", body)

    async def get_custom(self, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
        try:
            obj = await self.custom.get_namespaced_custom_object(group, version, NAMESPACE, plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(obj)

    @staticmethod
    async def gone(read: Callable[[], Awaitable[Any]]) -> bool:
        try:
            await read()
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    async def wait_gone(self, what: str, *reads: Callable[[], Awaitable[Any]], timeout: float = 60) -> None:
        """Until every read answers 404 (finalizers, the garbage collector, the runner stopping a pod)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all([await self.gone(r) for r in reads]):
                return
            await asyncio.sleep(0.1)
        log(f"warning: {what} still there {timeout:g} s after the delete")

    def pod_gone(self, name: str) -> Callable[[], Awaitable[Any]]:
        return lambda: self.core.read_namespaced_pod(name, NAMESPACE)

    # -- "ready", seen by a watch ------------------------------------------------------------------------

    async def until(
        self,
        what: str,
        list_fn: Any,
        args: tuple[Any, ...],
        name: str,
        check: Check,
        timeout: float = TIMEOUT,
    ) -> dict[str, Any]:
        """The object ``name`` once ``check`` holds for it, seen by a list and then a watch of that one object,
        decoded as JSON only (``_watch.until``; ``check`` may raise to end the wait, a failure).

        A watch, not a poll: the bench sees the state as soon as the apiserver has it, whichever side it
        measures, instead of up to one poll interval late, and it adds no request per 20 ms to the load."""
        return await _watch.until(what, list_fn, args, name, check, timeout)

    async def until_custom(
        self, group: str, version: str, plural: str, name: str, check: Check, timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        args = (group, version, NAMESPACE, plural)
        try:
            return await self.until(
                f"{plural}/{name}", self.custom.list_namespaced_custom_object, args, name, check, timeout
            )
        except TimeoutError:
            raise TimeoutError(f"{plural}/{name} not ready after {timeout:g}s") from None

    async def until_pod_running(self, name: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        def running(pod: dict[str, Any]) -> bool:
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Failed", "Succeeded"):
                raise RuntimeError(f"pod {name} ended {phase}: {(pod.get('status') or {}).get('message')}")
            return phase == "Running"

        try:
            return await self.until(
                f"pod {name}", self.core.list_namespaced_pod, (NAMESPACE,), name, running, timeout
            )
        except TimeoutError:
            raise TimeoutError(f"pod {name} not Running after {timeout:g}s") from None


def ready_condition(obj: dict[str, Any]) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def bare_pod_spec(cwd: Path, seconds: int = 60) -> dict[str, Any]:
    """The floor every create → ready figure is compared to: a pod of one python process, no volumes.
    ``cwd`` should be under the stack root, so ``Stack.stop_all()`` reaches a process left behind."""
    cwd.mkdir(parents=True, exist_ok=True)
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "python:3-slim",
                "command": ["python3", "-c", f"import time; time.sleep({seconds})"],
                "workingDir": str(cwd),
            }
        ],
    }


def bare_pod(name: str, cwd: Path, seconds: int = 60) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "hangar-bench-floor"}},
        "spec": bare_pod_spec(cwd, seconds),
    }
