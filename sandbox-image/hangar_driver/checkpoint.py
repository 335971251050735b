"""Checkpoints: a tar.gz of the workspace (as ``workspace/``) and the agent's HOME (as ``home/``), written
by a child process that drops to the agent's uid first, so it holds only what the agent itself can read.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional

from .commands import CommandError
from .config import DEFAULT_PATH

CHECKPOINT_SCRIPT = r"""
import gzip, os, sys, tarfile, zlib  # everything imported before the uid drop
uid, gid = int(sys.argv[1]), int(sys.argv[2])
if uid >= 0:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|gz")
for spec in sys.argv[3:]:
    arc, _, top = spec.partition("=")
    if not os.path.isdir(top):
        continue
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        rel = os.path.relpath(dirpath, top)
        for name in [None] + sorted(dirnames) + sorted(filenames):
            path = dirpath if name is None else os.path.join(dirpath, name)
            if name is not None and name in dirnames and not os.path.islink(path):
                continue  # directories are added when os.walk visits them
            target = arc if rel == "." else os.path.join(arc, rel)
            if name is not None:
                target = os.path.join(target, name)
            try:
                out.add(path, arcname=target, recursive=False)
            except OSError as exc:
                sys.stderr.write("skipped %s: %s\n" % (path, exc))
out.close()
sys.stdout.buffer.flush()
"""


def write_checkpoint(
    path: str, workspace: str, home: Optional[str], uid: Optional[int], gid: Optional[int]
) -> Dict[str, Any]:
    """Write the checkpoint to ``path`` (absolute; via ``path.partial``, then renamed) and return
    {path, size, sha256, skipped}. ``home`` None leaves the agent's HOME out. Raises CommandError."""
    if not os.path.isabs(path):
        raise CommandError("path must be absolute")
    specs = ["workspace=" + workspace]
    if home is not None:
        specs.append("home=" + home)
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o700)
    tmp = path + ".partial"
    digest = hashlib.sha256()
    size = 0
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHECKPOINT_SCRIPT,
            str(-1 if uid is None else uid),
            str(-1 if gid is None else gid),
            *specs,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env=env,
        close_fds=True,
    )
    err_chunks: List[bytes] = []
    err_reader = threading.Thread(
        target=lambda: err_chunks.append(proc.stderr.read() if proc.stderr else b""), daemon=True
    )
    err_reader.start()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as out:
            assert proc.stdout is not None
            while True:
                chunk = proc.stdout.read(1024 * 1024)
                if not chunk:
                    break
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        rc = proc.wait()
        err_reader.join(10)
        if rc != 0:
            raise CommandError(
                "checkpoint failed (exit %d): %s"
                % (rc, b"".join(err_chunks)[-2000:].decode("utf-8", "replace"))
            )
        os.replace(tmp, path)
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    skipped = b"".join(err_chunks).decode("utf-8", "replace").count("skipped ")
    return {"path": path, "size": size, "sha256": digest.hexdigest(), "skipped": skipped}
