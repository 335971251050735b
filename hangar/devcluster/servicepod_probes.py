"""Probes of a service pod's containers on the local pod runner: ``httpGet`` (a 2xx or 3xx answer within
``timeoutSeconds``) and ``tcpSocket`` (a connection), as a kubelet runs them; other kinds always fail, saying so."""

from __future__ import annotations

import asyncio
from typing import Any


def port_of(name: str, spec: dict[str, Any], port: Any) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in spec.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container {name} has no port named {port!r}")


async def check_probe(name: str, spec: dict[str, Any], probe: dict[str, Any]) -> tuple[bool, str]:
    """One probe of a container, as a kubelet runs it against the pod's IP (here 127.0.0.1): (passed, why not)."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = port_of(name, spec, get["port"])
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
            try:
                path = get.get("path", "/")
                writer.write(
                    f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/hangar-local\r\n\r\n".encode()
                )
                line = await asyncio.wait_for(reader.readline(), timeout)
            finally:
                writer.close()
            parts = line.split()
            code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            return 200 <= code < 400, f"HTTP probe failed with statuscode: {code or 'none'}"
        if "tcpSocket" in probe:
            port = port_of(name, spec, probe["tcpSocket"]["port"])
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
            writer.close()
            return True, ""
        return False, "only httpGet and tcpSocket probes run on the local runner"
    except TimeoutError:
        return False, f"context deadline exceeded ({timeout:g}s)"
    except (OSError, ValueError) as e:
        return False, str(e)
