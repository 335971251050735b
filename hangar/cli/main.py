"""The `hangar` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from . import connect, job, session

if TYPE_CHECKING:
    from hangar.config import Settings


def _settings(a: argparse.Namespace) -> Settings:
    """The deployment's settings, and the operator's or the api's logging set up from them. A setting that is
    not allowed ends the process here: exit 2 with one line naming the variable, no traceback."""
    import os

    from hangar import logs
    from hangar.config import SettingsError, load, unknown_variables

    try:
        settings = load()
    except SettingsError as e:
        _refuse(a, e)
    logs.configure("debug" if a.verbose else settings.log_level, settings.log_format)
    unknown = unknown_variables(os.environ)
    if unknown:
        # Not refused: a pod's environment has other sources; but a misspelled setting should be seen.
        logging.getLogger("hangar.config").warning(
            "no setting reads %s (misspelled? docs/configuration.md lists them)", ", ".join(unknown)
        )
    return settings


def _refuse(a: argparse.Namespace, e: Exception) -> NoReturn:
    print(f"hangar {a.cmd}: refusing to start: {e}", file=sys.stderr)
    raise SystemExit(2)


def _operator(a: argparse.Namespace) -> None:
    from hangar.config import SettingsError
    from hangar_operator.main import run

    try:
        asyncio.run(run(_settings(a), a.kubeconfig))
    except SettingsError as e:  # one the cluster can't honour (hangar_operator/driver_mount.py)
        _refuse(a, e)


def _api(a: argparse.Namespace) -> None:
    from hangar.config import SettingsError
    from hangar_api.app import create_app, serve

    settings = _settings(a)
    try:
        app = create_app(settings, a.kubeconfig)
    except SettingsError as e:
        _refuse(a, e)
    serve(app, settings, host=a.host)


def _crds(a: argparse.Namespace) -> None:
    from hangar import crdgen
    from hangar.paths import repo_root

    root = Path(a.root) if a.root else repo_root()
    if a.check:
        drift = crdgen.drift(root)
        if drift:
            print("CRDs drift from the models; run `hangar crds`: " + ", ".join(drift), file=sys.stderr)
            raise SystemExit(1)
        print("CRDs match the models")
        return
    for p in crdgen.write(root):
        print(p)


def _openapi(a: argparse.Namespace) -> None:
    from hangar.config import Settings
    from hangar_api.app import create_app

    print(json.dumps(create_app(Settings()).openapi(), indent=2))


def _dev_tower(a: argparse.Namespace) -> None:
    from hangar.devcluster.dev import tower_call

    if a.tower_cmd == "list":
        for x in tower_call("GET", "/sim/approvals")["approvals"]:
            print(
                f"{x['id']:8} {x['status']:9} {x.get('session') or '-':20} {x.get('command') or x.get('tool')}"
            )
    elif a.tower_cmd in ("allow", "deny"):
        status = "allowed" if a.tower_cmd == "allow" else "denied"
        out = tower_call("POST", f"/sim/decide/{a.id}", {"status": status, "by": a.by, "reason": a.reason})
        print(f"{a.id} {status}: event {out['event']} signed and sent to hangar")
    else:
        out = tower_call("POST", "/sim/stop", {"session": a.session, "by": a.by, "reason": a.reason})
        print(f"run.stop for {a.session}: event {out['event']} signed and sent to hangar")


def _dev(a: argparse.Namespace) -> None:
    from hangar.devcluster import dev

    if a.dev_cmd == "tower":
        _dev_tower(a)
        return
    if a.dev_cmd == "up":
        st = dev.up(with_clis=not a.no_clis, tower=a.tower)
        print(f"hangar dev is up in {st.get('started_in_seconds', '?')}s")
        print(f"  API       {st['api_url']}  (token in the hangar context file)")
        print(f"  kubectl   export KUBECONFIG={st['kubeconfig']}; kubectl get hangar")
        print('  try       hangar session new demo "list the files and say hello" -e default')
        print("            and steer it while it runs: README.md, Run it")
        if st.get("tower_url"):
            print(
                f"  Tower     {st['tower_url']}  (a simulator: `hangar dev tower list`, docs/governance.md)"
            )
    elif a.dev_cmd == "down":
        raise SystemExit(dev.down())
    elif a.dev_cmd == "status":
        raise SystemExit(dev.status())
    elif a.dev_cmd == "binaries":
        from hangar.devcluster import binaries

        print(binaries.ensure().dir)
    elif a.dev_cmd == "runner":
        from hangar.devcluster.runner_main import main as runner_main

        runner_main(a)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hangar")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hangar", description="Run coding agents in sandbox pods.")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--version", action="version", version=f"hangar {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("operator", help="run the operator (kopf) and its driver gateway")
    o.add_argument("--kubeconfig")
    o.set_defaults(func=_operator)
    ap = sub.add_parser("api", help="run the API sidecar (REST)")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--host", default="0.0.0.0")
    ap.set_defaults(func=_api)
    c = sub.add_parser("crds", help="write crds/ and the chart's crds/ from the models")
    c.add_argument("--check", action="store_true", help="fail if the files drift from the models")
    c.add_argument("--root")
    c.set_defaults(func=_crds)
    oa = sub.add_parser("openapi", help="print the REST API's OpenAPI document")
    oa.set_defaults(func=_openapi)
    d = sub.add_parser("dev", help="a whole hangar on this machine")
    ds = d.add_subparsers(dest="dev_cmd", required=True)
    up = ds.add_parser("up", help="start control plane, CRDs, operator, API, pod runner, model server")
    up.add_argument("--no-clis", action="store_true", help="don't install the agent CLIs")
    up.add_argument(
        "--tower", action="store_true", help="governance on, with a Tower simulator (`hangar dev tower`)"
    )
    tw = ds.add_parser("tower", help="the Tower simulator of `dev up --tower`: list, allow, deny, stop")
    tws = tw.add_subparsers(dest="tower_cmd", required=True)
    tws.add_parser("list", help="the approvals filed with Tower")
    for verb in ("allow", "deny"):
        v = tws.add_parser(verb, help=f"{verb} an approval as a Tower approver would")
        v.add_argument("id", help="Tower's id, e.g. A-1")
        v.add_argument("--reason", default="")
        v.add_argument("--by", default="dev@tower")
    st_ = tws.add_parser("stop", help="run.stop a session, as Tower would")
    st_.add_argument("session")
    st_.add_argument("--reason", default="")
    st_.add_argument("--by", default="dev@tower")
    ds.add_parser("down", help="stop everything `up` started")
    ds.add_parser("status", help="what runs")
    ds.add_parser("binaries", help="build or find the control-plane binaries")
    r = ds.add_parser("runner", help="run the local pod runner (development runtime)")
    r.add_argument("--root", required=True)
    r.add_argument("--node", default="hangar-local")
    r.add_argument("--map", action="append", default=[], help="CONTAINER_PATH=LOCAL_DIR")
    r.add_argument(
        "--image", action="append", default=[], help="IMAGE_REFERENCE=LOCAL_ROOT, for image volumes"
    )
    r.add_argument("--kubeconfig")
    d.set_defaults(func=_dev)
    session.add_parser(sub)
    job.add_parser(sub)
    connect.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kubernetes_asyncio").setLevel(logging.WARNING)
    if not args.verbose:  # a line per REST call is noise in a terminal; --verbose shows them
        logging.getLogger("httpx").setLevel(logging.WARNING)
    args.func(args)


if __name__ == "__main__":
    main()
