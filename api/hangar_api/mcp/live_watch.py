"""``hangar://sandboxes/<session>/watch?path=<dir>``: file changes under a directory of a session's
workspace, while someone subscribes.

``<session>`` names the session whose sandbox it is (a sandbox's pod changes from run to run; the session
stays). ``path`` is relative to the workspace (or absolute under ``/workspace``); one that leaves it is
refused with -32602 and the reason, before anything starts. The first subscriber starts the watch: the
driver scans the directory every 0.5 s (``WATCH_INTERVAL``) and sends what changed; the last one to go
stops it. Each change notice marks the URI changed (subscribers get ``notifications/resources/updated``,
at most one every 250 ms per URI); reading the resource returns the changes kept (the newest 500), each
with a ``seq``, and ``?since=SEQ`` only the later ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity

from hangar.models.base import NAME_MAX

from .. import live_client
from ..auth import Caller
from . import common
from .common import Hub
from .resources import _guard, parse_since

log = logging.getLogger("hangar.api.mcp.watch")

WORKSPACE = "/workspace"
KEPT = 500  # changes a watch keeps for readers
START_TIMEOUT = 20.0  # seconds the driver has for its first scan
UNUSED_CHECK = 30.0  # seconds between looks at whether anyone still subscribes
_URI = re.compile(r"^hangar://sandboxes/([a-z][-a-z0-9]*)/watch(\?.*)?$")


def parse(uri: str) -> tuple[str, str] | None:
    """(session, path relative to the workspace) of a watch URI; None if it is not one. Raises ToolError
    (invalid) for a path that is missing or leaves the workspace."""
    m = _URI.match(uri)
    if m is None or len(m.group(1)) > NAME_MAX:
        return None
    paths = parse_qs(urlsplit(uri).query, keep_blank_values=True).get("path", [])
    if len(paths) != 1 or not paths[0]:
        raise ToolError(f"invalid: {uri!r}: give one directory as ?path=<dir> (relative to the workspace)")
    return m.group(1), relative(paths[0])


def relative(path: str) -> str:
    """``path`` as a normalised path relative to the workspace (``.`` for the workspace itself)."""
    if "\x00" in path:
        raise ToolError("invalid: path: a NUL byte")
    full = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if full != WORKSPACE and not full.startswith(WORKSPACE + "/"):
        raise ToolError(f"invalid: path {path!r} is outside the workspace ({WORKSPACE})")
    return posixpath.relpath(full, WORKSPACE)


def canonical(session: str, path: str) -> str:
    return f"hangar://sandboxes/{session}/watch?path={quote(path, safe='/')}"


@dataclass
class _Watch:
    session: str
    path: str
    changes: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=KEPT))
    seq: int = 0
    watching: bool = False
    ended: str | None = None
    task: asyncio.Task[None] | None = None
    started: asyncio.Future[str | None] | None = None  # None: watching; else why it could not start


class Watches:
    """The running watches, one per canonical URI. ``changed(uri)`` notifies its subscribers;
    ``subscribed(uri)`` says whether anyone still does."""

    def __init__(self, hub: Hub, changed: Callable[[str], None], subscribed: Callable[[str], bool]) -> None:
        self.hub = hub
        self.changed = changed
        self.subscribed = subscribed
        self._watches: dict[str, _Watch] = {}

    async def authorize(self, who: Caller, session: str, path: str) -> None:
        """The caller may read the session, and its watch runs (started now when it doesn't): a refusal is a
        ToolError with the reason."""
        await common.get_session(self.hub, who, session)
        uri = canonical(session, path)
        w = self._watches.get(uri)
        if w is None or w.ended is not None:
            w = self._watches[uri] = _Watch(session, path)
            w.started = asyncio.get_running_loop().create_future()
            w.task = asyncio.create_task(self._run(uri, w))
        assert w.started is not None
        try:
            why = await asyncio.wait_for(asyncio.shield(w.started), START_TIMEOUT)
        except TimeoutError:
            why = "unavailable: the sandbox did not start the watch in time"
        if why is not None:
            self.stop(uri)
            raise ToolError(why)

    def read(self, session: str, path: str, since: int | None) -> dict[str, Any]:
        w = self._watches.get(canonical(session, path))
        if w is None:
            return {
                "session": session,
                "path": path,
                "watching": False,
                "changes": [],
                "last_seq": since or 0,
                "note": "subscribe to this URI to watch the directory",
            }
        changes = [c for c in w.changes if since is None or c["seq"] > since]
        return {
            "session": session,
            "path": path,
            "watching": w.watching and w.ended is None,
            "ended": w.ended,
            "changes": changes,
            "last_seq": w.seq,
        }

    def stop(self, uri: str) -> None:
        w = self._watches.pop(uri, None)
        if w is not None and w.task is not None:
            w.task.cancel()

    def stop_all(self) -> None:
        for uri in list(self._watches):
            self.stop(uri)

    async def _run(self, uri: str, w: _Watch) -> None:
        frames = live_client.frames(self.hub.db, w.session, "watch", {"action": "start", "path": w.path})
        assert w.started is not None
        reaper = asyncio.create_task(self._reap(uri))
        try:
            async for frame in frames:
                kind = frame.get("kind")
                if kind == "result":
                    if not frame.get("ok"):
                        w.ended = str(frame.get("error"))
                        if not w.started.done():
                            w.started.set_result(f"invalid: {w.ended}")
                        return
                    w.watching = True
                    if not w.started.done():
                        w.started.set_result(None)
                elif kind == "changes":
                    for change in frame.get("changes", []):
                        w.seq += 1
                        w.changes.append({"seq": w.seq, **change})
                    if frame.get("more"):
                        w.seq += 1
                        w.changes.append({"seq": w.seq, "change": "more", "count": frame["more"]})
                    self.changed(uri)
                elif kind == "ended":
                    w.ended = str(frame.get("reason") or "ended")
                    if not w.started.done():
                        w.started.set_result(f"unavailable: {w.ended}")
                    self.changed(uri)
                    return
            w.ended = "the watch's stream ended"
        except live_client.LiveError as e:
            w.ended = e.text
            if not w.started.done():
                w.started.set_result(e.text)
        except asyncio.CancelledError:
            w.ended = "stopped"
            raise
        except Exception as e:  # the watch ends with the reason; the api goes on
            log.exception("watch %s failed", uri)
            w.ended = f"failed: {type(e).__name__}"
        finally:
            reaper.cancel()
            if not w.started.done():
                w.started.set_result(f"unavailable: {w.ended}")
            with contextlib.suppress(Exception):
                await frames.aclose()
            if w.watching and w.ended != "stopped":
                self.changed(uri)  # subscribers read that it ended

    async def _reap(self, uri: str) -> None:
        """Stop the watch once nobody subscribes (a subscription that never came, or the last one went)."""
        while True:
            await asyncio.sleep(UNUSED_CHECK)
            if not self.subscribed(uri):
                self.stop(uri)
                return


def register_watch(
    server: MCPServer[Any], hub: Hub, caller: Callable[[Any], Caller], watches: Watches
) -> None:
    # ``path`` is checked here (relative()) and by the driver (symlinks resolved), with the reason; the
    # SDK's own check would refuse ``..`` and absolute paths as an unknown resource.
    @server.resource(
        "hangar://sandboxes/{session}/watch{?path,since}",
        mime_type="application/json",
        security=ResourceSecurity(exempt_params={"path"}),
    )
    async def watch_resource(
        session: str, ctx: Context[Any, Any], path: str | None = None, since: str | None = None
    ) -> str:
        """File changes under a directory of the session's workspace (?path=<dir>, relative to it), while
        you subscribe to this URI: each {seq, path, change: created|modified|deleted}; ?since=SEQ only the
        later ones. A path outside the workspace is refused (-32602)."""

        async def read() -> dict[str, Any]:
            where = relative(path or "")
            if not path:
                raise ToolError("invalid: give one directory as ?path=<dir> (relative to the workspace)")
            after = parse_since(since)
            await common.get_session(hub, caller(ctx), session)
            return watches.read(session, where, after)

        return await _guard(read)
