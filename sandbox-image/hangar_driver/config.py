"""The driver's configuration, read once from its environment (the variables are listed in ``main.py``).

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os

from . import mcp

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Dict, List, Optional

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_ENV_PREFIX = "HANGAR_AGENT_ENV_"
DEFAULT_AGENT_UID = 1001
# The harnesses whose adapter is live (steer, interrupt, permission prompts mid-turn): the hello says it
# before the adapters are loaded (driver.py); a unit test holds it to the adapters' own ``live``.
LIVE_HARNESSES = ("claude", "codex")


class Config:
    def __init__(self, env: Dict[str, str]) -> None:
        self.gateway = env.get("HANGAR_GATEWAY", "")
        self.run = env.get("HANGAR_RUN_ID", "")
        self.harness = env.get("HANGAR_HARNESS", "")
        missing = [
            n
            for n, v in (
                ("HANGAR_GATEWAY", self.gateway),
                ("HANGAR_RUN_ID", self.run),
                ("HANGAR_HARNESS", self.harness),
            )
            if not v
        ]
        if missing:
            raise SystemExit("hangar-driver: missing %s" % ", ".join(missing))
        host, sep, port = self.gateway.rpartition(":")
        if not sep or not port.isdigit():
            raise SystemExit("hangar-driver: HANGAR_GATEWAY must be host:port")
        self.host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        self.port = int(port)
        # A warm pool's sandbox (HANGAR_POOL=1) runs nothing until a session adopts it (``adopt``).
        self.pooled = env.get("HANGAR_POOL") == "1"
        self.workspace = os.path.abspath(env.get("HANGAR_WORKSPACE") or "/workspace")
        self.euid = os.geteuid()
        self.is_root = self.euid == 0
        uid_s, gid_s = env.get("HANGAR_AGENT_UID", ""), env.get("HANGAR_AGENT_GID", "")
        self.agent_uid: Optional[int] = None
        self.agent_gid: Optional[int] = None
        self.warnings: List[str] = []
        if self.is_root:
            self.agent_uid = int(uid_s) if uid_s else DEFAULT_AGENT_UID
            self.agent_gid = int(gid_s) if gid_s else self.agent_uid
            if self.agent_uid == 0:
                raise SystemExit("hangar-driver: HANGAR_AGENT_UID must not be 0")
        elif uid_s and int(uid_s) != self.euid:
            self.warnings.append(
                "HANGAR_AGENT_UID=%s ignored: the driver is not root, so the agent runs as uid %d"
                % (uid_s, self.euid)
            )
        self._state_dir = os.path.abspath(env["HANGAR_STATE_DIR"]) if env.get("HANGAR_STATE_DIR") else ""
        self.agent_home = os.path.abspath(
            env.get("HANGAR_AGENT_ENV_HOME")
            or env.get("HANGAR_AGENT_HOME")
            or os.path.join(self.state_dir, "home")
        )
        self.checkpoint_dir = (
            os.path.abspath(env["HANGAR_CHECKPOINT_DIR"]) if env.get("HANGAR_CHECKPOINT_DIR") else ""
        )
        self.cli_path = [p for p in env.get("HANGAR_CLI_PATH", "").split(os.pathsep) if p]
        self.argv_prefix: Optional[List[str]] = None
        if env.get("HANGAR_CLI_ARGV"):
            import json  # here: only this setting needs it before the hello (wirejson.py says why)

            argv = json.loads(env["HANGAR_CLI_ARGV"])
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise SystemExit("hangar-driver: HANGAR_CLI_ARGV must be a JSON list of strings")
            self.argv_prefix = argv
        self.bin_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin")
        self.agent_env = self._agent_env(env)
        self.mcp_servers, mcp_warnings = mcp.load(env.get(mcp.ENV, ""))
        self.warnings += mcp_warnings

    @property
    def state_dir(self) -> str:
        """The driver's own directory. Its default is found when first asked for (after the hello): tempfile
        imports shutil, bz2 and lzma, which a pod compiles nothing of but still loads."""
        if not self._state_dir:
            import tempfile

            self._state_dir = os.path.abspath(
                os.path.join(tempfile.gettempdir(), "hangar-driver-%d" % self.euid)
            )
        return self._state_dir

    @property
    def run_as(self) -> Optional[Dict[str, int]]:
        if self.agent_uid is None or self.agent_gid is None:
            return None
        return {"uid": self.agent_uid, "gid": self.agent_gid}

    def _agent_env(self, env: Dict[str, str]) -> Dict[str, str]:
        out: Dict[str, str] = {}
        for name, value in env.items():
            if name.startswith(AGENT_ENV_PREFIX) and len(name) > len(AGENT_ENV_PREFIX):
                out[name[len(AGENT_ENV_PREFIX) :]] = value
        base_path = out.get("PATH") or env.get("PATH") or DEFAULT_PATH
        extra = list(self.cli_path)
        if os.path.isfile(os.path.join(self.bin_dir, "hangar-agent")):
            extra.append(self.bin_dir)
        out["PATH"] = os.pathsep.join([*extra, base_path])
        out["HOME"] = self.agent_home
        out.setdefault("LANG", env.get("LANG") or "C.UTF-8")
        for name in list(out):
            if name.startswith(("HANGAR_RUN_KEY", "HANGAR_DRIVER_KEY")) or name == "HANGAR_IO":
                del out[name]
        return out
