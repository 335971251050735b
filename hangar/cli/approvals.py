"""`hangar session approvals` and `hangar job approvals`: list, watch and decide, on either route family.

The two differ only in the route (``/api/sessions/{name}/approvals`` or ``/api/jobs/{id}/approvals``), the
listing's first line, and when a watch ends (a job's ends with the job; a session's on Ctrl-C)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .http import call


@dataclass(frozen=True)
class Scope:
    base: str  # the approvals route
    command: str  # how to answer, e.g. "hangar session approvals api-fix"
    heading: Callable[[dict[str, Any]], str]  # the listing's first line, from the GET answer
    finished: Callable[[dict[str, Any]], str | None] = lambda _: None  # a watch ends with this line
    show_session: bool = False  # a job's approvals come from several attempt sessions


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--watch", action="store_true", help="keep printing new requests")
    ap.add_argument("--allow", metavar="ID", help="allow this call")
    ap.add_argument("--deny", metavar="ID", help="deny this call (the agent is told, with --message)")
    ap.add_argument("--allow-always", metavar="ID", help="allow calls like this one for the rest of the turn")
    ap.add_argument("-m", "--message", help="with --deny: what the agent is told")
    ap.add_argument("--recent", type=int, default=10, help="how many recent approvals to show")
    ap.add_argument("--interval", type=float, default=1.0, help="--watch: seconds between looks")
    ap.add_argument("--json", action="store_true")


def print_approval(a: dict[str, Any], show_session: bool = False) -> None:
    head = f"{a['id']}  {a['phase']:9}  {a['tool']}"
    if show_session and a.get("session"):
        head += f"  ({a['session']})"
    if a.get("tainted"):
        head += "  [tainted]"
    if a.get("governed"):
        head += "  [governed]"
    print(head)
    print(f"    $ {a.get('command') or ''}")
    if a["phase"] == "Pending":
        print(f"    why: {a.get('why') or '-'}; denied at {a.get('deadline') or '-'} if nobody answers")
    else:
        line = f"    {a.get('decision') or '-'} by {a.get('by') or '-'} ({a.get('resolved_by') or a.get('reason')})"
        if a.get("message"):
            line += f": {a['message'][:300]}"
        print(line)


def run(a: argparse.Namespace, scope: Scope) -> None:
    decisions = [("allow", a.allow), ("deny", a.deny), ("allow_always", a.allow_always)]
    chosen = [(d, i) for d, i in decisions if i]
    if len(chosen) > 1:
        raise SystemExit("give one of --allow, --deny or --allow-always")
    if a.message and not a.deny:
        raise SystemExit("--message goes with --deny")
    if chosen:
        decision, ident = chosen[0]
        body: dict[str, Any] = {"decision": decision}
        if a.message:
            body["message"] = a.message
        r = call("POST", f"{scope.base}/{ident}", json=body)
        where = f" ({r['session']})" if scope.show_session and r.get("session") else ""
        print(f"{r['id']}: {decision} sent for {r['tool']} {r.get('command') or ''}{where}")
        return
    if not a.watch:
        r = call("GET", scope.base)
        if a.json:
            print(json.dumps(r, indent=2))
            return
        print(scope.heading(r))
        print(f"pending ({len(r['pending'])}):")
        for x in r["pending"]:
            print_approval(x, scope.show_session)
        if r["recent"]:
            print("recent:")
            for x in r["recent"][: a.recent]:
                print_approval(x, scope.show_session)
        return
    shown: set[str] = set()
    while True:
        r = call("GET", scope.base)
        for x in r["pending"]:
            if x["id"] not in shown:
                shown.add(x["id"])
                print_approval(x, scope.show_session)
                print(f"    answer: {scope.command} --allow {x['id']} (or --deny, --allow-always)")
                sys.stdout.flush()
        for x in r["recent"]:
            if x["id"] in shown and f"done:{x['id']}" not in shown:
                shown.add(f"done:{x['id']}")
                print_approval(x, scope.show_session)
                sys.stdout.flush()
        end = scope.finished(r)
        if end is not None:
            print(end)
            return
        time.sleep(a.interval)
