"""The workspace as a checkout of the Environment's repository, and the work taken out of it again.

Standard library only, Python 3.8+.

The repository's credentials (a Secret mounted root-only at ``HANGAR_REPO_CREDENTIALS_DIR``: ``token`` and
optionally ``username``) are read only by the driver, only for the moment a git process needs them, and
handed to that git as an ``http.extraHeader`` in its environment (never a file, never the remote URL). The
agent (another uid) can't read them, and no git process that holds them ever reads the agent's repository
config or hooks:

- ``checkout`` (at sandbox start, once per volume): root clones the base branch, makes the job branch, and
  gives the tree to the agent's uid. The clone's ``origin`` is the bare URL.
- ``verify``: the verification command runs as the agent, in the workspace, with the agent's environment.
- ``work_patch`` (after each turn of a session whose workspace is a checkout): the work against the base, as
  the agent, through a copy of its index, so the agent's staged changes and commits are left as they are.
- ``deliver``: as the agent, anything uncommitted is committed and the branch written to a bundle; root
  copies the bundle (no symlinks followed) into its own private repository, fetches the base from the remote
  and pushes from there: the agent's ``.git/config`` and hooks never run with the credentials.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional

from .commands import CommandError

OUTPUT_MAX = 64 * 1024
PATCH_OUTPUT_MAX = 1024 * 1024
PATCH_MAX = 1024 * 1024  # the answer must fit a 4 MiB frame, JSON-escaped
IDENTITY = ("hangar agent", "agent@hangar.invalid")
BASE_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "/bin/false",
    "LANG": "C.UTF-8",
}


class Repo:
    def __init__(self, env: Dict[str, str], workspace: str, state_dir: str, run: str = "") -> None:
        self.url = env.get("HANGAR_REPO_URL", "")
        self.base = env.get("HANGAR_REPO_BASE", "") or "main"
        self.branch = env.get("HANGAR_REPO_BRANCH", "")
        self.creds_dir = env.get("HANGAR_REPO_CREDENTIALS_DIR", "")
        self.workspace = workspace
        # Root's own: the clone in the making, the credential-free git HOME, the repository pushed from. One per
        # run, so sandboxes sharing a /tmp (the local pod runner) never share it.
        self.private = os.path.join(state_dir, "repo-" + (run.replace("/", "_") or "run"))
        self.path = env.get("PATH") or "/usr/local/bin:/usr/bin:/bin"

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    # ------------------------------------------------------------------ git

    def _auth_env(self) -> Dict[str, str]:
        if not self.creds_dir:
            return {}
        token = _read(os.path.join(self.creds_dir, "token")) or _read(
            os.path.join(self.creds_dir, "password")
        )
        if not token:
            raise CommandError("the repository's credentials Secret has no token")
        user = _read(os.path.join(self.creds_dir, "username")) or "x-access-token"
        basic = base64.b64encode(("%s:%s" % (user, token)).encode()).decode()
        return {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": "Authorization: Basic " + basic,
        }

    def _git(
        self, args: List[str], cwd: Optional[str] = None, auth: bool = False, timeout: float = 300
    ) -> str:
        home = os.path.join(self.private, "home")
        os.makedirs(home, 0o700, exist_ok=True)
        env = dict(BASE_GIT_ENV, PATH=self.path, HOME=home)
        if auth:
            env.update(self._auth_env())
        r = subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=timeout,
        )
        if r.returncode != 0:
            err = r.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CommandError(
                "git %s failed: %s" % (args[0], (err[-1] if err else "exit %d" % r.returncode))
            )
        return r.stdout.decode("utf-8", "replace")

    # ------------------------------------------------------------- checkout

    def checkout(self, uid: Optional[int], gid: Optional[int]) -> Optional[str]:
        """Clone the base branch into the workspace on the job branch; None when it is already a checkout
        (a later sandbox on the same volume). Returns the base commit."""
        if not self.enabled or os.path.isdir(os.path.join(self.workspace, ".git")):
            return None
        os.makedirs(self.private, 0o700, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="clone-", dir=self.private)
        try:
            try:
                self._git(["clone", "-q", "--no-tags", "--branch", self.base, "--", self.url, tmp], auth=True)
            except CommandError as exc:
                raise CommandError(
                    "checkout of %s (branch %s) failed: %s" % (self.url, self.base, exc)
                ) from None
            self._git(["checkout", "-q", "-b", self.branch or ("hangar/work")], cwd=tmp)
            self._git(["config", "user.name", IDENTITY[0]], cwd=tmp)
            self._git(["config", "user.email", IDENTITY[1]], cwd=tmp)
            base = self._git(["rev-parse", "HEAD"], cwd=tmp).strip()
            self._git(["config", "hangar.base", base], cwd=tmp)
            for name in os.listdir(tmp):
                shutil.move(os.path.join(tmp, name), os.path.join(self.workspace, name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if uid is not None and gid is not None:
            for dirpath, dirnames, filenames in os.walk(self.workspace):
                for n in [dirpath] + [os.path.join(dirpath, x) for x in dirnames + filenames]:
                    os.chown(n, uid, gid, follow_symlinks=False)
        return base


def run_as_agent(
    argv: List[str],
    cwd: str,
    env: Dict[str, str],
    uid: Optional[int],
    gid: Optional[int],
    timeout: float,
    keep: int = OUTPUT_MAX,
) -> Dict[str, Any]:
    """Run ``argv`` as the agent: its uid, its environment, its own process group (killed on timeout).
    The combined output's last OUTPUT_MAX bytes come back."""

    def demote() -> None:
        os.setsid()
        if uid is not None and os.getuid() == 0:
            os.setgroups([])
            os.setgid(gid if gid is not None else uid)
            os.setuid(uid)

    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=demote
    )
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()
    text = out[-keep:].decode("utf-8", "replace")
    return {
        "exit_code": proc.returncode,
        "output": text,
        "truncated": len(out) > keep,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 3),
    }


