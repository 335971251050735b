"""A GitHub simulator: the subset of GitHub's REST API hangar uses, as a real HTTP server on 127.0.0.1.

* ``GET /repos/{owner}/{repo}``; ``GET /repos/{owner}/{repo}/branches/{branch}`` (from the git server);
  ``GET /repos/{owner}/{repo}/pulls?head=owner:branch&state=open``;
  ``POST /repos/{owner}/{repo}/pulls`` ``{title, head, base, body?, draft?}`` (201; 422 when an open pull
  request for that head exists, or the head branch is not on the git server); ``GET`` and ``PATCH
  /repos/{owner}/{repo}/pulls/{n}`` (``title``, ``body``, ``state``); ``POST`` and ``GET
  /repos/{owner}/{repo}/issues/{n}/comments`` (``GET`` pages: ``per_page``, at most 100, 30 by default, and
  ``page``, as GitHub's).
* ``Authorization: Bearer <token>`` (or ``token <token>``) is checked on every request: 401 ``Bad
  credentials`` otherwise, as GitHub answers. Bodies and answers are GitHub's field names.
* Everything it was sent is in ``requests`` (method, path, JSON body). ``fail(method, suffix, status)``
  makes the next matching request answer ``status`` (a 500, a 422); ``hold_creates`` makes ``POST …/pulls``
  create the pull request and then wait before answering (an operator killed mid-request);
  ``hold_comments`` does the same for ``POST …/comments``.

With a :class:`~hangar.testing.git_server.GitServer` (``git=``) a pull request's head sha is the branch's
commit on that server, and a head branch that isn't there is refused as GitHub refuses it.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .git_server import GitServer
from .json_handler import JsonHandler


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Sent:
    method: str
    path: str
    body: Any


@dataclass
class GitHubSimulator:
    token: str = "gh-token"
    git: GitServer | None = None
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[Sent] = field(default_factory=list)
    failures: list[tuple[str, str, int]] = field(default_factory=list)
    hold_creates: threading.Event | None = None
    hold_comments: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self, port: int = 0) -> GitHubSimulator:
        handler = type("Handler", (_Handler,), {"sim": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="github-sim", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def add_repo(self, slug: str, default_branch: str = "main") -> None:
        self.repos[slug] = {
            "full_name": slug,
            "name": slug.split("/")[1],
            "owner": {"login": slug.split("/")[0]},
            "default_branch": default_branch,
            "html_url": f"https://github.test/{slug}",
            "private": True,
        }
        self.pulls.setdefault(slug, [])

    def fail(self, method: str, suffix: str, status: int) -> None:
        """The next ``method`` request whose path ends with ``suffix`` answers ``status``."""
        with self.lock:
            self.failures.append((method, suffix, status))

    def sent(self, method: str, suffix: str = "") -> list[Sent]:
        with self.lock:
            return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def open_pulls(self, slug: str) -> list[dict[str, Any]]:
        with self.lock:
            found = [p for p in self.pulls.get(slug, []) if p["state"] == "open"]
        for p in found:
            self.refresh(slug, p)
        return found

    def refresh(self, slug: str, pr: dict[str, Any]) -> None:
        """A pull request's head follows its branch, as on GitHub: a push to it moves ``head.sha``."""
        if self.git is not None and pr["state"] == "open":
            pr["head"]["sha"] = self.git.branch_head(slug, pr["head"]["ref"]) or pr["head"]["sha"]


