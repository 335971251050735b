"""``python3 -m hangar_driver --self-check``: can this image run the driver? Used by the image smoke tests
(``make images``) and handy in a new Environment image: it imports every driver module with the image's own
python3, finds ``hangar-agent`` beside the driver, and runs each agent CLI on ``HANGAR_CLI_PATH`` with
``--version``. Prints one line per check; exits 1 if any failed."""

import importlib
import os
import pkgutil
import subprocess
import sys
from typing import List, Optional

CLIS = ("claude", "codex", "pi")


def run(argv: Optional[List[str]] = None) -> int:
    failed = 0

    def say(ok: bool, what: str) -> None:
        nonlocal failed
        failed += 0 if ok else 1
        sys.stdout.write("%s %s\n" % ("ok  " if ok else "FAIL", what))

    say(sys.version_info >= (3, 8), "python %s" % sys.version.split()[0])
    package = os.path.dirname(os.path.abspath(__file__))
    for mod in sorted(m.name for m in pkgutil.iter_modules([package])):
        try:
            importlib.import_module("hangar_driver." + mod)
            say(True, "import hangar_driver.%s" % mod)
        except Exception as exc:  # any failure to import is what this check reports
            say(False, "import hangar_driver.%s: %s" % (mod, exc))
    agent = os.path.join(os.path.dirname(package), "bin", "hangar-agent")
    say(os.access(agent, os.X_OK), "hangar-agent at %s" % agent)
    for d in [p for p in os.environ.get("HANGAR_CLI_PATH", "").split(os.pathsep) if p]:
        for cli in CLIS:
            exe = os.path.join(d, cli)
            if not os.path.exists(exe):
                say(False, "%s not in %s" % (cli, d))
                continue
            try:
                out = subprocess.run(
                    [exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60
                )
                text = out.stdout.decode(errors="replace").strip().splitlines()
                say(out.returncode == 0, "%s --version: %s" % (cli, text[-1] if text else out.returncode))
            except (OSError, subprocess.SubprocessError) as exc:
                say(False, "%s --version: %s" % (cli, exc))
    return 1 if failed else 0
