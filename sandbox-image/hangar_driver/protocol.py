"""The signed channel between a sandbox's hangar-driver and the operator's driver gateway.

Standard library only, Python 3.8+. This one module is imported by both ends: the driver (inside the
sandbox, on the image's own python3) and the operator (``hangar_operator.gateway``).

Transport
=========

The driver opens one TCP connection to the gateway (``HANGAR_GATEWAY`` = ``host:port``) and keeps it up,
reconnecting with backoff (0.2 s doubling to 5 s) whenever it breaks. Both directions carry **frames**:
one JSON object per line, UTF-8, terminated by ``\\n``. A line longer than ``MAX_FRAME_BYTES`` (4 MiB,
newline excluded) is refused and the connection closed.

Frame
=====

::

    {"v": 1, "run": RUN_ID, "dir": "d2g" | "g2d", "seq": N, "type": T, "id": ID, "body": {...},
     "ts": UNIX_FLOAT, "sig": HEX}

- ``v``     protocol version, always 1.
- ``run``   the run id (one sandbox run = one run key).
- ``dir``   ``d2g`` (driver to gateway) or ``g2d`` (gateway to driver). A frame is only ever accepted in
            its own direction, so a frame the gateway signed can't be played back to it as the driver's.
- ``seq``   ``event`` frames: the event's number, 1, 2, 3… per run, never reused. Other d2g frames: 0.
            g2d frames: a per-connection frame counter (informational).
- ``type``  see below; each direction has its own set.
- ``id``    ``command`` frames: the command id (unique per run). Other frames: a random frame id.
- ``body``  an object, by type (below).
- ``ts``    the sender's clock (seconds since the epoch) when the frame was made; informational.
- ``sig``   lower-case hex HMAC-SHA256 over the frame's *canonical bytes*: the frame without ``sig``,
            serialised as ``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
            and encoded as UTF-8. The HMAC key is the run key's text (``new_run_key()``: 32 random bytes,
            URL-safe base64 without padding) encoded as ASCII, surrounding whitespace stripped
            (``key_bytes``). The receiver recomputes the canonical bytes from the parsed object and
            compares with ``hmac.compare_digest``; it also checks ``v``, ``run`` and ``dir`` and that
            ``type`` belongs to the direction. Frames are written in the same canonical form (plus
            ``sig``), but a receiver never relies on the sender's byte layout.

Types and bodies
================

Driver to gateway (``d2g``):

- ``hello``   first frame of every connection. body: ``{"run", "harness", "driver_version", "python",
              "resume_from", "boot", "live"}``. ``resume_from`` is the lowest event seq the driver still
              holds unacknowledged (its next seq when none is pending; ``null`` before its first welcome,
              when it has not numbered any event yet). ``boot`` is random per driver process.
- ``ack``     acknowledges gateway commands. body: ``{"ids": [command id, ...], "nonce": NONCE}``, where
              ``nonce`` is the current connection's nonce from ``welcome``. The driver sends one (``ids`` may
              be empty) right after ``welcome``: this *confirms* the connection (below).
- ``event``   body: ``{"name": NAME, "payload": {...}}``. NAME is a harness event (``harness.py``:
              turn_started, conversation, text, tool_use, tool_result, permission_request,
              permission_cancelled, steer, usage, turn_ended, log) or a driver event:
              ``driver_ready`` {harness, live, driver_version, python, agent_uid};
              ``handback`` {turn, kind: done|progress|ask|result|artifact, ...} from ``hangar-agent``;
              ``command_result`` {command_id, op, ok, error, ...op-specific fields, duplicate?};
              ``work_patch`` {turn, base, head, patch, patch_truncated, files_changed, diff_lines} after a
              turn ends in a workspace that is a checkout (``repo.work_patch``).
- ``ping``    body ``{}``; sent when the driver has heard nothing for a while. The gateway answers ``pong``.
- ``live``    the answer to a live command (``exec``, ``process``, ``watch``: a person's work in the sandbox,
              ``workbench.py``): body ``{"request": COMMAND_ID, "kind": output|changes|result|ended, ...}``.
              Not numbered and not kept for a resend: a person waits on it now, and a broken link ends it.

Gateway to driver (``g2d``):

- ``welcome`` the answer to a valid ``hello``. body: ``{"acked": N, "nonce": NONCE}``: N is the highest
              event seq the gateway has durably stored for the run (0 for none).
- ``ack``     body ``{"seq": N}``: cumulative, every event up to N is durably stored.
- ``command`` ``id`` = command id. body: ``{"op": OP, ...}`` with OP one of start_turn, prepare_turn,
              steer, withdraw, interrupt, answer, taint, checkpoint, shutdown (see ``hangar_driver.main`` for each body).
- ``pong``    body ``{}``.

Handshake
=========

1. driver → ``hello`` (signed). The gateway looks up the run key by ``run``; an unknown run, a bad
   signature or any other first frame closes the connection and is reported (audited) as rejected.
2. gateway → ``welcome {acked, nonce}``.
3. driver → ``ack {ids: [], nonce}``. Until this signed frame arrives with the right nonce the connection
   is *unconfirmed*: it gets no commands, replaces no older connection, and any other frame is rejected.
   A replayed ``hello`` therefore gains an attacker nothing: it can't sign the confirmation.
4. Confirmed: the gateway sends every command not yet acknowledged by the driver, in the order they were
   queued; the driver resends every event after ``acked``, in seq order. A newer confirmed connection for
   the same run replaces the older one. Any later frame with a bad signature, the wrong run or
   direction, or a wrong nonce is rejected and closes the connection.

Adoption in place
=================

A warm pool's driver that a session adopts (``adopt {run, nonce}``) keeps its connection: right after the
command it sends, on that connection, a ``hello`` as the session's run, signed with the derived key
(``derive_run_key``), whose body also carries ``adopted_from`` (the pool's run) and ``nonce`` (this
connection's nonce, from its ``welcome``). The gateway accepts it only on a confirmed connection of the
pool's run to which it sent an ``adopt`` naming that run, and only if ``verify_adoption`` passes; it then
answers ``welcome {acked, nonce}`` for the session's run (signed with the derived key, the same nonce) and the
connection is the session's run, confirmed: the hello is bound to this connection's nonce, so it needs no
confirmation of its own and is worth nothing on another connection. From then on every frame either way is
the session's, and the pool's run is done with. Anything else closes the connection, and the driver says
an ordinary ``hello`` as the session's run on a new one (so an operator without this step still works).

Exactly once
============

Events: the driver numbers events 1, 2, 3… (it takes the starting point from its first ``welcome``, so a
restarted driver process continues after what the gateway already stored), and keeps every event in an
outbox until a gateway ``ack`` covers it. After every (re)connect it resends all events after
``welcome.acked``. The gateway delivers events strictly in seq order: the next expected seq is handed to
the operator's store, and only once that returned (durably stored) is it acknowledged; a seq it already
stored is acknowledged again but not delivered again; if storing fails the event is not acknowledged
and the connection is closed, so the driver resends it after reconnecting.

Commands: the gateway keeps every command until the driver's ``ack`` names its id and resends the
unacknowledged ones on each confirmed connection. The driver acknowledges a command once it has recorded
its id, executes each id at most once, and always reports a ``command_result`` event; for an id it has
already seen it acknowledges again and re-sends the recorded result (``duplicate: true``), or nothing
more if the command is still running (its result follows). Command ids should be deterministic on the
operator side (e.g. the steer id) so that a command re-sent after an operator restart is recognised.
"""

