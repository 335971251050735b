"""The run key and the driver's hardening: how the key reaches the driver without staying in any
environment, making the process non-dumpable, and the directories only hangar and the agent may own.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import stat
import sys

from . import protocol as P
from .lazylog import log

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Optional

KEY_FD_ENV = "HANGAR_DRIVER_KEY_FD"  # the pipe the re-executed driver reads its key from


def take_key_from_env() -> Optional[bytes]:
    """If the key came by environment, re-execute this driver without it (never returns), handing the key
    over on a pipe; if it came that way (or from the file), return it. The environment never keeps it."""
    if KEY_FD_ENV in os.environ:
        fd = int(os.environ.pop(KEY_FD_ENV))
        data = b""
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        os.close(fd)
        return P.key_bytes(data)
    if "HANGAR_RUN_KEY" in os.environ:
        key = P.key_bytes(os.environ.pop("HANGAR_RUN_KEY"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGAR_RUN_KEY")}
        if os.environ.get("HANGAR_DRIVER_NO_REEXEC") == "1":
            return key
        rfd, wfd = os.pipe()
        os.write(wfd, key)  # 43 bytes: fits the pipe buffer
        os.close(wfd)
        os.set_inheritable(rfd, True)
        env[KEY_FD_ENV] = str(rfd)
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if pkg_parent not in paths:
            env["PYTHONPATH"] = os.pathsep.join([pkg_parent, *paths])
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "hangar_driver", *sys.argv[1:]], env)
    return None


def read_key() -> bytes:
    key = take_key_from_env()
    path = os.environ.get("HANGAR_RUN_KEY_FILE")
    if key is None and path:
        key = P.read_key_file(path)
    if key is None:
        raise SystemExit("hangar-driver: no run key (HANGAR_RUN_KEY_FILE or HANGAR_RUN_KEY)")
    return key


# Why the driver could not make itself non-dumpable (None: it did). Turns under an approvals policy other
# than auto are refused then: the spec asks for python3 3.8+ with ctypes.
HARDENING_ERROR: Optional[str] = None


def harden_process() -> bool:
    """Make the driver non-dumpable: /proc/<pid>/{environ,mem,maps} become root-only and no process of
    another (or, for a non-root driver, the same) uid can ptrace it. Linux, via ctypes. False (and
    HARDENING_ERROR says why) when it could not: a python3 without ctypes, or prctl refused."""
    global HARDENING_ERROR
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            HARDENING_ERROR = "prctl(PR_SET_DUMPABLE) failed: errno %d" % ctypes.get_errno()
            log.warning("%s", HARDENING_ERROR)
            return False
    except Exception as exc:  # no ctypes, not Linux
        HARDENING_ERROR = "%s: %s" % (exc.__class__.__name__, exc)
        log.warning("could not make the driver non-dumpable: %s", HARDENING_ERROR)
        return False
    HARDENING_ERROR = None
    return True


def secure_dir(path: str, owner: Optional[int], group: Optional[int], mode: int) -> None:
    """Create ``path`` (one level) or check an existing one is a real directory owned by ``owner`` (or by us),
    then set owner and mode. Refuses symlinks and foreign directories (a trap left in a shared /tmp)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError("%s exists and is not a directory" % path)
    allowed = {os.geteuid()}
    if owner is not None:
        allowed.add(owner)
    if st.st_uid not in allowed:
        raise RuntimeError("%s is owned by uid %d, not by hangar" % (path, st.st_uid))
    if owner is not None and os.geteuid() == 0:
        os.chown(path, owner, group if group is not None else -1, follow_symlinks=False)
    os.chmod(path, mode)


def chown_tree(root: str, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            try:
                os.chown(name, uid, gid, follow_symlinks=False)
            except OSError as exc:
                log.warning("chown %s: %s", name, exc)
