"""`hangar session …`: the REST API from a terminal."""

from __future__ import annotations

import argparse
import time
from typing import Any

from hangar.approvals.rules import POLICIES

from . import approvals as approval_cli
from . import common
from .http import call


def _print_session(s: dict[str, Any]) -> None:
    sb = s.get("sandbox") or {}
    print(
        f"session {s['name']}  {s['phase']}  harness={s['harness']}  env={s['environment']}  "
        f"approvals={s.get('policy') or '-'}  pod={sb.get('pod') or '-'}  connected={sb.get('connected')}"
    )
    if s.get("message"):
        print(f"  {s['message']}")
    if s.get("fork_of"):
        print(f"  forked from {s['fork_of']}")
    sus = s.get("suspended")
    if sus:
        # Governance: which of Tower's approvals it waits on, since when, and what Tower said.
        said = f"; {sus['decision']} by {sus.get('decided_by') or 'Tower'}" if sus.get("decision") else ""
        print(
            f"  suspended ({sus.get('reason')}) since {sus.get('since')}: approval {sus.get('approval')} "
            f"(Tower {sus.get('tower')}) for {sus.get('command') or sus.get('tool')}{said}"
        )
    if s.get("resuming"):
        r = s["resuming"]
        print(f"  resuming with turn {r['turn']}: Tower allowed {r.get('tower')}")
    for t in s.get("turns", []):
        common.print_turn(t, str(t["index"]))
        for st in t.get("steers") or []:
            then = f" -> {st['next_turn']}" if st.get("next_turn") else ""
            print(f"    steer {st['id']} {st['status']}{then}: {st['message'][:200]}")
        for it in t.get("interrupts") or []:
            said = f": {it['message'][:200]}" if it.get("message") else ""
            print(f"    interrupt {it['id']} {it['status']}{said}")
    for a in s.get("pending_approvals", []):
        print(f"  approval {a['id']} waits: {a['tool']} {a.get('command') or ''}")


def cmd_new(a: argparse.Namespace) -> None:
    body: dict[str, Any] = {"name": a.name, "environment": a.env, "harness": a.harness, "message": a.message}
    if a.approvals:
        body["approvals"] = a.approvals
    if getattr(a, "tainted", False):
        body["tainted"] = True
    if a.model:
        body["model"] = a.model
    s = call("POST", "/api/sessions", json=body)
    print(f"session {s['name']} created")
    if a.wait:
        wait_turn(a.name, 1, a.timeout)


def cmd_fork(a: argparse.Namespace) -> None:
    body: dict[str, Any] = {"name": a.name}
    if a.message:
        body["message"] = a.message
    if a.approvals:
        body["approvals"] = a.approvals
    s = call("POST", f"/api/sessions/{a.parent}/fork", json=body)
    print(f"session {s['name']} created, forked from {a.parent}")
    if a.wait and a.message:
        wait_turn(a.name, 1, a.timeout)


