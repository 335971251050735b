"""`hangar session …`: the REST API from a terminal."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import httpx

from .context import load


class ApiError(SystemExit):
    pass


def client() -> httpx.Client:
    ctx = load()
    return httpx.Client(base_url=ctx.api_url, headers={"Authorization": f"Bearer {ctx.token}"}, timeout=30)


def call(method: str, path: str, **kw: Any) -> Any:
    with client() as c:
        r = c.request(method, path, **kw)
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail")
        except Exception:
            detail = r.text
        if isinstance(detail, list):  # FastAPI validation errors
            detail = "; ".join(
                f"{'.'.join(str(x) for x in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail
            )
        print(f"error {r.status_code}: {detail}", file=sys.stderr)
        raise ApiError(1)
    return r.json()


def _print_session(s: dict[str, Any]) -> None:
    sb = s.get("sandbox") or {}
    print(
        f"session {s['name']}  {s['phase']}  harness={s['harness']}  env={s['environment']}  "
        f"approvals={s.get('policy') or '-'}  pod={sb.get('pod') or '-'}  connected={sb.get('connected')}"
    )
    if s.get("message"):
        print(f"  {s['message']}")
    for t in s.get("turns", []):
        line = f"  turn {t['index']}: {t['phase']}"
        if t.get("exit_status") is not None:
            line += f" (exit {t['exit_status']})"
        print(line)
        print(f"    > {t['message'][:200]}")
        if t.get("summary"):
            print(f"    < {t['summary'][:500]}")
        if t.get("reason"):
            print(f"    ! {t['reason'][:500]}")
    for a in s.get("pending_approvals", []):
        print(f"  approval {a['id']} waits: {a['tool']} {a.get('command') or ''}")


def cmd_new(a: argparse.Namespace) -> None:
    body: dict[str, Any] = {"name": a.name, "environment": a.env, "harness": a.harness, "message": a.message}
    if a.approvals:
        body["approvals"] = a.approvals
    if a.model:
        body["model"] = a.model
    s = call("POST", "/api/sessions", json=body)
    print(f"session {s['name']} created")
    if a.wait:
        wait_turn(a.name, 1, a.timeout)


def wait_turn(name: str, index: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        ev = call("GET", f"/api/sessions/{name}/events", params={"since": seen})
        for e in ev["events"]:
            print_event(e)
        seen = ev["last_seq"]
        s = call("GET", f"/api/sessions/{name}")
        t = next((t for t in s["turns"] if t["index"] == index), None)
        if t and t["phase"] in ("Completed", "Failed", "Interrupted", "NeedsInput"):
            _print_session(s)
            return dict(t)
        time.sleep(0.5)
    raise SystemExit(f"turn {index} of {name} did not finish within {timeout:.0f}s")


def print_event(e: dict[str, Any]) -> None:
    kind = e.get("kind")
    payload = e.get("payload", e)
    detail = ""
    if kind == "text":
        detail = payload.get("text", "")
    elif kind == "tool_use":
        detail = f"{payload.get('tool')} {json.dumps(payload.get('input'))[:300]}"
    elif kind == "turn_ended":
        detail = f"{payload.get('outcome')} {payload.get('summary', '')[:300]}"
    else:
        detail = json.dumps({k: v for k, v in payload.items() if k not in ("seq", "kind", "at", "turn")})[
            :300
        ]
    print(f"[{e.get('seq')}] {e.get('turn') or '-'} {kind}: {detail}")


def cmd_send(a: argparse.Namespace) -> None:
    r = call("POST", f"/api/sessions/{a.name}/messages", json={"message": a.message})
    print(f"{r['kind']} {r['turn']['name'] if r['kind'] == 'turn' else r.get('steer', {}).get('id')}")
    if a.wait and r["kind"] == "turn":
        wait_turn(a.name, r["turn"]["index"], a.timeout)


def cmd_get(a: argparse.Namespace) -> None:
    s = call("GET", f"/api/sessions/{a.name}")
    if a.json:
        print(json.dumps(s, indent=2))
    else:
        _print_session(s)


def cmd_list(a: argparse.Namespace) -> None:
    for s in call("GET", "/api/sessions")["sessions"]:
        print(
            f"{s['name']:30} {s['phase']:10} {s['harness']:8} {s['environment']:16} turns={s['counters'].get('turns', 0)}"
        )


def cmd_events(a: argparse.Namespace) -> None:
    seen = a.since
    while True:
        ev = call("GET", f"/api/sessions/{a.name}/events", params={"since": seen})
        for e in ev["events"]:
            print_event(e)
        seen = ev["last_seq"]
        if not a.follow:
            return
        time.sleep(0.5)


def cmd_delete(a: argparse.Namespace) -> None:
    call("DELETE", f"/api/sessions/{a.name}")
    print(f"session {a.name} deleted")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("session", help="work with sessions")
    ss = p.add_subparsers(dest="session_cmd", required=True)
    n = ss.add_parser("new", help="create a session and start its first turn")
    n.add_argument("name")
    n.add_argument("message")
    n.add_argument("-e", "--env", required=True, help="the Environment to run in")
    n.add_argument("--harness", default="claude", choices=["claude", "codex", "pi", "antigravity"])
    n.add_argument("--approvals", choices=["auto", "ask", "deny-risky", "governed"])
    n.add_argument("--model")
    n.add_argument("--wait", action="store_true", help="follow the first turn until it ends")
    n.add_argument("--timeout", type=float, default=600)
    n.set_defaults(func=cmd_new)
    s = ss.add_parser("send", help="send a message: a new turn, or a steer while a turn runs")
    s.add_argument("name")
    s.add_argument("message")
    s.add_argument("--wait", action="store_true")
    s.add_argument("--timeout", type=float, default=600)
    s.set_defaults(func=cmd_send)
    g = ss.add_parser("get", help="show a session and its turns")
    g.add_argument("name")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_get)
    ls = ss.add_parser("list", help="list sessions")
    ls.set_defaults(func=cmd_list)
    e = ss.add_parser("events", help="the session's activity")
    e.add_argument("name")
    e.add_argument("--since", type=int, default=0)
    e.add_argument("-f", "--follow", action="store_true")
    e.set_defaults(func=cmd_events)
    d = ss.add_parser("delete", help="delete a session, its sandbox and its turns")
    d.add_argument("name")
    d.set_defaults(func=cmd_delete)