class _Handler(JsonHandler):
    sim: GitHubSimulator
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        sim = self.sim
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            self.send_json(400, {"message": "Problems parsing JSON"})
            return
        with sim.lock:
            sim.requests.append(Sent(method, parts.path, body))
            failure = next((f for f in sim.failures if f[0] == method and parts.path.endswith(f[1])), None)
            if failure is not None:
                sim.failures.remove(failure)
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() not in ("bearer", "token") or token.strip() != sim.token:
            self.send_json(401, {"message": "Bad credentials", "status": "401"})
            return
        if failure is not None:
            self.send_json(failure[2], {"message": f"simulated failure {failure[2]}"})
            return
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)(/.*)?", parts.path)
        if m is None or m.group(1) not in sim.repos:
            self.send_json(404, {"message": "Not Found"})
            return
        slug, rest = m.group(1), m.group(2) or ""
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if rest == "" and method == "GET":
            self.send_json(200, sim.repos[slug])
        elif rest.startswith("/branches/") and method == "GET":
            branch = rest[len("/branches/") :]
            sha = sim.git.branch_head(slug, branch) if sim.git is not None else None
            if sha is None:
                self.send_json(404, {"message": "Branch not found"})
            else:
                self.send_json(200, {"name": branch, "commit": {"sha": sha}})
        elif rest == "/pulls" and method == "GET":
            self._list_pulls(slug, query)
        elif rest == "/pulls" and method == "POST":
            self._create_pull(slug, body if isinstance(body, dict) else {})
        elif (pm := re.fullmatch(r"/pulls/(\d+)", rest)) and method in ("GET", "PATCH"):
            self._pull(slug, int(pm.group(1)), method, body if isinstance(body, dict) else {})
        elif (cm := re.fullmatch(r"/issues/(\d+)/comments", rest)) and method in ("GET", "POST"):
            self._comments(slug, int(cm.group(1)), method, body if isinstance(body, dict) else {}, query)
        else:
            self.send_json(404, {"message": "Not Found"})

    def _list_pulls(self, slug: str, query: dict[str, str]) -> None:
        state = query.get("state", "open")
        head = query.get("head")
        with self.sim.lock:
            found = [
                p
                for p in self.sim.pulls[slug]
                if (state == "all" or p["state"] == state)
                and (head is None or f"{p['head']['label']}" == head)
            ]
        for p in found:
            self.sim.refresh(slug, p)
        self.send_json(200, found)

    def _create_pull(self, slug: str, body: dict[str, Any]) -> None:
        sim = self.sim
        missing = [k for k in ("title", "head", "base") if not isinstance(body.get(k), str) or not body[k]]
        if missing:
            self.send_json(
                422,
                {
                    "message": "Validation Failed",
                    "errors": [{"field": f, "code": "missing_field"} for f in missing],
                },
            )
            return
        owner = slug.split("/")[0]
        head_ref = body["head"].split(":", 1)[-1]
        sha = sim.git.branch_head(slug, head_ref) if sim.git is not None else "0" * 40
        if sha is None:
            self.send_json(
                422,
                {
                    "message": "Validation Failed",
                    "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                },
            )
            return
        with sim.lock:
            if any(p["head"]["ref"] == head_ref and p["state"] == "open" for p in sim.pulls[slug]):
                self.send_json(
                    422,
                    {
                        "message": "Validation Failed",
                        "errors": [
                            {
                                "resource": "PullRequest",
                                "code": "custom",
                                "message": f"A pull request already exists for {owner}:{head_ref}.",
                            }
                        ],
                    },
                )
                return
            number = sum(len(v) for v in sim.pulls.values()) + 1
            pr = {
                "number": number,
                "state": "open",
                "title": body["title"],
                "body": body.get("body") or "",
                "draft": bool(body.get("draft")),
                "html_url": f"https://github.test/{slug}/pull/{number}",
                "url": f"{sim.url}/repos/{slug}/pulls/{number}",
                "head": {"ref": head_ref, "sha": sha, "label": f"{owner}:{head_ref}"},
                "base": {"ref": body["base"]},
                "created_at": _now(),
                "updated_at": _now(),
            }
            sim.pulls[slug].append(pr)
        if sim.hold_creates is not None:
            sim.hold_creates.wait(30)  # created, but the answer is late: the caller may be gone by then
        self.send_json(201, pr)

    def _pull(self, slug: str, number: int, method: str, body: dict[str, Any]) -> None:
        sim = self.sim
        with sim.lock:
            pr = next((p for p in sim.pulls[slug] if p["number"] == number), None)
            if pr is not None and method == "PATCH":
                for k in ("title", "body", "state"):
                    if isinstance(body.get(k), str):
                        pr[k] = body[k]
                pr["updated_at"] = _now()
        if pr is None:
            self.send_json(404, {"message": "Not Found"})
        else:
            sim.refresh(slug, pr)
            self.send_json(200, pr)

    def _comments(
        self, slug: str, number: int, method: str, body: dict[str, Any], query: dict[str, str]
    ) -> None:
        sim = self.sim
        found: list[dict[str, Any]] | None = None
        comment: dict[str, Any] = {}
        per_page = min(int(query.get("per_page", "30") or 30), 100)
        page = max(int(query.get("page", "1") or 1), 1)
        with sim.lock:
            listing = sim.comments.setdefault((slug, number), [])
            if method == "GET":
                found = listing[(page - 1) * per_page : page * per_page]
            elif not isinstance(body.get("body"), str) or not body["body"]:
                found = None
            else:
                comment = {"id": len(listing) + 1, "body": body["body"], "created_at": _now()}
                listing.append(comment)
                found = [comment]
        if method == "GET":
            self.send_json(200, found)
        elif found is None:
            self.send_json(422, {"message": "Validation Failed"})
        else:
            if sim.hold_comments is not None:
                sim.hold_comments.wait(30)  # posted, but the answer is late: the caller may be gone by then
            self.send_json(201, comment)
