"""Entry point of `hangar dev runner`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from kubernetes_asyncio import client, config

from .servicepods import ServicePodRunner


def _pairs(items: list[str]) -> dict[str, Path]:
    """``KEY=DIR`` arguments (``--map``, ``--image``) as a mapping."""
    out: dict[str, Path] = {}
    for item in items:
        k, _, v = item.partition("=")
        out[k] = Path(v)
    return out


async def _main(a: argparse.Namespace) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=a.kubeconfig, client_configuration=cfg)
    paths, images = _pairs(a.map), _pairs(a.image)
    async with client.ApiClient(cfg) as api:
        runner = ServicePodRunner(api, Path(a.root), node=a.node, image_paths=paths, image_volumes=images)
        task = asyncio.create_task(runner.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main(a: argparse.Namespace) -> None:
    asyncio.run(_main(a))
