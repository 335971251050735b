"""``Kube.connect``: the apiserver's proxy is taken from the environment once, not on every request."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hangar.kube import Kube

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://apiserver.example:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _connect(tmp_path: Path) -> tuple[object, object, bool]:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)

    async def go() -> tuple[object, object, bool]:
        kube = await Kube.connect(str(path))
        rest = kube.api.rest_client
        try:
            return rest.proxy, rest.proxy_headers, rest.pool_manager.trust_env
        finally:
            await kube.close()

    return asyncio.run(go())


def test_no_request_looks_the_environment_up_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp with trust_env looks the proxy up on a worker thread per request (two thread hops on each
    apiserver call): the session no longer trusts the environment; the proxy it names is given instead."""
    for var in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert _connect(tmp_path) == (None, None, False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    proxy, headers, trust = _connect(tmp_path)
    assert (proxy, trust) == ("http://proxy.example:3128", False)
    assert headers == {"Proxy-Authorization": "Basic dXNlcjpzZWNyZXQ="}
    monkeypatch.setenv("NO_PROXY", "apiserver.example")  # bypassed, as aiohttp would have
    assert _connect(tmp_path) == (None, None, False)