from __future__ import annotations

import math
import os
import sys
import time
from _operator import _compare_digest  # hmac.compare_digest, without importing hmac (and OpenSSL)

from . import wirejson  # json's C codec, without json's import (re): wirejson.py

try:  # python3's own SHA-256 (``_sha2`` from 3.12): a driver's handshake need not load OpenSSL (_digest)
    from _sha256 import sha256 as _builtin_sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover (3.12+, or a python3 built without it)
    try:
        from _sha2 import sha256 as _builtin_sha256  # type: ignore[import-not-found]
    except ImportError:
        _builtin_sha256 = None

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Union

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 4 * 1024 * 1024

D2G = "d2g"
G2D = "g2d"

# Driver to gateway.
HELLO = "hello"
EVENT = "event"
ACK = "ack"
PING = "ping"
LIVE = "live"  # a live answer to a person's command (workbench.py): not numbered, not kept
# Gateway to driver.
WELCOME = "welcome"
COMMAND = "command"
PONG = "pong"

TYPES = {D2G: frozenset({HELLO, EVENT, ACK, PING, LIVE}), G2D: frozenset({WELCOME, ACK, COMMAND, PONG})}

# Command ops.
OP_START_TURN = "start_turn"
OP_PREPARE_TURN = "prepare_turn"  # pre-start the CLI of the turn start_turn will start next
OP_STEER = "steer"
OP_WITHDRAW = "withdraw"
OP_INTERRUPT = "interrupt"
OP_ANSWER = "answer"
OP_TAINT = "taint"
OP_CHECKPOINT = "checkpoint"
OP_SHUTDOWN = "shutdown"
OP_VERIFY = "verify"
OP_DELIVER = "deliver"
OP_ADOPT = "adopt"  # a warm pool's sandbox becomes a session's run
# A person's live work in the sandbox (workbench.py), answered by ``live`` frames, never command_result.
OP_EXEC = "exec"
OP_PROCESS = "process"
OP_WATCH = "watch"
LIVE_OPS = frozenset({OP_EXEC, OP_PROCESS, OP_WATCH})
OPS = (
    frozenset(
        {
            OP_ADOPT,
            OP_START_TURN,
            OP_PREPARE_TURN,
            OP_STEER,
            OP_WITHDRAW,
            OP_INTERRUPT,
            OP_ANSWER,
            OP_TAINT,
            OP_CHECKPOINT,
            OP_SHUTDOWN,
            OP_VERIFY,
            OP_DELIVER,
        }
    )
    | LIVE_OPS
)

