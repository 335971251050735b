"""The forge's API, GitHub's REST subset hangar uses: a repository, its pull requests, issue comments.

A small httpx client rather than a generated SDK (githubkit): hangar calls five endpoints, and the SDK's
thousands of generated models cost seconds of import in the operator for nothing we use
(docs/architecture.md, "The forge"). ``base_url`` is ``https://api.github.com`` for github.com,
``https://<host>/api/v3`` for GitHub Enterprise, and the simulator's URL in tests
(``hangar/testing/github.py``): the same code talks to all three.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

GITHUB_API = "https://api.github.com"
_SLUG = re.compile(r"^/?([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


class ForgeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def foreign_repository(asked: str, environment: str, known: str | None) -> str | None:
    """Why a job may not name ``asked`` in ``environment`` (whose repository is ``known``): hangar holds
    credentials only for the Environment's own. None when it may (or names none)."""
    if not asked or (known is not None and asked.rstrip("/") == known.rstrip("/")):
        return None
    has = f"its repository is {known}" if known else "it names no repository"
    return (
        f"repository {asked!r} is not environment {environment!r}'s ({has}): hangar has no credentials for it"
    )


def repo_slug(url: str) -> str | None:
    """``owner/name`` from a repository URL (``https://github.com/acme/app.git`` → ``acme/app``)."""
    m = _SLUG.match(urlsplit(url).path)
    return f"{m.group(1)}/{m.group(2)}" if m else None


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    head_sha: str
    state: str
    title: str
    body: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> PullRequest:
        return cls(
            number=int(obj["number"]),
            url=str(obj.get("html_url") or ""),
            head_sha=str((obj.get("head") or {}).get("sha") or ""),
            state=str(obj.get("state") or ""),
            title=str(obj.get("title") or ""),
            body=str(obj.get("body") or ""),
        )


class GitHub:
    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") or GITHUB_API,
            timeout=timeout,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "hangar",
            },
        )

    async def __aenter__(self) -> GitHub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = await self.http.request(method, path, **kw)
        except httpx.HTTPError as err:
            raise ForgeError(0, f"{method} {path}: {err.__class__.__name__}: {err}") from None
        if r.status_code >= 400:
            try:
                detail = r.json()
                message = str(detail.get("message") or "")
                errors = detail.get("errors") or []
                extra = "; ".join(
                    str(e.get("message") or e.get("code") or e) for e in errors if isinstance(e, dict)
                )
            except ValueError:
                message, extra = r.text[:200], ""
            text = f"{method} {path} answered {r.status_code}: {message}" + (f" ({extra})" if extra else "")
            raise ForgeError(r.status_code, text)
        return r.json() if r.content else None

    async def repo(self, slug: str) -> dict[str, Any]:
        return dict(await self._call("GET", f"/repos/{slug}"))

    async def branch_exists(self, slug: str, branch: str) -> bool:
        try:
            await self._call("GET", f"/repos/{slug}/branches/{branch}")
        except ForgeError as err:
            if err.status == 404:
                return False
            raise
        return True

    async def open_pull_for(self, slug: str, branch: str) -> PullRequest | None:
        owner = slug.split("/")[0]
        found = await self._call(
            "GET", f"/repos/{slug}/pulls", params={"head": f"{owner}:{branch}", "state": "open"}
        )
        return PullRequest.of(found[0]) if found else None

    async def create_pull(self, slug: str, branch: str, base: str, title: str, body: str) -> PullRequest:
        obj = await self._call(
            "POST", f"/repos/{slug}/pulls", json={"title": title, "head": branch, "base": base, "body": body}
        )
        return PullRequest.of(obj)

    async def update_pull(self, slug: str, number: int, **fields: str) -> PullRequest:
        return PullRequest.of(await self._call("PATCH", f"/repos/{slug}/pulls/{number}", json=fields))

    async def comment(self, slug: str, number: int, body: str) -> None:
        await self._call("POST", f"/repos/{slug}/issues/{number}/comments", json={"body": body})

    async def comments(self, slug: str, number: int) -> list[dict[str, Any]]:
        """Every comment of the issue or pull request, page by page (GitHub gives at most 100 a page)."""
        out: list[dict[str, Any]] = []
        for page in range(1, COMMENT_PAGES_MAX + 1):
            got = await self._call(
                "GET", f"/repos/{slug}/issues/{number}/comments", params={"per_page": 100, "page": page}
            )
            out += [c for c in got or [] if isinstance(c, dict)]
            if len(got or []) < 100:
                return out
        raise ForgeError(0, f"pull request #{number} has over {COMMENT_PAGES_MAX * 100} comments")


COMMENT_PAGES_MAX = 50


def comment_marker(key: str) -> str:
    """An HTML comment (GitHub doesn't show it) naming what a comment of hangar's is about."""
    return f"<!-- hangar:{key} -->"


async def ensure_comment(gh: GitHub, slug: str, number: int, key: str, body: str) -> bool:
    """Post ``body`` on pull request ``number`` once for ``key``: the comment carries ``key``'s marker, and a
    comment that already has it (posted before a restart lost the record of it) is not posted again.
    Returns whether it posted."""
    marker = comment_marker(key)
    if any(marker in str(c.get("body") or "") for c in await gh.comments(slug, number)):
        return False
    await gh.comment(slug, number, f"{body}\n\n{marker}")
    return True


async def ensure_pull(
    gh: GitHub, slug: str, branch: str, base: str, title: str, body: str
) -> tuple[PullRequest, bool]:
    """The open pull request for ``branch``, made if there is none: (pull request, created).

    Looked up by head branch first, so a delivery repeated after a restart (the PR was made but its answer
    was lost) finds the first one instead of opening a second; a 422 "already exists" from a race is
    answered the same way."""
    existing = await gh.open_pull_for(slug, branch)
    if existing is not None:
        return existing, False
    try:
        return await gh.create_pull(slug, branch, base, title, body), True
    except ForgeError as err:
        if err.status == 422 and "already exists" in str(err):
            again = await gh.open_pull_for(slug, branch)
            if again is not None:
                return again, False
        raise
