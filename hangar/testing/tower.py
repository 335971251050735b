"""A Tower simulator: the part of Tower hangar talks to, as a real HTTP server on 127.0.0.1.

* The decisions API hangar calls (``Authorization: Bearer <credential>`` checked on every request):
  ``POST /v1/approvals`` files a governed call and answers its receipt ``{"id": "A-1", "status":
  "pending"}`` (201; with an ``Idempotency-Key`` seen before, that call's receipt again, 200); ``GET /v1/decisions/{id}`` answers ``{"id", "status": pending|allowed|denied|withdrawn,
  "decided_by", "reason", "decided_at"}``; ``POST /v1/approvals/{id}/withdraw``.
* An outbox that delivers events to hangar's ``POST /api/governance/events`` the way Tower's does: each
  body signed ``X-AW-Signature: t=…,v1=…`` with every secret it holds (several while one rotates), with
  ``X-AW-Event-Id``, retried with backoff until hangar answers 2xx (a 200 ``ignored`` included).

A test (or ``hangar dev up --tower``) decides: ``tower.decide("A-1", "allowed", by="lee@acme.test")``
queues ``approval.decided``; ``tower.stop_run(session="s", by=…, reason=…)`` queues ``run.stop``;
``tower.available = False`` makes the decisions API answer 503, as a Tower that is down would.

Command line: ``python -m hangar.testing.tower --webhook URL --secret S --credential C [--port N]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from hangar.governance import signature

from .json_handler import JsonHandler

# What makes a repeat of a filing the same call (the taint or who started it may have grown meanwhile).
SAME_CALL = ("tool", "args_hash", "namespace", "session", "turn", "run", "approval")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Delivery:
    event: dict[str, Any]
    attempts: list[int | str] = field(default_factory=list)  # hangar's status codes, or the error
    done: threading.Event = field(default_factory=threading.Event)
    answer: bytes = b""  # hangar's body of the 2xx that ended it

    @property
    def final(self) -> int | str | None:
        return self.attempts[-1] if self.done.is_set() and self.attempts else None


class TowerSimulator:
    def __init__(
        self,
        *,
        credential: str = "tower-credential",
        secrets: Sequence[bytes] = (b"tower-webhook-secret",),
        webhook_url: str | None = None,
        retry_delays: Sequence[float] = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0),
        max_attempts: int = 12,
    ) -> None:
        self.credential = credential
        self.secrets = list(secrets)
        self.webhook_url = webhook_url
        self.retry_delays = list(retry_delays)
        self.max_attempts = max_attempts
        self.available = True
        self.approvals: dict[str, dict[str, Any]] = {}
        self.keys: dict[str, tuple[str, dict[str, Any]]] = {}  # idempotency key → (receipt, the call)
        self.filed: list[dict[str, Any]] = []
        # (status, by): every call filed is decided at once, and that decision delivered before the receipt
        # (no approval.created is sent for it).
        self.decide_on_filing: tuple[str, str] | None = None
        self.withdrawn: list[tuple[str, str]] = []
        self.deliveries: dict[str, Delivery] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._outbox: queue.Queue[Delivery | None] = queue.Queue()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- running ----------------------------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        handler = type("Handler", (_Handler,), {"tower": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        for target in (self._server.serve_forever, self._deliver_forever):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._outbox.put(None)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- what Tower's people do ---------------------------------------------------------------------------
    def decide(self, approval_id: str, status: str, by: str = "lee@acme.test", reason: str = "") -> Delivery:
        with self._lock:
            a = self.approvals.setdefault(approval_id, {"id": approval_id, "status": "pending"})
            a.update(status=status, decided_by=by, reason=reason, decided_at=_now())
            corr = dict(a.get("corr") or {})
        return self.emit(
            {"kind": "approval.decided", "approval": {"id": approval_id, "decided_by": by}, "corr": corr}
        )

    def stop_run(
        self,
        *,
        session: str | None = None,
        job: str | None = None,
        run: str | None = None,
        by: str = "lee@acme.test",
        reason: str = "",
        corr: dict[str, Any] | None = None,
    ) -> Delivery:
        body: dict[str, Any] = {"stopped_by": by, "reason": reason}
        body.update({k: v for k, v in (("session", session), ("job", job), ("run", run)) if v})
        return self.emit({"kind": "run.stop", "run": body, "corr": corr or {"source": "hangar"}})

    def emit(self, event: dict[str, Any], *, event_id: str | None = None) -> Delivery:
        """Queues ``event`` (given an id and a time if it has none) for delivery to hangar."""
        ev = {"id": event_id or event.get("id") or f"ev-{uuid.uuid4().hex}", "at": _now(), **event}
        d = Delivery(ev)
        with self._lock:
            self.deliveries[ev["id"]] = d
        self._outbox.put(d)
        return d

    # --- the outbox ---------------------------------------------------------------------------------------
    def _deliver_forever(self) -> None:
        while (d := self._outbox.get()) is not None:
            threading.Thread(target=self._deliver, args=(d,), daemon=True).start()

    def _deliver(self, d: Delivery) -> None:
        body = json.dumps(d.event).encode()
        for attempt in range(self.max_attempts):
            if not self.webhook_url:
                d.attempts.append("no webhook configured")
                break
            req = urllib.request.Request(
                self.webhook_url,
                data=body,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    # Signed afresh at each attempt, as a retry a minute later must be fresh too.
                    "X-AW-Signature": signature.header(self.secrets, int(time.time()), body),
                    "X-AW-Event-Id": d.event["id"],
                },
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    d.attempts.append(r.status)
                    d.answer = r.read()
                    break
            except urllib.error.HTTPError as e:
                d.attempts.append(e.code)
                if e.code < 500 and e.code not in (404, 408, 429):
                    break  # hangar refused it for good (401, 400): retrying the same bytes changes nothing
            except OSError as e:
                d.attempts.append(f"{type(e).__name__}: {e}")
            time.sleep(self.retry_delays[min(attempt, len(self.retry_delays) - 1)])
        d.done.set()

    # --- the decisions API --------------------------------------------------------------------------------
    def file(self, call: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, Any]]:
        """Files a call: (201, its receipt). With an idempotency key seen before, the same receipt again
        (200), nothing filed twice; the same key with another call is refused (422), as Tower does."""
        with self._lock:
            if key is not None and key in self.keys:
                aid, first = self.keys[key]
                if any(first.get(k) != call.get(k) for k in SAME_CALL):
                    return 422, {"error": "this Idempotency-Key was used for another call"}
                return 200, {"id": aid, "status": self.approvals[aid]["status"]}
            aid = f"A-{next(self._ids)}"
            if key is not None:
                self.keys[key] = (aid, call)
            corr = {"source": "hangar", "session": call.get("session"), "job": call.get("job")}
            corr["turn"] = call.get("turn")
            self.approvals[aid] = {"id": aid, "status": "pending", "call": call, "corr": corr}
            self.filed.append({"id": aid, **call})
        early = self.decide_on_filing
        if early is not None:
            # Its person decides at once and the outbox delivers that before the filing's answer (pending, as
            # composed before the decision) reaches hangar: a "decided" before hangar knows the receipt.
            # Its approval.created is not sent at all: only the decision hangar kept decides the call then.
            d = self.decide(aid, early[0], by=early[1])
            d.done.wait(30)
            return 201, {"id": aid, "status": "pending"}
        self.emit({"kind": "approval.created", "approval": {"id": aid}, "corr": corr})
        return 201, {"id": aid, "status": "pending"}

    def decision(self, approval_id: str) -> dict[str, Any] | None:
        with self._lock:
            a = self.approvals.get(approval_id)
            if a is None:
                return None
            return {k: a.get(k) for k in ("id", "status", "decided_by", "reason", "decided_at")}

    def listing(self) -> list[dict[str, Any]]:
        """Every approval filed here, newest first: its id, status and the call (for a person to decide)."""
        with self._lock:
            out = []
            for a in reversed(list(self.approvals.values())):
                call = a.get("call") or {}
                out.append(
                    {
                        "id": a["id"],
                        "status": a["status"],
                        "session": call.get("session"),
                        "tool": call.get("tool"),
                        "command": call.get("command"),
                    }
                )
            return out

    def withdraw(self, approval_id: str, reason: str) -> bool:
        with self._lock:
            a = self.approvals.get(approval_id)
            if a is None:
                return False
            if a["status"] == "pending":
                a.update(status="withdrawn", reason=reason, decided_at=_now())
            self.withdrawn.append((approval_id, reason))
            return True


class _Handler(JsonHandler):
    tower: TowerSimulator

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") != f"Bearer {self.tower.credential}":
            self.send_json(401, {"error": "unauthorised"})
            return False
        if not self.tower.available:
            self.send_json(503, {"error": "Tower is unavailable"})
            return False
        return True

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        out = json.loads(self.rfile.read(n) or b"{}")
        return out if isinstance(out, dict) else {}

    def do_GET(self) -> None:
        if not self._authorised():
            return
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 3 and parts[:2] == ["v1", "decisions"]:
            got = self.tower.decision(unquote(parts[2]))
            self.send_json(200, got) if got else self.send_json(404, {"error": "no such approval"})
        elif parts == ["sim", "approvals"]:
            self.send_json(200, {"approvals": self.tower.listing()})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self) -> None:
        if not self._authorised():
            return
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts == ["v1", "approvals"]:
            self.send_json(*self.tower.file(self._body(), self.headers.get("Idempotency-Key")))
        elif len(parts) == 4 and parts[:2] == ["v1", "approvals"] and parts[3] == "withdraw":
            ok = self.tower.withdraw(unquote(parts[2]), str(self._body().get("reason", "")))
            self.send_json(200, {"ok": True}) if ok else self.send_json(404, {"error": "no such approval"})
        elif len(parts) == 3 and parts[:2] == ["sim", "decide"]:
            # What Tower's people do, for `hangar dev tower allow|deny` (not part of Tower's API).
            b = self._body()
            status = str(b.get("status", ""))
            if status not in ("allowed", "denied") or unquote(parts[2]) not in self.tower.approvals:
                self.send_json(400, {"error": "status must be allowed or denied, for an approval filed here"})
                return
            d = self.tower.decide(
                unquote(parts[2]), status, str(b.get("by") or "dev"), str(b.get("reason") or "")
            )
            self.send_json(200, {"event": d.event["id"]})
        elif parts == ["sim", "stop"]:
            b = self._body()
            d = self.tower.stop_run(
                session=b.get("session"),
                job=b.get("job"),
                by=str(b.get("by") or "dev"),
                reason=str(b.get("reason") or ""),
            )
            self.send_json(200, {"event": d.event["id"]})
        else:
            self.send_json(404, {"error": "not found"})


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hangar.testing.tower", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--webhook", required=True, help="hangar's POST /api/governance/events URL")
    p.add_argument("--secret", action="append", required=True, help="a webhook signing secret (repeatable)")
    p.add_argument("--credential", required=True, help="the bearer credential hangar presents")
    a = p.parse_args(argv)
    tower = TowerSimulator(
        credential=a.credential, secrets=[s.encode() for s in a.secret], webhook_url=a.webhook
    )
    print(f"listening on {tower.start(a.port)}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        tower.stop()


if __name__ == "__main__":
    main()