# Event names the driver itself emits (the harness adapters emit the rest, see harness.py).
EV_DRIVER_READY = "driver_ready"
EV_HANDBACK = "handback"
EV_COMMAND_RESULT = "command_result"
EV_WORK_PATCH = "work_patch"
HARNESS_EVENTS = frozenset(
    {
        "turn_started",
        "conversation",
        "text",
        "tool_use",
        "tool_result",
        "permission_request",
        "permission_cancelled",
        "steer",
        "interrupted",
        "usage",
        "turn_ended",
        "log",
    }
)
EVENT_NAMES = HARNESS_EVENTS | {EV_DRIVER_READY, EV_HANDBACK, EV_COMMAND_RESULT}
HANDBACK_KINDS = frozenset({"done", "progress", "ask", "result", "artifact"})

if TYPE_CHECKING:
    Frame = Dict[str, Any]
    Key = Union[str, bytes]


class ProtocolError(ValueError):
    """A frame that can't be accepted: malformed, too large, or not verifiable."""


class FrameTooLarge(ProtocolError):
    pass


class BadSignature(ProtocolError):
    """The frame is not one this run's key signed for this direction. ``str(exc)`` is the reason."""


def new_run_key() -> str:
    """A fresh run key: 32 random bytes, URL-safe base64 without padding (43 characters)."""
    import base64  # here, not at the top: base64 imports re, which the driver's hello need not compile

    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii").rstrip("=")


def derive_run_key(key: Key, run: str, nonce: str) -> str:
    """The run key of the session that adopts a warm sandbox (``adopt``), in ``new_run_key``'s form.

    Both ends compute it from the warm sandbox's own key, so the new key never crosses the network; the
    agent, which can't read the driver's key, can't compute it either."""
    import hashlib
    import hmac

    msg = b"hangar-adopt\x00" + run.encode("utf-8") + b"\x00" + nonce.encode("utf-8")
    mac = hmac.new(key_bytes(key), msg, hashlib.sha256).digest()
    import base64

    return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")


