"""What `hangar session` and `hangar job` share: a turn's lines, `get`, `events`, `withdraw` and the class
argument, each written once for both."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeAlias, get_args

from ..limits import MESSAGE_MAX, utf8_len
from .http import call

Handler = Callable[[argparse.Namespace], None]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def message_arg(value: str) -> str:
    """A message argument: ``-`` reads it from standard input (one argument of a command line holds at most
    128 KiB on Linux, less than a message may be). Held to the api's limit in bytes here, before sending."""
    text = sys.stdin.read() if value == "-" else value
    if utf8_len(text) > MESSAGE_MAX:
        raise argparse.ArgumentTypeError(f"at most {MESSAGE_MAX} bytes (UTF-8); this one is {utf8_len(text)}")
    return text


def print_turn(t: dict[str, Any], head: str, tag: str = "") -> None:
    """A turn as `get` shows it: ``turn <head>: <phase>``, then its message, summary and failure reason."""
    line = f"  turn {head}: {t['phase']}"
    if t.get("exit_status") is not None:
        line += f" (exit {t['exit_status']})"
    print(line + tag)
    print(f"    > {t['message'][:200]}")
    if t.get("summary"):
        print(f"    < {t['summary'][:500]}")
    if t.get("reason"):
        print(f"    ! {t['reason'][:500]}")


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


def follow_events(path: str, since: int, follow: bool, interval: float = 0.5) -> None:
    """Prints a session's or job's events from ``since``; with ``follow``, goes on until Ctrl-C."""
    seen = since
    while True:
        ev = call("GET", path, params={"since": seen})
        for e in ev["events"]:
            print_event(e)
        seen = ev["last_seq"]
        if not follow:
            return
        time.sleep(interval)


def class_arg(word: str) -> str:
    from hangar.steering import parse_class

    try:
        return parse_class(word)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def show(path: str, as_json: bool, printer: Callable[[dict[str, Any]], None]) -> None:
    """`get`: the resource at ``path`` as JSON, or as ``printer`` writes it."""
    obj = call("GET", path)
    if as_json:
        print(json.dumps(obj, indent=2))
    else:
        printer(obj)


def withdraw(base: str, steer_id: str) -> None:
    r = call("POST", f"{base}/steers/{steer_id}/withdraw")
    print(f"steer {steer_id} {r['steer']['status']}: {r.get('detail', '')}")


def add_get(sub: Subparsers, ref: str, help: str, func: Handler) -> None:
    g = sub.add_parser("get", help=help)
    g.add_argument(ref)
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=func)


def add_events(sub: Subparsers, ref: str, help: str, func: Handler) -> None:
    e = sub.add_parser("events", help=help)
    e.add_argument(ref)
    e.add_argument("--since", type=int, default=0)
    e.add_argument("-f", "--follow", action="store_true")
    e.set_defaults(func=func)


def add_withdraw(sub: Subparsers, ref: str, func: Handler) -> None:
    w = sub.add_parser("withdraw", help="take back a steer that is still on its way to the agent")
    w.add_argument(ref)
    w.add_argument("steer_id")
    w.set_defaults(func=func)


def add_start_options(p: argparse.ArgumentParser) -> None:
    """What `session new` and `job new` both take: where and how the agent runs."""
    from hangar.approvals.rules import POLICIES
    from hangar.models.base import Harness

    p.add_argument("-e", "--env", required=True, help="the Environment to run in")
    p.add_argument("--harness", default="claude", choices=get_args(Harness))
    p.add_argument("--approvals", choices=POLICIES)
    p.add_argument(
        "--tainted", action="store_true", help="start tainted (the agent will read untrusted input)"
    )
    p.add_argument("--model")


def add_class_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--class", dest="klass", type=class_arg, help="correction (fix), redirect or new_info (info)"
    )


def add_class_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "klass", metavar="class", type=class_arg, help="correction (fix), redirect, new_info (info)"
    )
