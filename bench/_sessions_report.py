"""What ``bench/sessions.py`` reports: its figures beside their floors, where the time goes, and the CPU each
process spent, as a dict (``--json``) or a table; and the flags it shares with ``bench/warm_pool.py``."""

from __future__ import annotations

import argparse
from typing import Any

from _observe import cpu_medians
from _stack import driver_mount_flag
from _stats import med, summary

POLL = 0.02  # seconds between polls, both sides (--poll)


def connect_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of bench/sessions.py that warm_pool.py shares."""
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("--poll", type=float, default=POLL, help="seconds between status polls (default 0.02)")
    ap.add_argument(
        "--ready",
        choices=("watch", "poll"),
        default="watch",
        help="how connected / Running is seen on every side: a watch (default) or a poll every --poll s",
    )
    ap.add_argument("--no-dial", action="store_true", help="leave out the floor of a pod like hangar's")
    ap.add_argument("--keep-logs", action="store_true", help="keep the control-plane and stack logs")
    driver_mount_flag(ap)


def report(res: dict[str, Any], samples: bool = False) -> dict[str, Any]:
    """The figures, where the time goes and the CPU; with ``samples`` (--json) every sample and the args."""
    out: dict[str, Any] = {"date": res["date"], "machine": res["machine"], "figures": {}, "breakdown": {}}
    if "connect" in res:
        h = [x["total"] for x in res["connect"]["hangar"]]
        f = [x["total"] for x in res["connect"]["floor"]]
        out["figures"]["connect"] = {"hangar": summary(h), "floor": summary(f)}
        if res["connect"].get("dial"):
            out["figures"]["connect"]["dial"] = summary([x["total"] for x in res["connect"]["dial"]])
        H, F = res["connect"]["hangar"], res["connect"]["floor"]
        out["breakdown"]["connect"] = {
            "hangar: POST /api/sessions returned": med([x["post"] for x in H]),
            "hangar: operator stamped sandbox.startedAt": med([x["to_status_started"] for x in H]),
            "hangar: sandbox pod seen created": med([x["to_pod_created"] for x in H]),
            "hangar: sandbox pod bound to the node": med([x["to_bound"] for x in H]),
            "hangar: sandbox pod Running": med([x["to_running"] for x in H]),
            "hangar: driver_connected recorded by the operator": med(
                [x["to_driver_connected_event"] for x in H]
            ),
            "hangar: session sandbox.connected": med([x["total"] for x in H]),
            "floor: bare pod bound to the node": med([x["to_bound"] for x in F]),
            "floor: bare pod Running (watch)": med([x["to_running"] for x in F]),
            "floor: bare pod Running (poll)": med([x["total"] for x in F]),
        }
        if res["connect"].get("dial"):
            D = res["connect"]["dial"]
            out["breakdown"]["connect"] |= {
                "dial floor: Secret, PVC and pod created": med([x["to_objects_created"] for x in D]),
                "dial floor: the pod's line arrived": med([x["total"] for x in D]),
            }
    if "turns" in res:
        h = [x["total"] for x in res["turns"]["hangar"]]
        f = [x["total"] for x in res["turns"]["floor"]]
        fx = [x["to_exit"] for x in res["turns"]["floor"]]
        out["figures"]["turn"] = {"hangar": summary(h), "floor": summary(f), "floor_to_exit": summary(fx)}
        H, F = res["turns"]["hangar"], res["turns"]["floor"]
        out["breakdown"]["turn"] = {
            "hangar: turn status.startedAt (operator sent start_turn)": med(
                [x["to_turn_started"] for x in H]
            ),
            "hangar: driver's turn_started recorded": med([x["to_driver_turn_started_event"] for x in H]),
            "hangar: first model request": med([x["to_first_model_request"] for x in H]),
            "hangar: last model request": med([x["to_last_model_request"] for x in H]),
            "hangar: first text event recorded": med([x["to_first_text_event"] for x in H]),
            "hangar: driver's turn_ended recorded": med([x["to_turn_ended_event"] for x in H]),
            "hangar: turn status.finishedAt (operator applied turn_ended)": med(
                [x["to_turn_finished"] for x in H]
            ),
            "hangar: Completed seen through the API": med([x["total"] for x in H]),
            "floor: first model request": med([x["to_first_model_request"] for x in F]),
            "floor: last model request": med([x["to_last_model_request"] for x in F]),
            "floor: result line": med([x["total"] for x in F]),
            "floor: process exit": med([x["to_exit"] for x in F]),
            "model requests per turn (hangar / floor)": [
                med([x["model_requests"] for x in H]),
                med([x["model_requests"] for x in F]),
            ],
            # Not a time: how many of the turns ran in a CLI started ahead of them, of all.
            "turns whose CLI was pre-started (count / of)": [
                sum(1 for x in H if x.get("prestarted")),
                len(H),
            ],
        }
    for key, src in (("connect", "connect"), ("turn", "turns")):
        if src in res:
            out.setdefault("cpu", {})[key] = {
                side: cpu_medians([x["cpu"] for x in res[src][side]]) for side in ("hangar", "floor")
            }
    if samples:
        out["samples"] = {k: res[k] for k in ("connect", "turns") if k in res}
        out["args"] = res["args"]
    return out


def table(out: dict[str, Any]) -> str:
    lines = [f"hangar bench/sessions.py — {out['date']} — {out['machine']}", ""]
    hdr = f"{'figure (seconds)':46} {'p50':>7} {'p99':>7}   {'floor':34} {'p50':>7} {'p99':>7} {'x p50':>6} {'x p99':>6}"
    lines += [hdr, "-" * len(hdr)]
    rows = {
        "connect": [
            ("POST /api/sessions → sandbox.connected", "bare pod create → Running", "floor"),
            ("  (the same)", "hangar-like pod → dialled bench", "dial"),
        ],
        "turn": [
            ("POST …/messages → turn Completed", "claude -p direct → result line", "floor"),
            ("  (the same)", "claude -p direct → process exit", "floor_to_exit"),
        ],
    }
    n = []
    for key, fig in out["figures"].items():
        h = fig["hangar"]
        n.append(f"{key} n={h['n']}")
        for label, floor_label, fkey in rows[key]:
            if fkey not in fig:
                continue
            f = fig[fkey]
            lines.append(
                f"{label:46} {h['p50']:7.3f} {h['p99']:7.3f}   {floor_label:34} {f['p50']:7.3f} {f['p99']:7.3f} "
                f"{h['p50'] / f['p50']:5.2f}x {h['p99'] / f['p99']:5.2f}x"
            )
    lines.append(f"({', '.join(n)}; p99 is nearest-rank: below 100 samples it is the maximum)")
    for key, bd in out["breakdown"].items():
        lines += ["", f"where the time goes ({key}; medians, seconds since the request was sent):"]
        for label, v in bd.items():
            if isinstance(v, list):
                lines.append(f"  {label:62} {' / '.join('-' if x is None else f'{x:g}' for x in v)}")
            else:
                lines.append(f"  {label:62} {'-' if v is None else f'{v:8.3f}'}")
    for key, sides in (out.get("cpu") or {}).items():
        lines += ["", f"CPU seconds per sample ({key}; medians; the bench itself includes its polling):"]
        names = [
            k for k in sides["hangar"] if sides["hangar"][k] >= 0.005 or sides["floor"].get(k, 0) >= 0.005
        ]
        lines.append(f"  {'process':42} {'hangar':>8} {'floor':>8}")
        for k in names:
            lines.append(f"  {k:42} {sides['hangar'][k]:8.3f} {sides['floor'].get(k, 0.0):8.3f}")
        lines.append(
            f"  {'total':42} {sum(sides['hangar'].values()):8.3f} {sum(sides['floor'].values()):8.3f}"
        )
    return "\n".join(lines)