def key_bytes(key: Key) -> bytes:
    """The HMAC key for a run key as stored (text, a file's bytes): surrounding whitespace stripped."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    key = key.strip()
    if not key:
        raise ValueError("empty run key")
    return key


def new_id() -> str:
    # secrets.token_hex(8) is this; secrets imports random and base64 (and re), nothing the hello needs
    return os.urandom(8).hex()


def _reject_constant(name: str) -> Any:
    raise ProtocolError("non-finite number in frame: %s" % name)


def canonical(frame: Frame) -> bytes:
    """The bytes a frame's signature covers: the frame without ``sig``, in canonical JSON."""
    obj = {k: v for k, v in frame.items() if k != "sig"}
    return wirejson.dumps(obj).encode("utf-8")


_TRANS_5C = bytes(x ^ 0x5C for x in range(256))
_TRANS_36 = bytes(x ^ 0x36 for x in range(256))
_BUILTIN_MAX = (
    4096  # bytes: a hello or an ack, not a turn's output (OpenSSL's SHA-256 is ~8x faster on those)
)


def _digest(key: Key, data: bytes) -> str:
    """HMAC-SHA256 of ``data``, hex. Until this process has imported ``hashlib`` (OpenSSL: ~2.5 ms of a
    python3's start to load, most of what the driver's hello waited on past socket and json), short data is
    signed with python3's built-in SHA-256, as ``hmac`` computes it without OpenSSL: the same digest."""
    k = key_bytes(key)
    if _builtin_sha256 is not None and len(data) <= _BUILTIN_MAX and "hashlib" not in sys.modules:
        if len(k) > 64:  # HMAC's block size: a longer key is hashed first
            k = _builtin_sha256(k).digest()
        k = k.ljust(64, b"\0")
        inner = _builtin_sha256(k.translate(_TRANS_36))
        inner.update(data)
        outer = _builtin_sha256(k.translate(_TRANS_5C))
        outer.update(inner.digest())
        return str(outer.hexdigest())
    import hashlib
    import hmac

    return hmac.new(k, data, hashlib.sha256).hexdigest()


