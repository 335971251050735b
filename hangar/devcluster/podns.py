"""Starts one container of a service pod on the local pod runner: in a private mount namespace, with the
pod's volumes bind-mounted at their container paths, as the pod's user.

Run as ``unshare --mount --propagation private python -m hangar.devcluster.podns SPEC.json`` by root (the
runner): ``unshare`` execs this module in a new mount namespace, which mounts, drops to the pod's uid/gid and
execs the container's command, so the process the runner watches is the container itself. Mounts made here
are seen by this process alone: the ServiceAccount token at ``/var/run/secrets/kubernetes.io/serviceaccount``
is where a kubelet would put it, and in-cluster clients (kubernetes_asyncio, kopf) find it there unchanged.

SPEC is JSON: ``{"argv": [...], "env": {...}, "cwd": "/", "uid": 10001, "gid": 10001, "groups": [10001],
"mounts": [{"source": "/local/dir", "target": "/container/path", "readOnly": false}],
"expose": ["/root/.pyenv/versions/3.11.7"]}``: ``expose`` are the image's own paths (see :func:`_expose`).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
_libc = ctypes.CDLL(None, use_errno=True)


def _sys_mount(source: str, target: str, flags: int) -> None:
    if _libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _mount(fd: int, is_dir: bool, target: str, read_only: bool) -> None:
    tgt = Path(target)
    # The mount point must exist; a missing one is made (an empty directory or file on the host, since
    # this namespace shares the host's filesystem; it stays empty outside the namespace).
    if is_dir:
        tgt.mkdir(parents=True, exist_ok=True)
    else:
        tgt.parent.mkdir(parents=True, exist_ok=True)
        tgt.touch(exist_ok=True)
    # Through the descriptor opened before any mount: a volume mounted on /tmp must not hide the sources
    # of the volumes mounted after it (the runner keeps them under /tmp too).
    _sys_mount(f"/proc/self/fd/{fd}", target, MS_BIND)
    if read_only:
        _sys_mount("none", target, MS_BIND | MS_REMOUNT | MS_RDONLY)


def _blocked(path: Path) -> Path | None:
    """The topmost directory on the way to ``path`` that other users may not pass (``/root`` is 0700)."""
    for d in [*reversed(path.parents), path]:
        if not os.stat(d).st_mode & 0o001:
            return d
    return None


def _expose(paths: list[str]) -> None:
    """Makes an image's files (this machine's python under ``/root``, say) reachable by the pod's user:
    an empty tmpfs hides the private directory in this namespace, and only the image's paths are bound
    into it, so nothing else of it is visible."""
    opened = [(Path(p), os.open(p, os.O_PATH)) for p in paths]
    hidden: set[Path] = set()
    for path, fd in opened:
        top = _blocked(path)
        if top is not None and top not in hidden and not any(h in top.parents for h in hidden):
            _libc_tmpfs(str(top))
            hidden.add(top)
        if top is not None:
            path.mkdir(parents=True, exist_ok=True)
            _sys_mount(f"/proc/self/fd/{fd}", str(path), MS_BIND)
        os.close(fd)


def _libc_tmpfs(target: str) -> None:
    if _libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, b"mode=0755") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"tmpfs on {target}: {os.strerror(err)}")


def enter(spec: dict[str, Any]) -> None:
    """Mounts, drops privileges and execs: never returns."""
    if os.getuid() != 0:
        raise SystemExit("podns: must run as root (it mounts, then drops to the pod's user)")
    # Longest target last: a volume mounted inside another one's path lands on top of it.
    expose = list(spec.get("expose") or [])
    # Opened before any mount: the image's paths stay reachable under a volume mounted over them (the
    # chart's emptyDir on /tmp hides a checkout that lives under /tmp, as a CI clone may).
    image = [(Path(p), os.open(p, os.O_PATH)) for p in sorted(expose, key=len)]
    _expose(expose)
    mounts = sorted(spec.get("mounts") or [], key=lambda m: len(m["target"]))
    fds = [os.open(m["source"], os.O_PATH) for m in mounts]
    for m, fd in zip(mounts, fds, strict=True):
        _mount(fd, stat.S_ISDIR(os.fstat(fd).st_mode), m["target"], bool(m.get("readOnly")))
    for fd in fds:
        os.close(fd)
    targets = [Path(m["target"]) for m in mounts]
    for path, fd in image:
        if any(t == path or t in path.parents for t in targets):
            path.mkdir(parents=True, exist_ok=True)
            _sys_mount(f"/proc/self/fd/{fd}", str(path), MS_BIND)
        os.close(fd)
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    argv = [str(a) for a in spec["argv"]]
    exe = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
    cwd = spec.get("cwd") or "/"
    uid, gid = spec.get("uid"), spec.get("gid")
    if gid is not None:
        os.setgroups([int(g) for g in spec.get("groups") or [gid]])
        os.setgid(int(gid))
    if uid is not None:
        os.setuid(int(uid))
    os.chdir(cwd)
    os.execve(exe, argv, env)


def main() -> None:
    path = Path(sys.argv[1])
    spec = json.loads(path.read_text())
    path.unlink()  # it holds the pod's environment, secrets included; the runner writes it anew per start
    enter(spec)


if __name__ == "__main__":
    main()
