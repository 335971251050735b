"""A git server on 127.0.0.1: bare repositories served by git's own smart HTTP (``git http-backend``, the
CGI program git ships) behind a small HTTP server that checks basic-auth credentials, as a forge does.

``GitServer(root).start()``; ``server.create("acme/app", files={"README.md": "hi\\n"})`` makes a bare
repository with one commit on ``main``; its URL is ``server.url("acme/app")``
(``http://127.0.0.1:<port>/acme/app.git``). Every request needs ``Authorization: Basic`` with a user and
password the server knows (``server.users``); anything else gets 401, and a path outside ``root`` 404. Clone,
fetch and push work with the real git client, so what the test reads back (``server.branch_head``,
``server.show``) is what a real remote would hold; ``hold_pushes`` stops pushes midway until it is set.

Command line: ``python -m hangar.testing.git_server ROOT --user U --password P [--port N]``.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "HOME": "/nonexistent"}
IDENTITY = ["-c", "user.name=git-server", "-c", "user.email=git-server@hangar.invalid"]


def _git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=check,
        timeout=60,
    )


class GitServer:
    def __init__(self, root: Path, users: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.users = dict(users or {"hangar": "git-token"})
        self.requests: list[tuple[str, str, str]] = []  # (method, path, user or "")
        self.lock = threading.Lock()
        # While set, a push (POST …/git-receive-pack) waits for the event before git takes it: a test can
        # stop hangar in the middle of a push.
        self.hold_pushes: threading.Event | None = None
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ server

    def start(self, port: int = 0) -> GitServer:
        handler = type("Handler", (_Handler,), {"git": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="git-server", daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, slug: str) -> str:
        return f"{self.base_url}/{slug}.git"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- repositories

    def path(self, slug: str) -> Path:
        return self.root / f"{slug}.git"

    def create(self, slug: str, files: dict[str, str] | None = None, branch: str = "main") -> Path:
        """A bare repository with one commit of ``files`` on ``branch`` (its HEAD)."""
        bare = self.path(slug)
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git("init", "--bare", "-q", "-b", branch, str(bare))
        _git("config", "http.receivepack", "true", cwd=bare)
        with tempfile.TemporaryDirectory(prefix="git-seed-") as tmp:
            work = Path(tmp)
            _git("init", "-q", "-b", branch, cwd=work)
            for name, text in (files or {"README.md": f"# {slug}\n"}).items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_text(text)
            _git("add", "-A", cwd=work)
            _git(*IDENTITY, "commit", "-q", "-m", "initial commit", cwd=work)
            _git("push", "-q", str(bare), f"HEAD:refs/heads/{branch}", cwd=work)
        return bare

    def branch_head(self, slug: str, branch: str) -> str | None:
        r = _git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", cwd=self.path(slug), check=False)
        return r.stdout.strip() or None

    def branches(self, slug: str) -> list[str]:
        r = _git("for-each-ref", "--format=%(refname:short)", "refs/heads", cwd=self.path(slug))
        return r.stdout.split()

    def show(self, slug: str, rev: str, path: str) -> str:
        return _git("show", f"{rev}:{path}", cwd=self.path(slug)).stdout

    def log(self, slug: str, rev: str) -> list[str]:
        """Commit subjects from ``rev`` back, newest first."""
        return _git("log", "--format=%s", rev, cwd=self.path(slug)).stdout.splitlines()

    def remove(self, slug: str) -> None:
        shutil.rmtree(self.path(slug), ignore_errors=True)


class _Handler(BaseHTTPRequestHandler):
    git: GitServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _user(self) -> str | None:
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        known = self.git.users.get(user)
        if known is None or not hmac.compare_digest(known.encode(), password.encode()):
            return None
        return user

    def _plain(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        data = text.encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        user = self._user()
        body = self._body() if self.command == "POST" else b""
        with self.git.lock:
            self.git.requests.append((self.command, parts.path, user or ""))
        if user is None:
            # git sends credentials only after a 401 with a challenge, as from github.com.
            self._plain(401, "authentication required\n", {"WWW-Authenticate": 'Basic realm="git"'})
            return
        repo = parts.path.split(".git/", 1)[0] if ".git/" in parts.path else ""
        if not repo or ".." in parts.path or not (self.git.root / f"{repo.lstrip('/')}.git").is_dir():
            self._plain(404, "repository not found\n")
            return
        env = {
            **os.environ,
            **GIT_ENV,
            "GIT_PROJECT_ROOT": str(self.git.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        hold = self.git.hold_pushes
        if hold is not None and self.command == "POST" and parts.path.endswith("/git-receive-pack"):
            hold.wait(120)
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        r = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=120)
        head, _, payload = r.stdout.partition(b"\r\n\r\n")
        if not _ and b"\n\n" in r.stdout:
            head, _, payload = r.stdout.partition(b"\n\n")
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hangar.testing.git_server")
    p.add_argument("root")
    p.add_argument("--user", default="hangar")
    p.add_argument("--password", default="git-token")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--create", action="append", default=[], help="a repository slug to create (owner/name)")
    a = p.parse_args(argv)
    server = GitServer(Path(a.root), {a.user: a.password}).start(a.port)
    for slug in a.create:
        if not server.path(slug).exists():
            server.create(slug)
    print(server.base_url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
