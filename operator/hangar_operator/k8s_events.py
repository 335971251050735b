"""Kubernetes Events for what a person running ``kubectl describe`` wants to see.

Reasons are CamelCase, types ``Normal`` or ``Warning``; the involved object is the hangar resource. Posting an
Event is best effort: the status already holds what happened, so a failed post is logged, never raised.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Literal

from hangar.kube import Kube
from hangar.models.base import iso

log = logging.getLogger("hangar.operator.events")

EventType = Literal["Normal", "Warning"]
COMPONENT = "hangar-operator"


class Recorder:
    def __init__(self) -> None:
        self.instance = os.environ.get("HOSTNAME") or socket.gethostname()
        self.posted = 0

    def body(self, obj: dict[str, Any], type_: EventType, reason: str, message: str) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        now = iso()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'hangar')}.",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": f"hangar.dev/{COMPONENT}",
            "reportingInstance": self.instance[:128],
        }

    async def emit(
        self, kube: Kube, obj: dict[str, Any] | None, type_: EventType, reason: str, message: str
    ) -> None:
        if obj is None or not (obj.get("metadata") or {}).get("uid"):
            return
        try:
            await kube.create_core("events", self.body(obj, type_, reason, message))
            self.posted += 1
        except Exception as e:  # the status holds what happened; an Event is a courtesy on top
            log.warning("event %s on %s not posted: %s", reason, (obj.get("metadata") or {}).get("name"), e)
