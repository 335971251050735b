"""The hand-back relay: what the agent hands back with ``hangar-agent`` (done, progress, ask, result,
artifact), read from ``$HANGAR_IO`` and reported as ``handback`` events.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import base64
import collections
import errno
import hashlib
import json
import logging
import os
import stat
import threading
from typing import Any, Callable, Dict, Optional, Set, Tuple

from . import protocol as P

log = logging.getLogger("hangar.driver")

HANDBACK_POLL = 0.2
HANDBACK_FILE = "handback.jsonl"
MAX_HANDBACK_LINE = 256 * 1024
MAX_HANDBACK_LINES = 2000  # per turn
MAX_TEXT = 16 * 1024  # done message, progress text, question
MAX_RESULT = 64 * 1024  # result JSON, canonical form
MAX_ARTIFACT = 10 * 1024 * 1024
MAX_INLINE_ARTIFACT = 1024 * 1024  # artifacts up to this size travel in the event (base64)
MAX_ARTIFACTS = 64  # per turn


class Refused(Exception):
    pass


def open_under(base: str, rel: Any, allowed_uids: Set[int]) -> int:
    """Open a regular file at ``rel`` inside ``base`` for reading without following any symlink, and only
    if it is a plain file (one link) owned by an allowed uid. Returns the fd. Raises Refused."""
    if not isinstance(rel, str) or not rel or len(rel) > 1024 or "\x00" in rel:
        raise Refused("bad path")
    if os.path.isabs(rel):
        base_real = os.path.normpath(base)
        norm = os.path.normpath(rel)
        if not norm.startswith(base_real + os.sep):
            raise Refused("path escapes HANGAR_IO")
        rel = norm[len(base_real) + 1 :]
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise Refused("path escapes HANGAR_IO")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    dflags = flags | getattr(os, "O_DIRECTORY", 0)
    fd = os.open(base, dflags)
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, dflags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused("path escapes HANGAR_IO (symlink or not a directory)") from None
                raise Refused("no such file") from None
            os.close(fd)
            fd = nfd
        try:
            ffd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused("path escapes HANGAR_IO (symlink)") from None
            raise Refused("no such file") from None
    finally:
        os.close(fd)
    st = os.fstat(ffd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid not in allowed_uids:
        os.close(ffd)
        raise Refused("not a plain file of the agent's")
    return ffd


def read_fd(fd: int, limit: int) -> bytes:
    """Read at most ``limit`` bytes; raises Refused when there is more."""
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, min(1024 * 1024, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise Refused("larger than %d bytes" % limit)
    return b"".join(chunks)


def _no_constants(name: str) -> Any:
    raise ValueError("not JSON: %s" % name)


def _cap_text(value: Any, field: str) -> Tuple[str, bool]:
    if not isinstance(value, str):
        raise Refused("%s must be text" % field)
    if len(value) > MAX_TEXT:
        return value[:MAX_TEXT], True
    return value, False


class _TurnIO:
    def __init__(self, turn: str, path: str) -> None:
        self.turn = turn
        self.path = path
        self.offset = 0
        self.inode: Optional[Tuple[int, int]] = None
        self.partial = bytearray()
        self.discarding = False
        self.lines = 0
        self.artifacts = 0
        self.seen_ids: Set[str] = set()
        self.warned: Set[str] = set()


class HandbackWatcher:
    """Turns the lines ``hangar-agent`` appends to ``$HANGAR_IO/handback.jsonl`` into ``handback`` events.

    Everything in ``$HANGAR_IO`` is the agent's and untrusted: files are opened without following
    symlinks, only plain files owned by the agent count, sizes are capped, and paths stay inside."""

    def __init__(self, emit: Callable[[str, Dict[str, Any]], None], allowed_uids: Set[int]) -> None:
        self.emit = emit
        self.allowed_uids = allowed_uids
        self.lock = threading.RLock()
        self.turns: collections.OrderedDict[str, _TurnIO] = collections.OrderedDict()
        self.stopping = threading.Event()

    def start_turn(self, turn: str, path: str) -> None:
        with self.lock:
            self.turns[turn] = _TurnIO(turn, path)

    def finish_turn(self, turn: str) -> None:
        """Read what is left for ``turn`` (called before its ``turn_ended`` is emitted) and stop watching it."""
        with self.lock:
            tio = self.turns.pop(turn, None)
            if tio is not None:
                self._scan(tio)

    def run(self) -> None:
        while not self.stopping.wait(HANDBACK_POLL):
            with self.lock:
                for tio in list(self.turns.values()):
                    try:
                        self._scan(tio)
                    except Exception:
                        log.exception("scanning %s", tio.path)

    def _warn(self, tio: _TurnIO, message: str, once: Optional[str] = None) -> None:
        if once is not None:
            if once in tio.warned:
                return
            tio.warned.add(once)
        self.emit("log", {"level": "warning", "message": message, "turn": tio.turn, "source": "handback"})

    def _scan(self, tio: _TurnIO) -> None:
        try:
            fd = open_under(tio.path, HANDBACK_FILE, self.allowed_uids)
        except Refused as exc:
            if str(exc) != "no such file":
                self._warn(tio, "hangar-agent hand-back file ignored: %s" % exc, once="file")
            return
        try:
            st = os.fstat(fd)
            inode = (st.st_dev, st.st_ino)
            if tio.inode != inode:
                if tio.inode is not None:
                    self._warn(tio, "hangar-agent hand-back file was replaced; reading the new one")
                tio.inode, tio.offset = inode, 0
                tio.partial = bytearray()
            if st.st_size < tio.offset:
                tio.offset = st.st_size
                tio.partial = bytearray()
            if st.st_size == tio.offset:
                return
            os.lseek(fd, tio.offset, os.SEEK_SET)
            data = os.read(fd, min(st.st_size - tio.offset, 4 * 1024 * 1024))
        finally:
            os.close(fd)
        tio.offset += len(data)
        self._feed(tio, data)

    def _feed(self, tio: _TurnIO, data: bytes) -> None:
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                rest = data[start:]
                if not tio.discarding:
                    tio.partial += rest
                    if len(tio.partial) > MAX_HANDBACK_LINE:
                        self._warn(tio, "hangar-agent line over %d bytes refused" % MAX_HANDBACK_LINE)
                        tio.partial = bytearray()
                        tio.discarding = True
                return
            piece = data[start:i]
            start = i + 1
            if tio.discarding:
                tio.discarding = False
                continue
            line = bytes(tio.partial) + piece
            tio.partial = bytearray()
            if len(line) > MAX_HANDBACK_LINE:
                self._warn(tio, "hangar-agent line over %d bytes refused" % MAX_HANDBACK_LINE)
                continue
            if line.strip():
                self._line(tio, line)

    def _line(self, tio: _TurnIO, line: bytes) -> None:
        tio.lines += 1
        if tio.lines > MAX_HANDBACK_LINES:
            self._warn(
                tio,
                "more than %d hangar-agent lines in this turn; the rest is ignored" % MAX_HANDBACK_LINES,
                once="lines",
            )
            return
        kind = "?"
        try:
            try:
                obj = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise Refused("not a JSON line") from None
            if not isinstance(obj, dict):
                raise Refused("not a JSON object")
            raw_kind = obj.get("kind")
            kind = raw_kind[:40] if isinstance(raw_kind, str) else "?"
            if kind not in P.HANDBACK_KINDS:
                raise Refused("unknown kind")
            lid = obj.get("id")
            if lid is not None:
                if not isinstance(lid, str) or len(lid) > 64:
                    raise Refused("bad id")
                if lid in tio.seen_ids:
                    return
                tio.seen_ids.add(lid)
            payload: Dict[str, Any] = getattr(self, "_kind_" + kind)(tio, obj)
        except Refused as exc:
            self._warn(tio, "hangar-agent %s refused: %s" % (kind, exc))
            return
        payload["turn"] = tio.turn
        payload["kind"] = kind
        if lid is not None:
            payload["id"] = lid
        self.emit(P.EV_HANDBACK, payload)

    def _kind_done(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        message = obj.get("message")
        if message is None:
            return {"message": None}
        text, cut = _cap_text(message, "message")
        return {"message": text, "truncated": cut}

    def _kind_progress(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        text, cut = _cap_text(obj.get("text"), "text")
        if not text.strip():
            raise Refused("empty text")
        return {"text": text, "truncated": cut}

    def _kind_ask(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        text, cut = _cap_text(obj.get("question"), "question")
        if not text.strip():
            raise Refused("empty question")
        return {"question": text, "truncated": cut}

    def _kind_result(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        if "file" in obj:
            fd = open_under(tio.path, obj["file"], self.allowed_uids)
            try:
                raw = read_fd(fd, MAX_RESULT * 4)
            finally:
                os.close(fd)
            try:
                value = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise Refused("the file is not JSON") from None
        elif "result" in obj:
            value = obj["result"]
        else:
            raise Refused("no result")
        try:
            size = len(
                json.dumps(
                    value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
                ).encode("utf-8")
            )
        except (ValueError, UnicodeEncodeError, RecursionError):
            raise Refused("not JSON") from None
        if size > MAX_RESULT:
            raise Refused("result JSON is %d bytes, over %d" % (size, MAX_RESULT))
        return {"result": value, "size": size}

    def _kind_artifact(self, tio: _TurnIO, obj: Dict[str, Any]) -> Dict[str, Any]:
        if tio.artifacts >= MAX_ARTIFACTS:
            raise Refused("more than %d artifacts in this turn" % MAX_ARTIFACTS)
        name = obj.get("name")
        rel = obj.get("path")
        if not isinstance(rel, str):
            raise Refused("bad path")
        if name is None:
            name = os.path.basename(rel)
        if not isinstance(name, str) or not name or len(name) > 255 or "/" in name or "\x00" in name:
            raise Refused("bad name")
        fd = open_under(tio.path, rel, self.allowed_uids)
        try:
            if os.fstat(fd).st_size > MAX_ARTIFACT:
                raise Refused("larger than %d bytes" % MAX_ARTIFACT)
            data = read_fd(fd, MAX_ARTIFACT)
        finally:
            os.close(fd)
        tio.artifacts += 1
        out: Dict[str, Any] = {
            "name": name,
            "path": os.path.join(tio.path, os.path.normpath(rel).lstrip("/"))
            if not os.path.isabs(rel)
            else rel,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "inline": len(data) <= MAX_INLINE_ARTIFACT,
        }
        if out["inline"]:
            out["content_b64"] = base64.b64encode(data).decode("ascii")
        return out