def wait_turn(name: str, index: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        ev = call("GET", f"/api/sessions/{name}/events", params={"since": seen})
        for e in ev["events"]:
            common.print_event(e)
        seen = ev["last_seq"]
        s = call("GET", f"/api/sessions/{name}")
        t = next((t for t in s["turns"] if t["index"] == index), None)
        if t and t["phase"] in ("Completed", "Failed", "Interrupted", "NeedsInput"):
            _print_session(s)
            return dict(t)
        time.sleep(0.5)
    raise SystemExit(f"turn {index} of {name} did not finish within {timeout:.0f}s")


def cmd_wait(a: argparse.Namespace) -> None:
    """Follows the session's running (or else its last) turn until it ends."""
    s = call("GET", f"/api/sessions/{a.name}")
    turns = s.get("turns") or []
    if not turns:
        raise SystemExit(f"session {a.name} has no turn to wait for")
    wait_turn(a.name, max(int(t["index"]) for t in turns), a.timeout)


def cmd_send(a: argparse.Namespace) -> None:
    r = call("POST", f"/api/sessions/{a.name}/messages", json={"message": a.message})
    print(f"{r['kind']} {r['turn']['name'] if r['kind'] == 'turn' else r.get('steer', {}).get('id')}")
    if a.wait and r["kind"] == "turn":
        wait_turn(a.name, r["turn"]["index"], a.timeout)


def cmd_get(a: argparse.Namespace) -> None:
    common.show(f"/api/sessions/{a.name}", a.json, _print_session)


def cmd_list(a: argparse.Namespace) -> None:
    for s in call("GET", "/api/sessions")["sessions"]:
        print(
            f"{s['name']:30} {s['phase']:10} {s['harness']:8} {s['environment']:16} turns={s['counters'].get('turns', 0)}"
        )


def cmd_events(a: argparse.Namespace) -> None:
    common.follow_events(f"/api/sessions/{a.name}/events", a.since, a.follow)


def cmd_delete(a: argparse.Namespace) -> None:
    call("DELETE", f"/api/sessions/{a.name}")
    print(f"session {a.name} deleted")


def _find_item(name: str, turn: str, kind: str, item_id: str) -> dict[str, Any] | None:
    s = call("GET", f"/api/sessions/{name}")
    t = next((t for t in s.get("turns", []) if t["name"] == turn), None)
    return next((x for x in (t or {}).get(kind, []) if x["id"] == item_id), None)


def cmd_steer(a: argparse.Namespace) -> None:
    r = call("POST", f"/api/sessions/{a.name}/steer", json={"message": a.message})
    st = r["steer"]
    print(f"steer {st['id']} {st['status']} (turn {r['turn']['name']})")
    if a.klass:
        c = call("POST", f"/api/sessions/{a.name}/steers/{st['id']}/class", json={"class": a.klass})
        print(f"steer {st['id']} classified {c['steer']['class']}")
    if a.wait:
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            cur = _find_item(a.name, r["turn"]["name"], "steers", st["id"])
            if cur and cur["status"] != "sending":
                extra = f": it starts {cur['next_turn']}" if cur.get("next_turn") else ""
                print(f"steer {st['id']} {cur['status']}{extra}")
                return
            time.sleep(0.3)
        raise SystemExit(f"steer {st['id']} still sending after {a.timeout:.0f}s")


def cmd_withdraw(a: argparse.Namespace) -> None:
    common.withdraw(f"/api/sessions/{a.name}", a.steer_id)


def cmd_interrupt(a: argparse.Namespace) -> None:
    body = {"message": a.message} if a.message else None
    r = call("POST", f"/api/sessions/{a.name}/interrupt", json=body)
    it, turn = r["interrupt"], r["turn"]
    print(f"interrupt {it['id']} sent (turn {turn['name']})")
    if not a.wait:
        return
    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        cur = _find_item(a.name, turn["name"], "interrupts", it["id"])
        if cur and cur["status"] not in ("requested", "sent"):
            line = f"interrupt {it['id']} {cur['status']}"
            if cur.get("message_status") == "delivered":
                line += ": the turn goes on with the message"
            elif cur.get("next_turn"):
                line += f": the message starts {cur['next_turn']}"
            print(line + (f" ({cur['reason']})" if cur.get("reason") else ""))
            return
        time.sleep(0.3)
    raise SystemExit(f"interrupt {it['id']} not confirmed after {a.timeout:.0f}s")


def cmd_classify(a: argparse.Namespace) -> None:
    r = call("POST", f"/api/sessions/{a.name}/steers/{a.steer_id}/class", json={"class": a.klass})
    item = r.get("steer") or r.get("interrupt") or {}
    print(f"{'steer' if 'steer' in r else 'interrupt'} {a.steer_id} classified {item.get('class')}")


def cmd_approvals(a: argparse.Namespace) -> None:
    approval_cli.run(
        a,
        approval_cli.Scope(
            base=f"/api/sessions/{a.name}/approvals",
            command=f"hangar session approvals {a.name}",
            heading=lambda r: (
                f"session {r['session']}  approvals={r['policy']}" + ("  tainted" if r.get("tainted") else "")
            ),
        ),
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("session", help="work with sessions")
    ss = p.add_subparsers(dest="session_cmd", required=True)
    n = ss.add_parser("new", help="create a session and start its first turn")
    n.add_argument("name")
    n.add_argument("message", type=common.message_arg)
    common.add_start_options(n)
    n.add_argument("--wait", action="store_true", help="follow the first turn until it ends")
    n.add_argument("--timeout", type=float, default=600)
    n.set_defaults(func=cmd_new)
    f = ss.add_parser(
        "fork",
        help="a new session from another: its conversation, workspace, approvals policy and taint",
    )
    f.add_argument("parent")
    f.add_argument("name")
    f.add_argument("message", nargs="?", help="the fork's first message", type=common.message_arg)
    f.add_argument("--approvals", choices=POLICIES, help="instead of the parent's")
    f.add_argument("--wait", action="store_true", help="follow the first turn until it ends")
    f.add_argument("--timeout", type=float, default=600)
    f.set_defaults(func=cmd_fork)
    s = ss.add_parser("send", help="send a message: a new turn, or a steer while a turn runs")
    s.add_argument("name")
    s.add_argument("message", type=common.message_arg)
    s.add_argument("--wait", action="store_true")
    s.add_argument("--timeout", type=float, default=600)
    s.set_defaults(func=cmd_send)
    wt = ss.add_parser("wait", help="follow the running turn (else the last one) until it ends")
    wt.add_argument("name")
    wt.add_argument("--timeout", type=float, default=600)
    wt.set_defaults(func=cmd_wait)
    common.add_get(ss, "name", "show a session and its turns, with their steers and interrupts", cmd_get)
    ls = ss.add_parser("list", help="list sessions")
    ls.set_defaults(func=cmd_list)
    common.add_events(ss, "name", "the session's activity", cmd_events)
    d = ss.add_parser("delete", help="delete a session, its sandbox and its turns")
    d.add_argument("name")
    d.set_defaults(func=cmd_delete)
    st = ss.add_parser("steer", help="add a message to the running turn (Claude Code, Codex)")
    st.add_argument("name")
    st.add_argument("message", type=common.message_arg)
    common.add_class_option(st)
    st.add_argument("--wait", action="store_true", help="wait until it is delivered or queued")
    st.add_argument("--timeout", type=float, default=600)
    st.set_defaults(func=cmd_steer)
    common.add_withdraw(ss, "name", cmd_withdraw)
    it = ss.add_parser("interrupt", help="stop the running turn; with a message, go on with it")
    it.add_argument("name")
    it.add_argument("message", nargs="?", type=common.message_arg)
    it.add_argument("--wait", action="store_true", help="wait until the driver confirms (or hangar kills it)")
    it.add_argument("--timeout", type=float, default=120)
    it.set_defaults(func=cmd_interrupt)
    c = ss.add_parser("classify", help="say what a steer or interrupt was")
    c.add_argument("name")
    c.add_argument("steer_id")
    common.add_class_argument(c)
    c.set_defaults(func=cmd_classify)
    ap = ss.add_parser(
        "approvals",
        help="what the agent waits on; allow or deny it",
        description="Without an option: the policy, pending and recent approvals. --watch prints each new "
        "request (and how it was resolved) until Ctrl-C.",
    )
    ap.add_argument("name")
    approval_cli.add_arguments(ap)
    ap.set_defaults(func=cmd_approvals)
