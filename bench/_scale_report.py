"""What a scale run (``bench/scale.py``) prints, and the plot it draws: lag, memory, idle CPU and events
applied against the session count, beside an earlier run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def table(out: dict[str, Any]) -> str:
    lines = [f"{out['date']}  {out['machine']}  {out['args']}", ""]
    b = out["result"]["baseline"]
    lines.append(
        f"0 sessions: operator {b['operator_rss_mib']} MiB; idle CPU % operator {b['idle']['cpu_pct']['operator']}"
        f", apiserver {b['idle']['cpu_pct']['kube-apiserver']}; apiserver {b['idle']['apiserver_rps']} req/s"
    )
    hdr = (
        f"{'sessions':>8} {'connect p50/p99 s':>18} {'RSS MiB':>8} {'MiB/sess':>8} {'op CPU%':>8} "
        f"{'apisrv CPU%':>11} {'req/s':>7} {'lag p50/p99 s':>15} {'msg→start s':>15} {'done p50/p99 s':>15} "
        f"{'steer p50/p99 s':>15} {'events/s':>9}"
    )
    lines += ["", hdr]
    for p in out["result"]["points"]:
        c, pr = p["create_to_connected_s"], p["probes"]

        def pp(s: dict[str, float]) -> str:
            return f"{s['p50']:.3f}/{s['p99']:.3f}"

        lines.append(
            f"{p['sessions']:>8} {pp(c):>18} {p['operator_rss_mib']:>8} {p['operator_mib_per_session']:>8} "
            f"{p['idle']['cpu_pct']['operator']:>8} {p['idle']['cpu_pct']['kube-apiserver']:>11} "
            f"{p['idle']['apiserver_rps']:>7} {pp(pr['reconcile_lag_s']) if 'reconcile_lag_s' in pr else '-':>15} "
            f"{pp(pr['message_to_start_turn_s']):>15} "
            f"{pp(pr['message_to_completed_s']):>15} {pp(pr['steer_to_driver_s']):>15} "
            f"{p['events']['per_second'] if 'events' in p else '-':>9}"
        )
    lines.append("")
    for p in out["result"]["points"]:
        ev = p.get("events")
        if ev:
            lat = ev["send_to_applied_s"] or {"p50": 0.0, "p99": 0.0}
            lines.append(
                f"events at {p['sessions']}: {ev['applied']} applied in {ev.get('first_to_last_s', '?')} s "
                f"({ev['applied_within_window']} within the {ev['seconds']:g} s window) from "
                f"{ev['drivers']} drivers (window {ev['window']}), send → applied p50/p99 "
                f"{lat['p50']:.3f}/{lat['p99']:.3f} s, {ev['unacknowledged_after_drain']} unacknowledged, "
                f"{ev['lost_to_reconnects']} lost to reconnects; CPU % operator {ev['cpu_pct']['operator']}, "
                f"apiserver {ev['cpu_pct']['kube-apiserver']}"
            )
    lines.append("")
    for p in out["result"]["points"]:
        inbox = p["probes"].get("mcp_inbox_read_s")  # runs before it have none
        if inbox:
            floor = p["probes"]["mcp_tools_list_s"]
            lines.append(
                f"MCP hangar://inbox read at {p['sessions']}: p50/p99 {inbox['p50']:.3f}/{inbox['p99']:.3f} s "
                f"({inbox['n']} reads, one at a time); floor, MCP tools/list: {floor['p50']:.3f}/{floor['p99']:.3f} s; "
                f"ratio p50 {inbox['p50'] / floor['p50']:.1f}x"
            )
    lines.append("")
    for p in out["result"]["points"]:
        line = f"apiserver requests/s while idle at {p['sessions']}: {p['idle']['apiserver_rps_top']}"
        st = p.get("settled")  # runs before the wait for a quiet apiserver have none
        if st:
            line += f" (the window began {st['waited_s']:g} s after the burst{'' if st['quiet'] else ', never quiet'})"
        lines.append(line)
    return "\n".join(lines)


def plot(out: dict[str, Any], path: Path, compare: dict[str, Any] | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    runs = [("this run", out)] + ([(compare.get("label", "before"), compare)] if compare else [])
    for label, o in runs:
        pts = o["result"]["points"]
        ns = [p["sessions"] for p in pts]
        if "reconcile_lag_s" in pts[0]["probes"]:  # probes one at a time (earlier runs fired them in a burst)
            lag = [p["probes"]["message_to_start_turn_s"] for p in pts]
            axes[0].plot(ns, [x["p99"] for x in lag], "o-", label=f"{label} p99")
            axes[0].plot(ns, [x["p50"] for x in lag], "o--", label=f"{label} p50")
        axes[1].plot(ns, [p["operator_rss_mib"] for p in pts], "o-", label=label)
        axes[2].plot(ns, [p["idle"]["cpu_pct"]["operator"] for p in pts], "o-", label=f"{label}: operator")
        axes[2].plot(
            ns, [p["idle"]["cpu_pct"]["kube-apiserver"] for p in pts], "o--", label=f"{label}: apiserver"
        )
        ev = [(p["sessions"], p["events"]["per_second"]) for p in pts if "events" in p]
        if ev:
            axes[3].plot([n for n, _ in ev], [r for _, r in ev], "o-", label=label)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[2].axhline(5.0, color="grey", lw=0.8)
    for ax, title, unit in (
        (axes[0], "reconcile lag: message POSTed → start_turn at the driver", "seconds"),
        (axes[1], "operator memory (RSS)", "MiB"),
        (axes[2], "idle CPU", "% of a core"),
        (axes[3], "driver events applied (every driver sending)", "events per second"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("sessions (each a connected sandbox)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)  # a rate's or a size's change is read against zero, not a cropped axis
    fig.tight_layout()
    fig.savefig(path, dpi=110)
