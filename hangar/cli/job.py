"""`hangar job …`: jobs over the REST API (an admin token, or a jobs token for your own jobs)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from . import approvals as approval_cli
from . import common
from .http import call


def _print_job(j: dict[str, Any]) -> None:
    taint = "  tainted" if j.get("taint", {}).get("tainted") else ""
    print(
        f"job {j['id']}  {j['state']}  submitter={j['submitter']}  env={j['environment']}  "
        f"harness={j['harness']}  approvals={j.get('policy') or j.get('approvals') or '-'}  "
        f"attempts={j['attempts_requested']}{taint}"
    )
    if j.get("message"):
        print(f"  {j['message']}")
    if j.get("question"):
        print(f"  ? {j['question']}")
    for a in j.get("attempts", []):
        line = f"  attempt {a['index']}: {a.get('session') or '-'}  {a.get('state')}"
        if a.get("phase"):
            line += f" ({a['phase']})"
        if a.get("outcome"):
            line += f"  last turn {a.get('last_turn') or '-'}: {a['outcome']}"
        runs = a.get("verifications") or []
        if runs:
            line += "  verification " + ",".join(
                "passed" if v.get("passed") else ("running" if v.get("passed") is None else "failed")
                for v in runs
            )
        if a.get("lost"):
            line += f"  ({a['lost']})"
        print(line)
    for t in j.get("turns", []):
        tag = f"  [{t['class']}]" if t.get("class", "unclassified") != "unclassified" else ""
        common.print_turn(t, f"{t['n']} {t['name']}", tag)
    for a in j.get("pending_approvals", []):
        print(f"  approval {a['id']} waits ({a.get('session') or '-'}): {a['tool']} {a.get('command') or ''}")
    if j.get("pr_url") or j.get("head_commit"):
        print(
            f"  delivered: {j.get('pr_url') or '-'}  branch {j.get('branch')} at {(j.get('head_commit') or '')[:12]}"
        )
    if j.get("release"):
        r = j["release"]
        print(f"  {r['decision']} by {r['by']}" + (f": {r['reason']}" if r.get("reason") else ""))
    if j.get("cost_usd"):
        print(f"  cost ${j['cost_usd']:.4f}")


def cmd_new(a: argparse.Namespace) -> None:
    body: dict[str, Any] = {"prompt": a.prompt, "environment": a.env, "harness": a.harness}
    for key in ("name", "repo", "base_branch", "approvals", "attempts", "model", "deliver", "branch"):
        value = getattr(a, key)
        if value is not None:
            body["repository" if key == "repo" else key] = value
    if a.tainted:
        body["tainted"] = True
    j = call("POST", "/api/jobs", json=body)
    print(
        f"job {j['id']} submitted ({j['attempts_requested']} attempt{'s' if j['attempts_requested'] > 1 else ''})"
    )
    if a.wait:
        wait_job(j["id"], a.timeout)


def wait_job(job: str, timeout: float) -> dict[str, Any]:
    """Follow the job until it needs someone (a question, an approval) or ends."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        j: dict[str, Any] = call("GET", f"/api/jobs/{job}")
        if j["state"] != last:
            print(f"job {job}: {j['state']}")
            last = j["state"]
        if j["state"] in ("needs_input", "awaiting_approval", "done", "delivered", "failed", "cancelled"):
            _print_job(j)
            return j
        time.sleep(1)
    raise SystemExit(f"job {job} still {last} after {timeout:.0f}s")


def cmd_list(a: argparse.Namespace) -> None:
    for j in call("GET", "/api/jobs")["jobs"]:
        pending = len(j.get("pending_approvals") or [])
        print(
            f"{j['id']:32} {j['state']:18} {j['submitter']:16} {j['environment']:16} "
            f"attempts={j['attempts_requested']} pending={pending}"
        )


def cmd_get(a: argparse.Namespace) -> None:
    common.show(f"/api/jobs/{a.id}", a.json, _print_job)


def cmd_events(a: argparse.Namespace) -> None:
    common.follow_events(f"/api/jobs/{a.id}/events", a.since, a.follow, interval=1.0)


def _sent(r: dict[str, Any], kind: str) -> None:
    for x in r.get(f"{kind}s", []):
        item = x[kind]
        print(f"{kind} {item['id']} {item['status']} ({x['session']}, turn {x['turn']['name']})")
    for e in r.get("errors", []):
        print(f"not sent to {e['session']}: {e['error']}", file=sys.stderr)


def cmd_steer(a: argparse.Namespace) -> None:
    r = call("POST", f"/api/jobs/{a.id}/steer", json={"message": a.message})
    _sent(r, "steer")
    if a.klass:
        for x in r["steers"]:
            sid = x["steer"]["id"]
            c = call("POST", f"/api/jobs/{a.id}/steers/{sid}/class", json={"class": a.klass})
            print(f"steer {sid} classified {c['steer']['class']}")


def cmd_withdraw(a: argparse.Namespace) -> None:
    common.withdraw(f"/api/jobs/{a.id}", a.steer_id)


def cmd_interrupt(a: argparse.Namespace) -> None:
    body = {"message": a.message} if a.message else None
    r = call("POST", f"/api/jobs/{a.id}/interrupt", json=body)
    _sent(r, "interrupt")
    if not a.message:
        print(f'job {a.id} will wait for a follow-up: hangar job follow-up {a.id} "…" (or cancel it)')


