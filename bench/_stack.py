"""What every stack benchmark sets up and tears down: a local control plane with hangar's CRDs, the stack
(operator, API, local pod runner) and any scripted model servers, cleaned up on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from _stats import log

from hangar.devcluster import binaries
from hangar.devcluster.controlplane import ControlPlane
from hangar.devcluster.stack import Stack, install_crds
from hangar.paths import cli_dir
from hangar.testing.model_server import ScriptedModel
from hangar_driver.claude import QUIET_ENV as CLAUDE_QUIET_ENV

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
API_KEY = "sk-ant-bench-not-a-real-key"
# What a floor's Claude CLI runs with, and what a bench Environment gives hangar's agent too (same behaviour).
QUIET_ENV = dict.fromkeys(CLAUDE_QUIET_ENV, "1")


def claude_env(model: ScriptedModel) -> dict[str, str]:
    """A bench Environment's variables: Claude Code against the scripted model, quiet."""
    return {"ANTHROPIC_BASE_URL": model.anthropic_base_url, "ANTHROPIC_API_KEY": API_KEY, **QUIET_ENV}


def kubectl(cp: ControlPlane) -> list[str]:
    return [str(cp.bins.dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig)]


def kube_apply(cp: ControlPlane, obj: dict[str, Any]) -> None:
    subprocess.run(
        [*kubectl(cp), "apply", "-f", "-"], input=json.dumps(obj), text=True, check=True, capture_output=True
    )


def wall(ts: str | None) -> float | None:
    """An RFC 3339 time from a status (operator-written, millisecond precision) as a Unix time."""
    if not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def print_result(out: dict[str, Any], as_json: bool, table: Callable[[dict[str, Any]], str]) -> int:
    """The run's result on stdout, as one JSON document or as the bench's table; the exit status."""
    print(json.dumps(out, indent=2) if as_json else table(out))
    return 0


class BenchRun:
    """Directories now; the control plane and the stack when :meth:`start` is called (a floor may run
    first, on a quiet machine)."""

    def __init__(self) -> None:
        self.cp_dir = Path(tempfile.mkdtemp(prefix="hangar-bench-cp-"))
        self.root = Path(tempfile.mkdtemp(prefix="hangar-bench-stack-", dir="/tmp"))
        os.chmod(self.root, 0o755)  # the agent (another uid) walks through it to its workspace
        self.cp: ControlPlane | None = None
        self.stack: Stack | None = None
        self.models: list[ScriptedModel] = []

    def model(self, model: ScriptedModel) -> ScriptedModel:
        """Starts a scripted model server that is stopped with the run."""
        model.start()
        self.models.append(model)
        return model

    def start(self) -> tuple[ControlPlane, Stack]:
        log("control plane: building/locating binaries, starting")
        self.cp = ControlPlane(binaries.ensure(), self.cp_dir).start()
        asyncio.run(install_crds(str(self.cp.kubeconfig)))
        log("stack: operator, API, runner")
        self.stack = Stack(self.root, self.cp.kubeconfig)
        self.stack.start_operator()
        self.stack.start_api()
        self.stack.start_runner()
        return self.cp, self.stack

    def close(self, keep_logs: bool) -> None:
        for m in self.models:
            m.stop()
        if self.stack is not None:
            self.stack.stop_all()
        if self.cp is not None:
            self.cp.stop()
        if keep_logs:
            log(f"logs kept in {self.root} and {self.cp_dir}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.cp_dir, ignore_errors=True)


def header(args: dict[str, Any]) -> dict[str, Any]:
    """The first lines of every result: when, on what machine, with which arguments."""
    return {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start",
        "args": args,
    }


def driver_mount_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--driver-mount",
        choices=("init-copy", "image-volume"),
        help="HANGAR_DRIVER_MOUNT for this run: the operator's sandbox pods and the floor pods made like them "
        "(default: the setting's, init-copy)",
    )


def use_driver_mount(a: argparse.Namespace) -> None:
    """The stack's processes and the floors' ``Settings()`` read it from the environment: both sides alike."""
    if a.driver_mount:
        os.environ["HANGAR_DRIVER_MOUNT"] = a.driver_mount


def claude_missing() -> bool:
    if (cli_dir() / "node_modules" / ".bin" / "claude").exists():
        return False
    print(f"claude CLI not installed in {cli_dir()}: run tools/install-clis.sh", file=sys.stderr)
    return True


@contextmanager
def bench_run(keep_logs: bool) -> Iterator[BenchRun]:
    """A BenchRun that is torn down however the benchmark ends; SIGTERM ends it as Ctrl-C does."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    run = BenchRun()
    try:
        yield run
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        run.close(keep_logs)
