"""The client side of Codex app-server's JSON-RPC over stdio: our request ids and the answers waited for.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Dict, List, Optional, Tuple

from .process import StdinWriter

NO_ACTIVE_TURN = -32600  # turn/steer's error when the turn it names has ended


class RpcError(Exception):
    def __init__(self, code: Optional[int], message: str) -> None:
        Exception.__init__(self, "%s (%s)" % (message, code))
        self.code = code
        self.message = message


class Rpc:
    """Client side of the JSON-RPC connection: our ids, and the answers waited for."""

    def __init__(self, writer: StdinWriter) -> None:
        self.writer = writer
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.waiting: Dict[Any, List[Any]] = {}  # id -> [threading.Event, message]
        self.closed = False

    def send(self, method: str, params: Dict[str, Any]) -> Tuple[Any, List[Any]]:
        slot: List[Any] = [threading.Event(), None]
        with self.lock:
            rid = next(self.ids)
            if self.closed:
                slot[1] = {"error": {"code": None, "message": "codex app-server has exited"}}
                slot[0].set()
                return rid, slot
            self.waiting[rid] = slot
        if not self.writer.write({"id": rid, "method": method, "params": params}):
            self.resolve({"id": rid, "error": {"code": None, "message": "codex app-server stdin is closed"}})
        return rid, slot

    def call(self, method: str, params: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        _rid, slot = self.send(method, params)
        return self.wait(slot, method, timeout)

    @staticmethod
    def wait(slot: List[Any], method: str, timeout: float) -> Dict[str, Any]:
        if not slot[0].wait(timeout):
            raise RpcError(None, "%s: no answer from codex in %ss" % (method, timeout))
        msg = slot[1] or {}
        if "error" in msg:
            err = msg.get("error") or {}
            raise RpcError(err.get("code"), "%s: %s" % (method, err.get("message")))
        result = msg.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        msg: Dict[str, Any] = {"method": method}
        if params is not None:
            msg["params"] = params
        self.writer.write(msg)

    def resolve(self, msg: Dict[str, Any]) -> None:
        with self.lock:
            slot = self.waiting.pop(msg.get("id"), None)
        if slot is not None:
            slot[1] = msg
            slot[0].set()

    def fail_all(self) -> None:
        with self.lock:
            self.closed = True
            waiting, self.waiting = self.waiting, {}
        for slot in waiting.values():
            slot[1] = {"error": {"code": None, "message": "codex app-server has exited"}}
            slot[0].set()
