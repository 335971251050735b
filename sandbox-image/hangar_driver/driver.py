"""The driver: ties the outbox, the gateway link, the hand-back relay and the turn runner together, runs
each gateway command once (answered by a ``command_result`` event) and owns the driver's lifecycle.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import collections
import os
import stat
import sys
import threading

try:  # queue.Queue's plain C form, without importing queue (heapq, ~1 ms of the way to the hello)
    from _queue import SimpleQueue
except ImportError:  # pragma: no cover (a python3 without it)
    from queue import SimpleQueue

from . import hardening
from . import protocol as P
from .commands import CommandError, NotLive, safe_name, str_field
from .config import LIVE_HARNESSES, Config
from .lazylog import log
from .link import Link
from .outbox import Outbox

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

    from .handback import HandbackWatcher
    from .repo import Repo
    from .turns import TurnRunner
    from .workbench import Workbench

DRIVER_VERSION = "0.1.0"

SHUTDOWN_DRAIN = 10.0
HELLO_FIRST = 0.5  # seconds run() waits for the handshake before it loads the rest
REMEMBERED_COMMANDS = 10000


class Driver:
    # Made by ``load()``: the turn runner, the harness adapters, the live work, the checkout. A sandbox's
    # driver has bytecode only for hangar's image's python version (bytecode is per version): on another
    # python3 importing them means compiling ~5,000 lines, most of the driver's start. ``run`` says hello
    # first.
    turns: TurnRunner
    watcher: HandbackWatcher
    workbench: Workbench
    repo: Repo

    def __init__(self, cfg: Config, key: bytes, load: bool = True) -> None:
        self.cfg = cfg
        self.key = key
        self.boot = P.new_id()
        self.outbox = Outbox(key, cfg.run)
        key_text = key.decode("ascii", "replace")
        for name in [n for n, v in cfg.agent_env.items() if key_text in v]:
            del cfg.agent_env[name]
            cfg.warnings.append("agent environment variable %s dropped: it held the run key" % name)
        self.link = Link(cfg, key, self.outbox, self._hello_body, self.on_command)
        self.commands: SimpleQueue[Optional[Tuple[str, Dict[str, Any]]]] = SimpleQueue()
        self.results: collections.OrderedDict[str, Optional[Dict[str, Any]]] = collections.OrderedDict()
        self.results_lock = threading.Lock()
        self.stopping = threading.Event()
        self.shutdown_requested = False
        self.side_threads: List[threading.Thread] = []
        self.made = False  # load() ran
        self.live_open = False  # under results_lock: live work is handed on (else kept in early_live)
        self.early_live: List[Tuple[str, Dict[str, Any]]] = []
        self.ops: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {}
        if load:
            self.load()
            self.open_live()

    def load(self) -> None:
        """Import and make the turn runner and the rest (see the class's note). Commands wait in
        ``self.commands`` until ``run`` starts their loop, live work until ``open_live``: both after
        ``prepare``, as when the driver said hello only once prepared."""
        from .handback import HandbackWatcher
        from .repo import Repo
        from .turns import TurnRunner
        from .workbench import Workbench

        cfg = self.cfg
        allowed = {cfg.agent_uid} if cfg.agent_uid is not None else {cfg.euid}
        self.watcher = HandbackWatcher(self._emit_raw, allowed)
        self.turns = TurnRunner(cfg, self.watcher, self._emit_turn_event, self.stopping)
        self.workbench = Workbench(cfg, self.link.send_live)
        self.repo = Repo(dict(os.environ), cfg.workspace, cfg.state_dir, cfg.run)
        self.ops = {
            P.OP_START_TURN: self.turns.start_turn,
            P.OP_PREPARE_TURN: self.turns.prepare_turn,
            P.OP_STEER: self.turns.steer,
            P.OP_WITHDRAW: self.turns.withdraw,
            P.OP_INTERRUPT: self.turns.interrupt,
            P.OP_ANSWER: self.turns.answer,
            P.OP_TAINT: self.turns.taint,
            P.OP_CHECKPOINT: self._op_checkpoint,
            P.OP_SHUTDOWN: self._op_shutdown,
            P.OP_VERIFY: self._op_verify,
            P.OP_DELIVER: self._op_deliver,
            P.OP_ADOPT: self._op_adopt,
        }
        self.made = True

    def open_live(self) -> None:
        """Live work is handed on from now on, and what came before ``load`` and ``prepare`` now."""
        with self.results_lock:
            self.live_open = True
            early, self.early_live = self.early_live, []
        for command_id, body in early:
            self.workbench.handle(command_id, body)

    # --------------------------------------------------------------- events

    def _emit_raw(self, name: str, payload: Dict[str, Any]) -> None:
        try:
            self.outbox.add(name, P.scrub(payload))
        except Exception:
            log.exception("emitting %s failed", name)

    def _emit_turn_event(self, name: str, payload: Dict[str, Any]) -> None:
        """The turns' events; after a turn ends in a checkout, its work as a patch (``work_patch``), so a
        session's work can be read against its base without asking the sandbox (GET …/patch)."""
        self._emit_raw(name, payload)
        if name == "turn_ended" and self.repo.enabled and isinstance(payload.get("turn"), str):
            # Not on the adapter's reader thread: git reads the whole workspace.
            t = threading.Thread(
                target=self._take_patch, args=(payload["turn"],), name="hangar-work-patch", daemon=True
            )
            t.start()

    def _take_patch(self, turn: str) -> None:
        from .repo import work_patch

        try:
            p = work_patch(self.repo, self.cfg.agent_env, self.cfg.agent_uid, self.cfg.agent_gid)
        except Exception as exc:  # a patch is a view of the work: its failure fails nothing else
            log.warning("taking the work of turn %s as a patch failed: %s", turn, exc)
            return
        if p is not None:
            self._emit_raw(P.EV_WORK_PATCH, dict(p, turn=turn))

    def _hello_body(self) -> Dict[str, Any]:
        return {
            "run": self.cfg.run,
            "harness": self.cfg.harness,
            "driver_version": DRIVER_VERSION,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "resume_from": self.outbox.resume_from(),
            "boot": self.boot,
            # Before load(), the adapter's kind by its name (config.LIVE_HARNESSES); driver_ready says it after.
            "live": self.turns.live if self.made else self.cfg.harness in LIVE_HARNESSES,
            "pid": os.getpid(),
        }

    # --------------------------------------------------------------- commands

    def on_command(self, command_id: Any, body: Dict[str, Any]) -> None:
        """Called by the link's reader for each command frame: at most once per id."""
        if not isinstance(command_id, str) or not command_id or len(command_id) > 200:
            log.warning("command without a usable id ignored")
            return
        if body.get("op") in P.LIVE_OPS:  # a person's live work: answered by live frames, on its own thread
            self.link.ack_command(command_id)
            with self.results_lock:
                if not self.live_open:
                    self.early_live.append((command_id, body))  # open_live hands it on
                    return
            self.workbench.handle(command_id, body)
            return
        with self.results_lock:
            if command_id in self.results:
                previous = self.results[command_id]
                self.link.ack_command(command_id)
                if previous is not None:
                    again = dict(previous)
                    again["duplicate"] = True
                    self._emit_raw(P.EV_COMMAND_RESULT, again)
                return
            self.results[command_id] = None
            while len(self.results) > REMEMBERED_COMMANDS:
                oldest = next(iter(self.results))
                if self.results[oldest] is None:
                    break
                self.results.popitem(last=False)
        self.link.ack_command(command_id)
        self.commands.put((command_id, body))

    def command_loop(self) -> None:
        while True:
            item = self.commands.get()
            if item is None:
                return
            command_id, body = item
            op = body.get("op")
            if op in (P.OP_CHECKPOINT, P.OP_VERIFY, P.OP_DELIVER):  # long: the turn's commands go on
                t = threading.Thread(
                    target=self._execute, args=(command_id, body), name="hangar-checkpoint", daemon=True
                )
                self.side_threads.append(t)
                t.start()
                continue
            self._execute(command_id, body)

    def _execute(self, command_id: str, body: Dict[str, Any]) -> None:
        op = body.get("op")
        result: Dict[str, Any] = {
            "command_id": command_id,
            "op": op if isinstance(op, str) else None,
            "ok": True,
            "error": None,
        }
        try:
            if not isinstance(op, str) or op not in P.OPS:
                raise CommandError("unknown command op %r" % (op,))
            if self.cfg.pooled and op not in (P.OP_ADOPT, P.OP_SHUTDOWN):
                raise CommandError("a warm sandbox runs nothing until a session adopts it")
            extra = self.ops[op](body)
            if extra:
                for k, v in extra.items():
                    if k not in result:
                        result[k] = v
        except CommandError as exc:
            result["ok"], result["error"] = False, str(exc)
        except NotLive as exc:
            result["ok"], result["error"] = (
                False,
                "harness %s cannot take this now: %s" % (self.cfg.harness, exc),
            )
        except Exception as exc:
            import traceback  # not on the way to the hello (its import brings tokenize)

            log.error("command %s (%s) failed:\n%s", command_id, op, traceback.format_exc())
            result["ok"], result["error"] = False, "%s: %s" % (exc.__class__.__name__, exc)
        with self.results_lock:
            self.results[command_id] = result
        self._emit_raw(P.EV_COMMAND_RESULT, result)
        if self.shutdown_requested:
            self.stopping.set()

    def _op_checkpoint(self, body: Dict[str, Any]) -> Dict[str, Any]:
        path = str_field(body, "path", limit=4096)
        assert path is not None
        if not os.path.isabs(path):
            # A bare name lands in the pod's checkpoint directory (HANGAR_CHECKPOINT_DIR: the workspace
            # volume's checkpoints/, which the local runner maps like any mount).
            if not self.cfg.checkpoint_dir or not safe_name(path):
                raise CommandError("path must be absolute, or a file name with HANGAR_CHECKPOINT_DIR set")
            path = os.path.join(self.cfg.checkpoint_dir, path)
        from .checkpoint import write_checkpoint

        home = self.cfg.agent_home if body.get("include_home", True) else None
        return write_checkpoint(path, self.cfg.workspace, home, self.cfg.agent_uid, self.cfg.agent_gid)

    def _op_verify(self, body: Dict[str, Any]) -> Dict[str, Any]:
        if self.turns.running():
            raise CommandError("a turn is running: verification waits for the agent to finish")
        from .repo import verify

        return verify(self.repo, body, self.cfg.agent_env, self.cfg.agent_uid, self.cfg.agent_gid)

    def _op_deliver(self, body: Dict[str, Any]) -> Dict[str, Any]:
        if self.turns.running():
            raise CommandError("a turn is running: the work is taken once the agent has finished")
        from .repo import deliver

        return deliver(self.repo, body, self.cfg.agent_env, self.cfg.agent_uid, self.cfg.agent_gid)

    def _op_adopt(self, body: Dict[str, Any]) -> Dict[str, Any]:
        """A session takes this warm sandbox: from now on the driver is the session's run, with a key
        derived from the pool's (``protocol.derive_run_key``), and says hello as that run on the connection
        it has (``Link.adopt``). The pool's run and key are done with; the operator refuses them from now on."""
        if not self.cfg.pooled:
            raise CommandError("adopt: this sandbox is not a warm pool's")
        run = str_field(body, "run", limit=200)
        nonce = str_field(body, "nonce", limit=200)
        assert run is not None and nonce is not None
        if not safe_name(run, 200) or len(nonce) < 16:
            raise CommandError("adopt: a run id and a nonce of at least 16 characters are needed")
        key = P.derive_run_key(self.key, run, nonce).encode("ascii")
        self.cfg.pooled = False
        self.key = key
        self.link.adopt(key, run)  # sets cfg.run and rebinds the outbox, under the link's lock
        log.info("adopted as run %s, key %s", run, P.fingerprint(key))
        self._emit_raw(P.EV_DRIVER_READY, self._ready_payload())
        return {"run": run}

    def _op_shutdown(self, body: Dict[str, Any]) -> Dict[str, Any]:
        self.turns.close()
        self.shutdown_requested = True  # the driver stops once this command's result is out
        return {}

    # --------------------------------------------------------------- lifecycle

    def prepare(self) -> None:
        from . import precleared

        cfg = self.cfg
        os.makedirs(os.path.dirname(cfg.state_dir) or "/", exist_ok=True)
        hardening.secure_dir(cfg.state_dir, None, None, 0o711)
        hardening.secure_dir(os.path.join(cfg.state_dir, "io"), None, None, 0o711)
        if not os.path.isdir(cfg.workspace):
            os.makedirs(cfg.workspace, 0o755)
        base = self.repo.checkout(cfg.agent_uid, cfg.agent_gid)  # raises: no turn starts, and it says why
        if base is not None:
            log.info("checked out %s at %s on %s", self.repo.base, base[:12], self.repo.branch)
        if cfg.agent_home.startswith(cfg.state_dir + os.sep):
            hardening.secure_dir(cfg.agent_home, cfg.agent_uid, cfg.agent_gid, 0o700)
        elif not os.path.isdir(cfg.agent_home):
            os.makedirs(cfg.agent_home, 0o700)
            if cfg.agent_uid is not None:
                os.chown(cfg.agent_home, cfg.agent_uid, cfg.agent_gid if cfg.agent_gid is not None else -1)
        if cfg.agent_uid is not None and cfg.agent_gid is not None:
            hardening.chown_tree(cfg.workspace, cfg.agent_uid, cfg.agent_gid)
            if not cfg.agent_home.startswith(cfg.state_dir + os.sep):
                hardening.chown_tree(cfg.agent_home, cfg.agent_uid, cfg.agent_gid)
        self.turns.precleared = precleared.load(
            os.environ.get("HANGAR_PRECLEARED_FILE"), self.key, cfg.run, cfg.warnings
        )
        if self.turns.precleared is not None:
            log.info(
                "a pre-cleared call for turn %s (%s)",
                self.turns.precleared["turn"],
                self.turns.precleared["tool"],
            )
        key_file = os.environ.get("HANGAR_RUN_KEY_FILE")
        if key_file:
            try:
                st = os.stat(key_file)
                if st.st_mode & 0o044 and cfg.agent_uid is not None:
                    cfg.warnings.append(
                        "the run key file %s is readable by other users (mode %o)"
                        % (key_file, stat.S_IMODE(st.st_mode))
                    )
            except OSError:
                pass

    def _ready_payload(self) -> Dict[str, Any]:
        return {
            "harness": self.cfg.harness,
            "live": self.turns.live,
            "driver_version": DRIVER_VERSION,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "agent_uid": self.cfg.agent_uid if self.cfg.agent_uid is not None else self.cfg.euid,
            "workspace": self.cfg.workspace,
            "error": self.turns.error,
            "hardened": hardening.HARDENING_ERROR is None,
        }

    def run(self, started: Optional[Callable[[], None]] = None) -> int:
        # The hello first (the link's thread), then the rest of the driver's start beside the operator's
        # reaction to it: what a command needs is ready before the command loop starts. A sandbox with a
        # checkout says hello once it is made, as before: its session is connected with its workspace.
        # ``started``: called (on this thread) after the hello, before anything else of the start (main's
        # hardening and signal handlers).
        hello_first = not os.environ.get("HANGAR_REPO_URL")
        link_thread = threading.Thread(target=self.link.run_forever, name="hangar-link", daemon=True)
        if hello_first:
            link_thread.start()
            if not self.made:  # compiling the rest takes the GIL: the handshake first, for a moment at most
                self.link.connected.wait(HELLO_FIRST)
        if started is not None:
            started()
        # After the hello: logging's import is not on its way (lazylog.py).
        cfg, key = self.cfg, P.fingerprint(self.key)
        log.info("run %s, harness %s, key %s, agent uid %s", cfg.run, cfg.harness, key, cfg.agent_uid)
        if not self.made:
            self.load()
        try:
            self.prepare()
        except Exception as exc:  # keep running: the operator hears why no turn can start
            log.exception("preparing the sandbox failed")
            self.turns.error = "sandbox setup failed: %s: %s" % (exc.__class__.__name__, exc)
            self.turns.harness = None
        for message in self.cfg.warnings:
            log.warning("%s", message)
            self._emit_raw("log", {"level": "warning", "message": message, "source": "driver"})
        if self.turns.error:
            self._emit_raw("log", {"level": "error", "message": self.turns.error, "source": "driver"})
        self._emit_raw(P.EV_DRIVER_READY, self._ready_payload())
        self.open_live()
        if not hello_first:
            link_thread.start()
        threading.Thread(target=self.command_loop, name="hangar-commands", daemon=True).start()
        threading.Thread(target=self.watcher.run, name="hangar-handback", daemon=True).start()
        while not self.stopping.wait(0.5):
            pass
        log.info("shutting down")
        self.workbench.close()
        try:
            self.turns.close()
        except Exception:
            log.exception("closing the harness")
        for t in self.side_threads:
            t.join(SHUTDOWN_DRAIN)
        self.watcher.stopping.set()
        drained = self.outbox.wait_drained(SHUTDOWN_DRAIN)
        if not drained:
            log.warning("exiting with %d events the gateway has not stored", self.outbox.pending())
        self.link.stop()
        link_thread.join(5)
        return 0
