"""The driver's start: it says hello before it loads the turn runner, the adapters and the live work (their
import is most of its start in a pod, where nothing is byte-compiled), and nothing that needs them runs
before they and ``prepare`` are done."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from hangar.config import Settings
from hangar.devcluster.podrunner import DEFAULT_PATH
from hangar.devcluster.stack import sandbox_image_copy
from hangar.models.environment import EnvironmentSpec
from hangar_driver import protocol as P
from hangar_driver.adapters import NAMES, make_harness
from hangar_driver.config import LIVE_HARNESSES
from hangar_driver.driver import Driver
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import DRIVER_DIR, sandbox_pod
from tests.unit.test_prepare_turn import driver_config

SANDBOX_IMAGE = Path(__file__).resolve().parents[2] / "sandbox-image"
KEY = b"k" * 43
SESSION = {
    "apiVersion": "hangar.dev/v1alpha1",
    "kind": "Session",
    "metadata": {"name": "s", "namespace": "ns", "uid": "u"},
    "spec": {"harness": "claude"},
}


def test_the_hello_says_live_as_the_adapter_would() -> None:
    for name in NAMES:
        assert make_harness(name, lambda n, p: None).live == (name in LIVE_HARNESSES), name


def test_the_hello_path_imports_none_of_the_turn_machinery() -> None:
    """``main`` (and the driver's class) import only what the hello needs: a pod compiles what it imports."""
    code = (
        "import json, sys; import hangar_driver.main; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('hangar_driver') or m == 'tempfile')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(SANDBOX_IMAGE)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(json.loads(out.stdout))
    heavy = {"turns", "adapters", "claude", "codex", "live", "oneshot", "workbench", "repo", "handback"}
    assert not loaded & {f"hangar_driver.{m}" for m in heavy}
    assert "tempfile" not in loaded  # the state directory's default is found after the hello
    assert {"hangar_driver.link", "hangar_driver.outbox", "hangar_driver.driver"} <= loaded


def test_the_hello_path_imports_no_logging_typing_or_traceback() -> None:
    """Nor the stdlib's larger modules that only annotations and log lines need (lazylog.py): the driver
    logs through ``lazylog`` and imports typing for mypy only. ``-S``: what site imports is not the driver's."""
    code = (
        "import sys; before = set(sys.modules); import hangar_driver.main; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={**os.environ, "PYTHONPATH": str(SANDBOX_IMAGE)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(out.stdout.split())
    assert "hangar_driver.lazylog" in loaded
    assert not loaded & {"logging", "typing", "traceback", "tokenize", "hangar_driver.harness"}
    assert not loaded & {"random", "secrets", "base64"}  # the hello's ids come from os.urandom


def test_the_dev_stacks_driver_copy_carries_bytecode_its_pods_python_uses(tmp_path: Path) -> None:
    """The local runner's pods import the driver from its bytecode (as hangar's image ships it), not its
    source; a source changed after it was compiled is compiled again, never run from stale bytecode."""
    lib = sandbox_image_copy(tmp_path)
    python = shutil.which("python3", path=DEFAULT_PATH)
    assert python is not None
    env = {"PATH": DEFAULT_PATH, "PYTHONPATH": str(lib), "PYTHONDONTWRITEBYTECODE": "1"}

    def run(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, "-S", "-v", "-c", code], env=env, capture_output=True, text=True, check=True
        )

    out = run("import hangar_driver.main")
    pycache = lib / "hangar_driver" / "__pycache__"
    assert f"# code object from '{pycache}/main." in out.stderr
    commands = lib / "hangar_driver" / "commands.py"
    commands.write_text(commands.read_text() + "\nCHANGED = 1\n")
    out = run("import hangar_driver.commands as c; print(c.CHANGED)")
    assert out.stdout.strip() == "1"
    assert f"# code object from '{pycache}/commands." not in out.stderr


def test_commands_and_live_work_before_load_wait_for_it(tmp_path: Path) -> None:
    d = Driver(driver_config(tmp_path), KEY, load=False)
    assert not d.made and d._hello_body()["live"] is True and d._hello_body()["run"] == "s-r1"
    d.on_command("c-1", {"op": P.OP_TAINT})
    d.on_command("c-2", {"op": P.OP_EXEC, "request": "r1", "argv": ["true"]})
    assert d.early_live == [("c-2", {"op": P.OP_EXEC, "request": "r1", "argv": ["true"]})]
    assert d.commands.get_nowait() == ("c-1", {"op": P.OP_TAINT})  # queued: run() starts the loop later
    d.load()
    handled: list[tuple[str, dict[str, Any]]] = []
    d.workbench.handle = lambda cid, body: handled.append((cid, body))  # type: ignore[method-assign]
    assert not handled  # loaded, not yet prepared: still kept
    d.open_live()
    assert handled == [("c-2", {"op": P.OP_EXEC, "request": "r1", "argv": ["true"]})] and not d.early_live
    d.on_command("c-3", {"op": P.OP_EXEC, "request": "r2", "argv": ["true"]})
    assert [c for c, _ in handled] == ["c-2", "c-3"]  # from now on at once
    assert d._hello_body()["live"] is True
    d.turns.close()


def pod_command(lib: Path) -> list[str]:
    """The sandbox container's command, with this machine's python3 and ``lib`` for the image's driver."""
    pod = sandbox_pod(SESSION, EnvironmentSpec(image="x"), make_run("ns", "ns", "s", 1), Settings(), "g:1")
    command = list(pod["spec"]["containers"][0]["command"])
    assert command[0] == "python3"
    return [sys.executable, *(a.replace(DRIVER_DIR, str(lib)) for a in command[1:])]


def _held_driver(lib: Path, script: str) -> str:
    """The container's script, but its main thread held at the hello for a minute instead of half a second
    (``driver.HELLO_FIRST``; this listener never acknowledges): what is imported by the time the hello
    arrives is then the hello's own path, however slowly a loaded machine reaches the test's read."""
    held = lib / "bin" / "held-driver"
    held.write_text(
        "import sys\n"
        "import hangar_driver.driver\n"
        "hangar_driver.driver.HELLO_FIRST = 60\n" + Path(script).read_text()
    )
    return str(held)


def _hello_and_workspace(
    tmp_path: Path,
    ws: Path | None = None,
    python_flags: tuple[str, ...] = (),
    stderr: Any = subprocess.DEVNULL,
    held: bool = False,
    **env: str,
) -> tuple[dict[str, Any], bool]:
    """Start the real driver (fresh copy, no bytecode) as a pod does (its command, its working directory)
    against a listener: its hello, and whether its workspace was a checkout when the hello came."""
    lib = tmp_path / "lib"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(SANDBOX_IMAGE / "hangar_driver", lib / "hangar_driver", ignore=ignore)
    shutil.copytree(SANDBOX_IMAGE / "bin", lib / "bin", ignore=ignore)
    (tmp_path / "key").write_bytes(KEY)
    ws = ws or tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    port = listener.getsockname()[1]
    command = pod_command(lib)
    if held:
        command[-1] = _held_driver(lib, command[-1])
    proc = subprocess.Popen(
        [command[0], *python_flags, *command[1:]],
        cwd=ws,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(lib),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HANGAR_GATEWAY": f"127.0.0.1:{port}",
            "HANGAR_RUN_ID": "default.s.s-r1",
            "HANGAR_HARNESS": "claude",
            "HANGAR_RUN_KEY_FILE": str(tmp_path / "key"),
            "HANGAR_WORKSPACE": str(ws),
            "HANGAR_STATE_DIR": str(tmp_path / "state"),
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(60)
            hello = json.loads(conn.makefile("rb").readline())
            checked_out = (ws / ".git").is_dir()
            # Killed while the connection is open: a closed one ends the driver's link, which logs (and
            # imports logging, re, random) before a kill that comes after it on a loaded machine.
            proc.kill()
            proc.wait()
            return hello, checked_out
    finally:
        proc.kill()
        proc.wait()
        listener.close()


def test_a_sandbox_with_a_checkout_says_hello_once_its_workspace_is_checked_out(tmp_path: Path) -> None:
    """Connected means its workspace is there (a clone may take minutes; the connect timeout covers it)."""
    src = tmp_path / "src"
    src.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(src)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (src / "README").write_text("hi\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    hello, checked_out = _hello_and_workspace(tmp_path, HANGAR_REPO_URL=str(src), HANGAR_REPO_BASE="main")
    assert hello["type"] == P.HELLO and checked_out


def test_a_sandbox_without_one_says_hello_with_its_kind_of_harness(tmp_path: Path) -> None:
    hello, _ = _hello_and_workspace(tmp_path)
    assert hello["type"] == P.HELLO and hello["body"]["live"] is True and hello["body"]["harness"] == "claude"


def test_what_the_agent_left_in_its_workspace_is_never_imported_by_the_driver(tmp_path: Path) -> None:
    """The pod's working directory is the workspace, which the agent writes and a later run's driver (root,
    with the run key) starts in: a ``json.py`` or a ``hangar_driver/`` left there must not be what the
    driver imports (``python3 -m`` put the working directory first on sys.path)."""
    ws = tmp_path / "ws"
    planted = tmp_path / "planted"
    (ws / "hangar_driver").mkdir(parents=True)
    code = f"open({str(planted)!r}, 'a').write(__name__ + '\\n')\n"
    for name in (
        "json.py",
        "socket.py",
        "threading.py",
        "hangar_driver/__init__.py",
        "hangar_driver/main.py",
    ):
        (ws / name).write_text(code)
    hello, _ = _hello_and_workspace(tmp_path, ws=ws)
    assert hello["type"] == P.HELLO and hello["body"]["harness"] == "claude"
    assert not planted.exists(), planted.read_text()


def test_the_pods_driver_says_hello_without_runpy_openssl_idna_queue_or_json(tmp_path: Path) -> None:
    """What the container's command imports before its hello (``-X importtime``, in the order it happens):
    not ``runpy`` (``-m``), OpenSSL's ``hashlib``/``hmac`` (the handshake's HMAC is python3's own SHA-256),
    the ``idna`` codec (getaddrinfo of a str host), ``queue`` nor ``json`` with ``re`` (the frames go through
    ``_json``, wirejson.py), ``socket`` nor ``signal`` with ``enum`` (the dial is ``_socket``'s, the signal
    handlers are set after the hello), nor ``ctypes`` (the hardening, after the hello): each was a
    millisecond or more of it."""
    log = tmp_path / "imports"
    with log.open("w") as err:
        hello, _ = _hello_and_workspace(tmp_path, python_flags=("-X", "importtime"), stderr=err, held=True)
    assert hello["type"] == P.HELLO
    before_hello = {line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines() if "|" in line}
    assert "hangar_driver.link" in before_hello and "_socket" in before_hello
    assert "_json" in before_hello
    assert not before_hello & {
        "runpy",
        "hashlib",
        "_hashlib",
        "hmac",
        "encodings.idna",
        "queue",
        "json",
        "re",
        "socket",
        "signal",
        "enum",
        "ctypes",
    }
