"""`hangar dev up | status | down` on a fresh state directory, and the README's demo typed as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hangar.paths import repo_root

from .helpers import clis_installed


def hangar(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hangar.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def readme_commands() -> list[list[str]]:
    """The commands of the README's "Run it" section, in order, as a shell would split them."""
    text = (repo_root() / "README.md").read_text()
    section = text.split("\n## Run it\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append(argv)
    return out


def test_readme_demo_is_what_the_test_runs() -> None:
    """The demo below runs the README's commands; this pins what it expects of them, so that a changed
    README changes the test."""
    cmds = readme_commands()
    assert cmds[0] == ["make", "dev"] and cmds[-1] == ["hangar", "dev", "down"]
    hangar_cmds = [c[1:] for c in cmds if c[0] == "hangar"]
    steer = hangar_cmds.index(["session", "steer", "demo", "also count them", "--wait"])
    # The steer comes while the demo's first turn runs: after `new` without --wait, before anything waits.
    assert hangar_cmds[:steer] == [
        ["session", "new", "demo", "list the files and say hello", "-e", "default"],
        ["session", "get", "demo"],
    ]
    harnesses = [c[c.index("--harness") + 1] for c in hangar_cmds if "--harness" in c]
    assert harnesses == ["codex", "pi", "antigravity"]


@pytest.mark.e2e
@pytest.mark.skipif(not clis_installed(), reason="agent CLIs not installed (tools/install-clis.sh)")
def test_dev_up_runs_the_readme_demo_and_down_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "dev"
    env = {**os.environ, "HANGAR_DEV_ROOT": str(root), "XDG_STATE_HOME": str(tmp_path / "state")}
    # `make dev` is `hangar dev up`; --tower adds governance and a Tower simulator, which the demo's
    # sessions (approvals auto) never reach: the README's demo runs the same, then a governed session.
    up = hangar(env, "dev", "up", "--tower")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "hangar dev is up" in up.stdout and "Tower" in up.stdout
    state = json.loads((root / "state.json").read_text())
    pids = state["pids"]
    assert {"etcd", "kube-apiserver", "operator", "api", "runner", "model", "tower"} <= set(pids)
    try:
        for url in (state["operator_url"] + "/healthz", state["api_url"] + "/readyz"):
            with urllib.request.urlopen(url, timeout=5) as r:
                assert r.status == 200
        context = json.loads((tmp_path / "state" / "hangar" / "dev" / "context.json").read_text())
        assert context["api_url"] == state["api_url"] and context["token"]
        st = hangar(env, "dev", "status")
        assert st.returncode == 0, st.stdout
        assert "operator health" in st.stdout and "NOT RUNNING" not in st.stdout
        run_readme_demo(env, state)
        run_governed_demo(env)
    finally:
        down = hangar(env, "dev", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert [name for name, pid in pids.items() if alive(pid)] == []
    assert not (root / "state.json").exists()
    st = hangar(env, "dev", "status")
    assert st.returncode == 1 and "down" in st.stdout


def run_governed_demo(env: dict[str, str]) -> None:
    """docs/governance.md's dev demo: a governed call waits on Tower; `hangar dev tower allow` lets it run."""
    out = hangar(
        env, "session", "new", "gov-demo", "force-push the branch", "-e", "default", "--approvals", "governed"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    deadline = time.monotonic() + 120
    while not (
        line := next(
            (
                x
                for x in hangar(env, "dev", "tower", "list").stdout.splitlines()
                if "gov-demo" in x and "pending" in x
            ),
            None,
        )
    ):
        assert time.monotonic() < deadline, hangar(env, "session", "get", "gov-demo").stdout
        time.sleep(1)
    assert "git push --force" in line, line
    tower_id = line.split()[0]
    out = hangar(env, "dev", "tower", "allow", tower_id, "--by", "lee@acme.test")
    assert out.returncode == 0 and f"{tower_id} allowed" in out.stdout, out.stdout + out.stderr
    out = hangar(env, "session", "wait", "gov-demo")
    assert out.returncode == 0, out.stdout + out.stderr
    got = hangar(env, "session", "get", "gov-demo").stdout
    assert "Completed" in got, got
    approvals = hangar(env, "session", "approvals", "gov-demo").stdout
    assert "tower" in approvals, approvals


def run_readme_demo(env: dict[str, str], state: dict[str, object]) -> None:
    """Each README command as written (the CLI finds the API through the context file `dev up` wrote), with
    what a person should see after it."""
    gets = 0
    for argv in readme_commands():
        if argv[0] in ("make", "export") or argv == ["hangar", "dev", "down"]:
            continue  # `make dev` is `hangar dev up`, done above; the test's `dev down` comes last
        if argv[0].startswith("KUBECONFIG="):
            assert argv[1:] == ["kubectl", "get", "hangar"], argv
            kubectl = [str(state["kubectl"]), "--kubeconfig", str(state["kubeconfig"]), "get", "hangar"]
            listed = subprocess.run(kubectl, capture_output=True, text=True, timeout=30).stdout
            for name in ("session.hangar.dev/demo", "turn.hangar.dev/demo-1", "session.hangar.dev/demo-b"):
                assert name in listed, listed
            assert "environment.hangar.dev/default" in listed and "job.hangar.dev/demo-job" in listed
            continue
        assert argv[0] == "hangar", argv
        args = argv[1:]
        if args == ["session", "get", "demo"] and gets == 0:
            # A person looks before steering; the turn shows Running once its sandbox has started.
            gets += 1
            deadline = time.monotonic() + 90
            while "turn 1: Running" not in (out := hangar(env, *args)).stdout:
                assert time.monotonic() < deadline, out.stdout + out.stderr
                time.sleep(1)
            continue
        out = hangar(env, *args)
        said = out.stdout + out.stderr
        assert out.returncode == 0, f"{argv}: {said}"
        if args[:2] == ["session", "steer"]:
            assert re.search(r"steer st-\w+ sending \(turn demo-1\)", out.stdout), said
            assert re.search(r"steer st-\w+ delivered$", out.stdout.strip()), said
        elif args == ["session", "wait", "demo"]:
            assert "turn 1: Completed (exit 0)" in out.stdout, said
            assert "I counted them too" in out.stdout and "your steer reached it" in out.stdout, said
        elif args == ["session", "get", "demo"]:
            assert "session demo  Idle" in out.stdout, said
            assert re.search(r"steer st-\w+ delivered: also count them", out.stdout), said
            assert "turn 2" not in out.stdout, said  # the steer landed in turn 1, not in a next turn
        elif args[:2] == ["session", "fork"]:
            assert "session demo-b created, forked from demo" in out.stdout, said
            assert "turn 1: Completed (exit 0)" in out.stdout, said
        elif args[:2] == ["job", "new"]:
            assert "job demo-job submitted (2 attempts)" in out.stdout, said
            assert out.stdout.count("Completed (exit 0)") == 2, said
        elif args[0] == "connect":
            assert re.match(r"mcp-only token tok-\w+ for admin ", out.stdout), said
            assert f'"url": "{state["api_url"]}/mcp"' in out.stdout, said
        elif "--harness" in args:
            harness = args[args.index("--harness") + 1]
            assert f"harness={harness}" in out.stdout, said
            assert "turn 1: Completed (exit 0)" in out.stdout, said
            assert "The command ran and printed the working directory" in out.stdout, said
            if harness == "antigravity":
                assert "(no scripted step matched)" not in out.stdout, said
        else:
            assert "session demo created" in out.stdout, said