def scrub(value: Any) -> Any:
    """Make a value safe to sign: lone surrogates replaced, non-finite floats and unknown types made text,
    dict keys made strings. Used on payloads that come from subprocess output."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {scrub(str(k)): scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return scrub(str(value))


def make_frame(
    run: str, direction: str, ftype: str, body: Dict[str, Any], seq: int = 0, fid: Optional[str] = None
) -> Frame:
    """An unsigned frame (pass it to ``sign``)."""
    return {
        "v": PROTOCOL_VERSION,
        "run": run,
        "dir": direction,
        "seq": seq,
        "type": ftype,
        "id": fid if fid is not None else new_id(),
        "body": body,
        "ts": time.time(),
    }


def sign(key: Key, frame: Frame) -> Frame:
    """A copy of ``frame`` with ``sig`` set. Values that can't be signed as they are (lone surrogates,
    NaN) are scrubbed first."""
    out = {k: v for k, v in frame.items() if k != "sig"}
    try:
        data = canonical(out)
    except (UnicodeEncodeError, ValueError, TypeError):
        out = scrub(out)
        data = canonical(out)
    out["sig"] = _digest(key, data)
    return out


def verify(key: Key, frame: Frame, expected_dir: str, expected_run: str) -> None:
    """Raise ``BadSignature`` (with the reason as its message) unless ``frame`` is a well-formed frame of
    protocol version 1, for ``expected_run``, travelling in ``expected_dir``, with a type of that
    direction, signed with ``key``."""
    if not isinstance(frame, dict):
        raise BadSignature("malformed frame")
    sig = frame.get("sig")
    if not isinstance(sig, str) or len(sig) != 64:
        raise BadSignature("missing signature")
    try:
        data = canonical(frame)
    except (UnicodeEncodeError, ValueError, TypeError):
        raise BadSignature("malformed frame") from None
    expected = _digest(key, data)
    if not _compare_digest(expected.encode("ascii"), sig.encode("utf-8", "replace")):
        raise BadSignature("bad signature")
    if frame.get("v") != PROTOCOL_VERSION:
        raise BadSignature("unsupported protocol version")
    if frame.get("run") != expected_run:
        raise BadSignature("wrong run")
    if frame.get("dir") != expected_dir:
        raise BadSignature("wrong direction")
    if expected_dir not in TYPES or frame.get("type") not in TYPES[expected_dir]:
        raise BadSignature("unknown frame type")
    seq = frame.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise BadSignature("malformed frame: seq")
    if not isinstance(frame.get("id"), str) or not isinstance(frame.get("body"), dict):
        raise BadSignature("malformed frame: id/body")


def verify_adoption(key: Key, frame: Frame, pool_run: str, run: str, nonce: str) -> None:
    """Raise ``BadSignature`` unless ``frame`` is the in-place ``hello`` of a pool's driver (``pool_run``)
    adopted as ``run``: signed with ``run``'s (derived) key, naming ``pool_run`` as where it came from and
    carrying ``nonce``, the nonce of the connection it arrived on (see "Adoption in place")."""
    verify(key, frame, D2G, run)
    if frame.get("type") != HELLO:
        raise BadSignature("adoption is not a hello")
    body = frame["body"]
    if body.get("run") != run or body.get("adopted_from") != pool_run:
        raise BadSignature("adoption names another run")
    got = body.get("nonce")
    if not isinstance(got, str) or not nonce or not _compare_digest(got.encode("utf-8"), nonce.encode()):
        raise BadSignature("adoption with a wrong nonce (replayed?)")


def encode(frame: Frame) -> bytes:
    """A signed frame as one line on the wire (``\\n``-terminated)."""
    raw = wirejson.dumps(frame).encode("utf-8")
    if len(raw) > MAX_FRAME_BYTES:
        raise FrameTooLarge("frame of %d bytes exceeds %d" % (len(raw), MAX_FRAME_BYTES))
    return raw + b"\n"


def decode(line: bytes) -> Frame:
    """Parse one line from the wire (with or without its ``\\n``). Raises ``FrameTooLarge`` for a line
    over ``MAX_FRAME_BYTES`` and ``ProtocolError`` for anything that is not a JSON object. It does not
    verify the signature: call ``verify``."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if len(line) > MAX_FRAME_BYTES:
        raise FrameTooLarge("frame of %d bytes exceeds %d" % (len(line), MAX_FRAME_BYTES))
    try:
        obj = wirejson.loads(line.decode("utf-8"), _reject_constant)
    except ProtocolError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError("malformed frame: %s" % (exc.__class__.__name__,)) from None
    if not isinstance(obj, dict):
        raise ProtocolError("malformed frame: not an object")
    return obj


def read_key_file(path: str) -> bytes:
    """Read a run key from a file (a Secret volume)."""
    with open(path, "rb") as fh:
        return key_bytes(fh.read(4096))


def fingerprint(key: Key) -> str:
    """A short, non-reversible name for a key, for logs (never log the key)."""
    import hashlib

    return hashlib.sha256(b"hangar-run-key:" + key_bytes(key)).hexdigest()[:12]


__all__ = [
    "ACK",
    "COMMAND",
    "D2G",
    "EVENT",
    "EVENT_NAMES",
    "EV_COMMAND_RESULT",
    "EV_DRIVER_READY",
    "EV_HANDBACK",
    "G2D",
    "HANDBACK_KINDS",
    "HARNESS_EVENTS",
    "HELLO",
    "LIVE",
    "LIVE_OPS",
    "MAX_FRAME_BYTES",
    "OPS",
    "PING",
    "PONG",
    "PROTOCOL_VERSION",
    "TYPES",
    "WELCOME",
    "BadSignature",
    "FrameTooLarge",
    "ProtocolError",
    "canonical",
    "decode",
    "derive_run_key",
    "encode",
    "fingerprint",
    "key_bytes",
    "make_frame",
    "new_id",
    "new_run_key",
    "read_key_file",
    "scrub",
    "sign",
    "verify",
]
