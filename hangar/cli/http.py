"""The CLI's one way to call the REST API: the current context's URL and token; errors end the command with
the API's reason."""

from __future__ import annotations

import sys
from typing import Any

import httpx

from .context import load


class ApiError(SystemExit):
    pass


def client() -> httpx.Client:
    ctx = load()
    return httpx.Client(base_url=ctx.api_url, headers={"Authorization": f"Bearer {ctx.token}"}, timeout=30)


def call(method: str, path: str, text: bool = False, **kw: Any) -> Any:
    """The answer's JSON (``text``: its body as text, e.g. a patch)."""
    with client() as c:
        r = c.request(method, path, **kw)
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail")
        except Exception:
            detail = r.text
        if isinstance(detail, list):  # FastAPI validation errors
            detail = "; ".join(
                f"{'.'.join(str(x) for x in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail
            )
        print(f"error {r.status_code}: {detail}", file=sys.stderr)
        raise ApiError(1)
    return r.text if text else r.json()
