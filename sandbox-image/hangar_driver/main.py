"""hangar-driver: the process that runs inside each sandbox pod (``python3 -m hangar_driver``).

Standard library only, Python 3.8+ (the environment image's own python3).

It holds the run key, connects to the operator's driver gateway over the signed channel
(``hangar_driver.protocol``), executes the gateway's commands through the harness adapter
(``adapters.make_harness``), relays ``hangar-agent`` hand-back commands from ``$HANGAR_IO`` and reports
everything as numbered events that are resent until the gateway has stored them.

Configuration (environment):

- ``HANGAR_GATEWAY``        ``host:port`` of the gateway (``[v6addr]:port`` works too).
- ``HANGAR_RUN_ID``         the run id.
- ``HANGAR_HARNESS``        claude | codex | pi | antigravity.
- ``HANGAR_RUN_KEY_FILE``   a file holding the run key (a Secret volume, readable by the driver's uid only),
  or ``HANGAR_RUN_KEY``     the key itself. It is removed from the environment at once: the driver re-executes
                            itself without it (the key passes through a pipe), so not even the driver's own
                            ``/proc/<pid>/environ`` holds it afterwards.
- ``HANGAR_WORKSPACE``      the repository checkout, the agent's working directory (default /workspace).
- ``HANGAR_STATE_DIR``      the driver's own directory (default ``$TMPDIR/hangar-driver-<uid>``): per-turn
                            ``io/<turn>`` directories (``$HANGAR_IO``) and, by default, the agent's HOME.
- ``HANGAR_AGENT_UID`` / ``HANGAR_AGENT_GID``  the agent's uid/gid when the driver runs as root (default
                            1001/the uid); ignored (with a warning) when the driver is not root.
- ``HANGAR_AGENT_HOME``     the agent's HOME (default ``<state>/home``; ``HANGAR_AGENT_ENV_HOME`` also works).
- ``HANGAR_AGENT_ENV_<X>``  passed to the agent as ``<X>``. The agent gets only these plus PATH, HOME, LANG
                            and ``HANGAR_IO``: nothing else from the driver's environment.
- ``HANGAR_CLI_PATH``       directories (``:``-separated) put first on the agent's PATH.
- ``HANGAR_CLI_ARGV``       optional JSON list: how to launch the harness CLI (``TurnConfig.argv_prefix``).
- ``HANGAR_MCP_SERVERS``    optional JSON: the Environment's MCP servers, handed to the CLI (``mcp.py``).
- ``HANGAR_CHECKPOINT_DIR`` where a ``checkpoint`` given a bare file name writes (the workspace volume's
                            ``checkpoints/``, root-only).
- ``HANGAR_POOL``           ``1``: a warm pool's sandbox, which runs nothing until a session adopts it.
- ``HANGAR_PRECLEARED_FILE`` a pre-cleared call for this run (``precleared.py``), read once at start.

Commands (``command`` frames; every one is answered by a ``command_result`` event with ``command_id``,
``op``, ``ok``, ``error`` and the fields below):

- ``start_turn`` {turn, message, model?, conversation?, fork?, approvals?, tainted?, env?, extra?,
  argv_prefix?} → {turn, io}. ``fork: true`` (with a ``conversation``) continues that conversation as a new
  one, leaving it as it was (a session fork; the new id comes as ``conversation``). Refused while a turn
  runs, for a turn id this driver already started, and for ``approvals`` other than ``auto`` on a harness
  without live permission prompts.
- ``prepare_turn`` {turn, model?, conversation?, fork?, approvals?, tainted?, env?, extra?, argv_prefix?}
  → {prestarted: bool, why?}: what ``start_turn`` of that turn will carry, its message aside, checked alike.
  A harness that pre-starts (``live.py``, "Pre-started CLIs") starts that turn's CLI now, to wait for it;
  nothing of it is a turn (no turn event, one ``log`` line) and a ``start_turn`` whose configuration
  differs starts a fresh one.
  The operator sends it once a sandbox is connected with no turn to start (its first turn).
- ``steer`` {steer_id, message, turn?} → {steer_id, status?, at}; a harness that can't be steered answers
  ``ok: false``, error "harness X cannot be steered: the message starts the next turn". When ``turn`` (or, without it, any
  turn) is no longer running, the steer is reported ``queued`` at once (a ``steer`` event, then this result
  with ``status: queued``): it starts the next turn, it is never lost.
- ``withdraw`` {steer_id} → {steer_id, withdrawn: bool}. The adapter arbitrates: withdrawn (no ``steer``
  event follows) or not (its ``steer`` event says delivered or queued), never both.
- ``interrupt`` {turn?, interrupt_id?, message?} → {running: bool, continues: bool}. Without a message the
  turn's end comes as ``turn_ended`` (outcome interrupted); with one, a live harness reports ``interrupted``
  (continued) and the turn goes on with it.
- ``answer`` {request_id, decision: allow|deny|allow_always, message?} → {request_id}.
- ``taint`` {} → {tainted: true}: this and every later turn is tainted.
- ``checkpoint`` {path, include_home?: true} → {path, size, sha256}: a tar.gz of the workspace (as
  ``workspace/``) and the agent's HOME (as ``home/``), made with the agent's own permissions.
- ``shutdown`` {} → {}: stops the CLI; the driver exits once its events are stored (or after 10 s).
- ``adopt`` {run, nonce} → {run}: a warm pool's sandbox (``HANGAR_POOL=1``, which refuses everything else
  but ``shutdown`` until then) becomes run ``run``, its key derived from its own
  (``protocol.derive_run_key``), and says hello again as that run.
"""

from __future__ import annotations

import os
import sys

from . import hardening, lazylog
from .config import Config
from .driver import Driver
from .hardening import harden_process, read_key

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, List, Optional

__all__ = ["Config", "Driver", "harden_process", "main"]


def __getattr__(name: str) -> Any:
    # ``HARDENING_ERROR`` is set by ``harden_process``: read it where it lives, not a copy made at import.
    if name == "HARDENING_ERROR":
        return hardening.HARDENING_ERROR
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def main(argv: Optional[List[str]] = None) -> int:
    # The driver's logging (lazylog.py): set up when first used, which on a good start is after the hello.
    lazylog.set_up_on_first_use()
    if sys.version_info < (3, 8):  # noqa: UP036 (an older python3 in the image gets a clear message)
        sys.stderr.write("hangar-driver needs Python 3.8 or later\n")
        return 2
    key = read_key()
    cfg = Config(dict(os.environ))
    driver = Driver(cfg, key, load=False)  # run() says hello, then logs the start and loads the rest

    def started() -> None:
        # Called by run() once the hello is out: ctypes' import and signal's enums (~5 ms of a pod's start
        # on a slow machine) are not on its way. Nothing of the agent's runs before: commands wait until
        # run() has loaded the rest.
        harden_process()
        import signal

        def _term(signum: int, frame: Any) -> None:
            driver.stopping.set()

        signal.signal(signal.SIGTERM, _term)
        signal.signal(signal.SIGINT, _term)

    return driver.run(started)