def verify(
    repo: Repo, body: Dict[str, Any], env: Dict[str, str], uid: Optional[int], gid: Optional[int]
) -> Dict[str, Any]:
    command = body.get("command")
    if not isinstance(command, str) or not command.strip():
        raise CommandError("verify needs a command")
    timeout = float(body.get("timeout_seconds") or 600)
    result = run_as_agent(["/bin/sh", "-c", command], repo.workspace, env, uid, gid, timeout)
    result["passed"] = result["exit_code"] == 0 and not result["timed_out"]
    result["command"] = command
    result["diff_lines"] = diff_size(repo, env, uid, gid)
    try:  # the work as verified, which the job's patch route shows until it is delivered
        work = work_patch(repo, env, uid, gid)
    except CommandError:
        work = None
    if work is not None:
        for k in ("patch", "patch_truncated", "base", "head"):
            result[k] = work[k]
    return result


def diff_size(repo: Repo, env: Dict[str, str], uid: Optional[int], gid: Optional[int]) -> Optional[int]:
    """Lines added and removed against the base, committed or not (as the agent: it only ranks attempts)."""
    git_env = dict(env, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    base = run_as_agent(["git", "config", "hangar.base"], repo.workspace, git_env, uid, gid, 30)
    if base["exit_code"] != 0 or not base["output"].strip():
        return None
    run_as_agent(["git", "add", "-A"], repo.workspace, git_env, uid, gid, 60)
    r = run_as_agent(
        ["git", "diff", "--cached", "--numstat", base["output"].strip()],
        repo.workspace,
        git_env,
        uid,
        gid,
        60,
    )
    if r["exit_code"] != 0:
        return None
    return sum(_added_removed(line) for line in r["output"].splitlines() if line)


def work_patch(
    repo: Repo, env: Dict[str, str], uid: Optional[int], gid: Optional[int]
) -> Optional[Dict[str, Any]]:
    """The workspace's work, committed or not (untracked files too, ignored ones not), as one patch against
    the checkout's base commit, read as the agent (it is the agent's work to show, not to push). None when
    the workspace is not a checkout. The agent's own index is copied, never written."""
    ws = repo.workspace
    git_env = dict(env, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    base = run_as_agent(["git", "config", "hangar.base"], ws, git_env, uid, gid, 30)
    if base["exit_code"] != 0 or not base["output"].strip():
        return None
    base_sha = base["output"].strip()
    head = run_as_agent(["git", "rev-parse", "HEAD"], ws, git_env, uid, gid, 30)
    # Its own name: a verification's and a turn's end may read the work at once.
    index = os.path.join(ws, ".git", "hangar-patch-%s.index" % os.urandom(6).hex())
    with_index = dict(git_env, GIT_INDEX_FILE=index)
    try:
        # The copy keeps the index's stat cache: only changed files are read again.
        run_as_agent(["cp", "-f", os.path.join(ws, ".git", "index"), index], ws, git_env, uid, gid, 60)
        added = run_as_agent(["git", "add", "-A"], ws, with_index, uid, gid, 300)
        if added["exit_code"] != 0:
            raise CommandError("reading the work failed: %s" % added["output"].strip()[-300:])
        # No rename detection: its "too many files" warning would land in the patch (stderr is merged).
        diff = [
            "git",
            "diff",
            "--cached",
            "--binary",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            base_sha,
        ]
        patch = run_as_agent(diff, ws, with_index, uid, gid, 300, keep=PATCH_MAX + 1)
        numstat = run_as_agent(
            ["git", "diff", "--cached", "--numstat", "--no-renames", base_sha], ws, with_index, uid, gid, 300
        )
    finally:
        run_as_agent(["rm", "-f", index], ws, git_env, uid, gid, 30)
    if patch["exit_code"] != 0:
        raise CommandError("reading the work failed: %s" % patch["output"].strip()[-300:])
    lines = [x for x in numstat["output"].splitlines() if x] if numstat["exit_code"] == 0 else []
    text = patch["output"]
    return {
        "base": base_sha,
        "head": head["output"].strip() if head["exit_code"] == 0 else None,
        "patch": text[:PATCH_MAX],
        "patch_truncated": bool(patch["truncated"]) or len(text) > PATCH_MAX,
        "files_changed": len(lines),
        "diff_lines": sum(_added_removed(x) for x in lines),
    }


def deliver(
    repo: Repo, body: Dict[str, Any], env: Dict[str, str], uid: Optional[int], gid: Optional[int]
) -> Dict[str, Any]:
    """Commit what the agent left uncommitted, take its branch out (a bundle, as the agent), compute the patch
    against the base and, with ``push``, push it to ``branch`` on the remote: pushed only when the remote has
    no such branch (or it is already at this commit, or at ``lease``: a follow-up's update)."""
    if not repo.enabled:
        raise CommandError("this sandbox has no repository")
    ws = repo.workspace
    message = str(body.get("message") or "hangar: the agent's work")[:2000]
    git_env = dict(env, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    # As the agent: whatever it left uncommitted becomes a commit of its work.
    steps = [
        ["git", "add", "-A"],
        [
            "git",
            "-c",
            "user.name=%s" % IDENTITY[0],
            "-c",
            "user.email=%s" % IDENTITY[1],
            "commit",
            "-q",
            "--no-verify",
            "--allow-empty-message",
            "-m",
            message,
        ],
    ]
    status = run_as_agent(["git", "status", "--porcelain"], ws, git_env, uid, gid, 60)
    if status["exit_code"] != 0:
        raise CommandError("the workspace is not a git checkout: %s" % status["output"].strip()[-300:])
    if status["output"].strip():
        for argv in steps:
            r = run_as_agent(argv, ws, git_env, uid, gid, 120)
            if r["exit_code"] != 0:
                raise CommandError("committing the work failed: %s" % r["output"].strip()[-300:])
    bundle_dir = os.path.join(ws, ".git")
    bundle = os.path.join(bundle_dir, "hangar-work.bundle")
    r = run_as_agent(["git", "bundle", "create", "-q", bundle, "HEAD"], ws, git_env, uid, gid, 300)
    if r["exit_code"] != 0:
        raise CommandError("reading the work failed: %s" % r["output"].strip()[-300:])
    # Root's own copy, made without following a link the agent may have put there.
    private = os.path.join(repo.private, "work.git")
    os.makedirs(repo.private, 0o700, exist_ok=True)
    if not os.path.isdir(private):
        repo._git(["init", "-q", "--bare", private])
    copy = os.path.join(repo.private, "work.bundle")
    fd = os.open(bundle, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        with os.fdopen(fd, "rb") as src, open(copy, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        try:
            os.unlink(bundle)
        except OSError:
            pass
    repo._git(["-C", private, "fetch", "-q", "--no-tags", copy, "+HEAD:refs/heads/work"])
    head = repo._git(["-C", private, "rev-parse", "refs/heads/work"]).strip()
    repo._git(
        [
            "-C",
            private,
            "fetch",
            "-q",
            "--no-tags",
            "--",
            repo.url,
            "+refs/heads/%s:refs/heads/base" % repo.base,
        ],
        auth=True,
    )
    base = repo._git(["-C", private, "merge-base", "refs/heads/base", "refs/heads/work"]).strip()
    patch = repo._git(["-C", private, "diff", "--binary", base, head])
    files = [
        line for line in repo._git(["-C", private, "diff", "--numstat", base, head]).splitlines() if line
    ]
    result: Dict[str, Any] = {
        "head": head,
        "base": base,
        "patch": patch[:PATCH_MAX],
        "patch_truncated": len(patch) > PATCH_MAX,
        "files_changed": len(files),
        "diff_lines": sum(_added_removed(line) for line in files),
        "pushed": False,
    }
    branch = body.get("branch")
    if not body.get("push"):
        return result
    if not isinstance(branch, str) or not branch:
        raise CommandError("deliver with push needs a branch")
    if head == base:
        raise CommandError("there is nothing to deliver: the branch has no commit beyond %s" % repo.base)
    ref = "refs/heads/" + branch
    remote = repo._git(["ls-remote", "--", repo.url, ref], auth=True).split()
    current = remote[0] if remote else None
    lease = body.get("lease") if isinstance(body.get("lease"), str) else None
    if current == head:
        result.update(pushed=True, already=True, branch=branch)
        return result
    if current is not None and current != lease:
        raise CommandError(
            "branch %s already exists on the remote (at %s): hangar doesn't overwrite it"
            % (branch, current[:12])
        )
    lease_arg = "--force-with-lease=%s:%s" % (ref, current or "")
    repo._git(["-C", private, "push", "-q", lease_arg, "--", repo.url, "%s:%s" % (head, ref)], auth=True)
    result.update(pushed=True, already=False, branch=branch)
    return result


def _added_removed(numstat: str) -> int:
    parts = numstat.split("\t")
    return sum(int(p) for p in parts[:2] if p.isdigit())


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
