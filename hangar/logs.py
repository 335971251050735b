"""Logs of the operator and the api: one JSON object a line on stderr (or text), at HANGAR_LOG_LEVEL, naming
the resource a record is about.

A record is about a resource when it carries ``k8s_ref`` (kind, namespace, name): kopf's per-object logger
(the ``logger`` a kopf handler is given) sets it on everything it logs, and hangar's own code passes
``extra=logs.ref(...)``. JSON records then carry ``kind``, ``namespace`` and ``name`` as fields, so a log
query can select one session's lines.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from .config import LogFormat, LogLevel

# Libraries whose INFO lines are one per request: noise unless debugging.
_CHATTY = ("kubernetes_asyncio", "httpx", "httpcore", "aiohttp.access")


def ref(namespace: str | None, name: str | None, kind: str | None = None) -> dict[str, Any]:
    """``extra=`` for a log call about one resource (the same key kopf's per-object logger uses)."""
    return {"k8s_ref": {"kind": kind, "namespace": namespace, "name": name}}


def _about(record: logging.LogRecord) -> dict[str, str]:
    found = getattr(record, "k8s_ref", None)
    if not isinstance(found, dict):
        return {}
    return {k: str(found[k]) for k in ("kind", "namespace", "name") if found.get(k)}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the resource's kind/namespace/name, and the
    exception's traceback as one string field."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_about(record),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The human-readable line, with ``[namespace/name]`` before the message of a record about a resource."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        about = _about(record)
        if about.get("name"):
            where = f"{about['namespace']}/{about['name']}" if about.get("namespace") else about["name"]
            record = logging.makeLogRecord({**record.__dict__, "message": f"[{where}] {record.message}"})
        return super().formatMessage(record)


def configure(level: LogLevel = "info", fmt: LogFormat = "json", stream: TextIO | None = None) -> None:
    """Send every record at ``level`` or above to ``stream`` (stderr) in ``fmt``, replacing what the root
    logger had (so kopf's, uvicorn's and hangar's records come out alike)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # Python's warnings too, as records rather than bare stderr lines
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
