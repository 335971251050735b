"""The local runner's probes (hangar/devcluster/servicepod_probes.py) against real sockets on 127.0.0.1: an
answer of 2xx/3xx passes, anything else fails with the status, a silent server fails by the timeout, a closed
port fails, ports resolve by name, and kinds the runner can't run fail saying so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hangar.devcluster.servicepod_probes import check_probe, port_of


@pytest.fixture
async def server() -> AsyncIterator[int]:
    """Answers /ok with 200, /moved with 302, /bad with 503, and never answers /hang."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode()
        path = line.split()[1] if len(line.split()) > 1 else "/"
        if path == "/hang":
            await asyncio.sleep(5)
        code = {"/ok": 200, "/moved": 302}.get(path, 503)
        writer.write(f"HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield int(srv.sockets[0].getsockname()[1])
    finally:
        srv.close()


SPEC = {"ports": [{"name": "metrics", "containerPort": 1234}]}


@pytest.mark.parametrize(
    ("path", "passed", "why"),
    [
        ("/ok", True, ""),
        ("/moved", True, ""),
        ("/bad", False, "HTTP probe failed with statuscode: 503"),
        ("/hang", False, "context deadline exceeded (0.3s)"),
    ],
)
async def test_http_probe(server: int, path: str, passed: bool, why: str) -> None:
    ok, reason = await check_probe(
        "c", {}, {"httpGet": {"path": path, "port": server}, "timeoutSeconds": 0.3}
    )
    assert ok is passed
    if not passed:
        assert reason == why


async def test_tcp_probe_and_a_closed_port(server: int) -> None:
    assert (await check_probe("c", {}, {"tcpSocket": {"port": server}}))[0]
    ok, why = await check_probe("c", {}, {"tcpSocket": {"port": 1}})
    assert not ok and why


async def test_ports_by_name_and_unsupported_kinds() -> None:
    assert port_of("c", SPEC, "metrics") == 1234 and port_of("c", SPEC, "8080") == 8080
    ok, why = await check_probe("c", SPEC, {"httpGet": {"path": "/", "port": "http"}})
    assert not ok and why == "container c has no port named 'http'"
    ok, why = await check_probe("c", SPEC, {"exec": {"command": ["true"]}})
    assert not ok and "only httpGet and tcpSocket" in why