def cmd_follow_up(a: argparse.Namespace) -> None:
    body: dict[str, Any] = {"message": a.message}
    if a.klass:
        body["class"] = a.klass
    r = call("POST", f"/api/jobs/{a.id}/follow_up", json=body)
    for x in r["results"]:
        if x["kind"] == "steer":
            print(f"{x['session']}: steer {x['steer']['id']} (turn {x['turn']['name']} is running)")
        else:
            print(f"{x['session']}: turn {x['turn']['name']}")
    if r.get("class", "unclassified") != "unclassified":
        print(f"class {r['class']}")


def cmd_classify(a: argparse.Namespace) -> None:
    r = call("POST", f"/api/jobs/{a.id}/turns/{a.n}/class", json={"class": a.klass})
    print(f"turn {a.n} ({r['turn']['name']}) classified {r['turn']['class']}")


def cmd_cancel(a: argparse.Namespace) -> None:
    j = call("POST", f"/api/jobs/{a.id}/cancel")
    print(f"job {j['id']} cancelling (was {j['state']})")


def cmd_release(a: argparse.Namespace) -> None:
    verb = "approve" if a.job_cmd == "approve" else "reject"
    body = {"reason": a.message} if a.message else None
    j = call("POST", f"/api/jobs/{a.id}/{verb}", json=body)
    print(f"job {j['id']} {j['release']['decision']} by {j['release']['by']}")


def cmd_patch(a: argparse.Namespace) -> None:
    """The work as a patch against the base branch, on stdout (``git apply`` takes it)."""
    sys.stdout.write(call("GET", f"/api/jobs/{a.id}/patch", text=True))


def cmd_approvals(a: argparse.Namespace) -> None:
    def heading(r: dict[str, Any]) -> str:
        taint = "  tainted" if r.get("tainted") else ""
        return f"job {r['job']}  {r['state']}  approvals={r.get('policy') or '-'}{taint}"

    def finished(r: dict[str, Any]) -> str | None:
        ended = r["state"] in ("done", "delivered", "failed", "cancelled") and not r["pending"]
        return f"job {a.id} {r['state']}" if ended else None

    approval_cli.run(
        a,
        approval_cli.Scope(
            base=f"/api/jobs/{a.id}/approvals",
            command=f"hangar job approvals {a.id}",
            heading=heading,
            finished=finished,
            show_session=True,
        ),
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("job", help="submit and work with jobs")
    js = p.add_subparsers(dest="job_cmd", required=True)
    n = js.add_parser("new", help="submit a job: its attempts start with the prompt")
    n.add_argument("prompt", type=common.message_arg)
    n.add_argument("--name", help="the job's id (default: job-<10 hex>)")
    n.add_argument("--repo", help="the repository to work on")
    n.add_argument("--base-branch")
    n.add_argument("--attempts", type=int, help="best-of-N: how many attempts (1..8)")
    common.add_start_options(n)
    n.add_argument("--deliver", choices=["branch", "pr", "none"])
    n.add_argument("--branch", help="the branch the work is delivered on (default: hangar/<job>)")
    n.add_argument("--wait", action="store_true", help="follow the job until it needs you or ends")
    n.add_argument("--timeout", type=float, default=1800)
    n.set_defaults(func=cmd_new)
    ls = js.add_parser("list", help="list jobs (yours, with a jobs token; all, as an admin)")
    ls.set_defaults(func=cmd_list)
    common.add_get(js, "id", "show a job, its attempts and turns", cmd_get)
    common.add_events(js, "id", "the job's events", cmd_events)
    ap = js.add_parser(
        "approvals",
        help="what the job's attempts wait on; allow or deny it",
        description="Without an option: the policy, pending and recent approvals across the job's attempts. "
        "--watch prints each new request (and how it was resolved) until the job ends or Ctrl-C.",
    )
    ap.add_argument("id")
    approval_cli.add_arguments(ap)
    ap.set_defaults(func=cmd_approvals)
    st = js.add_parser("steer", help="add a message to the running turn of every attempt that has one")
    st.add_argument("id")
    st.add_argument("message", type=common.message_arg)
    common.add_class_option(st)
    st.set_defaults(func=cmd_steer)
    common.add_withdraw(js, "id", cmd_withdraw)
    it = js.add_parser(
        "interrupt", help="stop the running turns; without a message the job waits for a follow-up"
    )
    it.add_argument("id")
    it.add_argument("message", nargs="?", type=common.message_arg)
    it.set_defaults(func=cmd_interrupt)
    f = js.add_parser("follow-up", help="continue the job (same conversation) with a new message")
    f.add_argument("id")
    f.add_argument("message", type=common.message_arg)
    common.add_class_option(f)
    f.set_defaults(func=cmd_follow_up)
    c = js.add_parser("classify", help="say what a follow-up turn was (n: its number in `hangar job get`)")
    c.add_argument("id")
    c.add_argument("n", type=int)
    common.add_class_argument(c)
    c.set_defaults(func=cmd_classify)
    x = js.add_parser("cancel", help="cancel the job: its attempts are stopped")
    x.add_argument("id")
    x.set_defaults(func=cmd_cancel)
    for verb, what in (
        ("approve", "release a job that waits for an approver (its repository's policy): its attempts start"),
        ("reject", "reject a job that waits for an approver: it is cancelled without running"),
    ):
        r = js.add_parser(verb, help=what)
        r.add_argument("id")
        r.add_argument("-m", "--message", help="why (kept with the decision)")
        r.set_defaults(func=cmd_release)
    pt = js.add_parser(
        "patch", help="the job's work as one patch against the base branch (git apply takes it)"
    )
    pt.add_argument("id")
    pt.set_defaults(func=cmd_patch)
