"""Entry point of `hangar dev runner`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

from kubernetes_asyncio import client, config

from .servicepods import ServicePodRunner


async def _main(a: argparse.Namespace) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=a.kubeconfig, client_configuration=cfg)
    paths = {}
    for m in a.map:
        k, _, v = m.partition("=")
        paths[k] = Path(v)
    images = {}
    for m in a.image:
        k, _, v = m.partition("=")
        images[k] = Path(v)
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
