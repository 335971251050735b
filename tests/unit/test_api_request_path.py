"""What every REST request passes on its way to a route and back costs no hop it need not: no dependency on
a worker thread, no middleware that runs the rest of the app in a task of its own. A session's create
waited on both before its apiserver write and before its answer."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from prometheus_client import REGISTRY
from starlette.middleware.base import BaseHTTPMiddleware

from tests.unit.api_rig import ADMIN, api_rig


def _calls(d: Dependant) -> Iterator[Any]:
    for sub in d.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def _routes(routes: list[Any]) -> Iterator[APIRoute]:
    for r in routes:
        if isinstance(r, APIRoute):
            yield r
        included = getattr(r, "original_router", None)  # FastAPI keeps an included router's routes there
        if included is not None:
            yield from _routes(included.routes)


def test_no_route_has_a_dependency_that_runs_on_a_worker_thread(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        routes = list(_routes(rig.client.app.routes))  # type: ignore[attr-defined]
        assert any(r.path == "/api/sessions" for r in routes)
        sync = {
            f"{r.path} {sorted(r.methods)}: {getattr(c, '__qualname__', c)}"
            for r in routes
            for c in _calls(r.dependant)
            # FastAPI awaits a coroutine function, or an object whose __call__ is one (HTTPBearer).
            if not inspect.iscoroutinefunction(c if inspect.isroutine(c) else type(c).__call__)
        }
        assert not sync, f"dependencies FastAPI would run on a worker thread: {sorted(sync)}"


def _count(method: str, route: str, status: str) -> float:
    labels = {"method": method, "route": route, "status": status}
    return REGISTRY.get_sample_value("hangar_api_requests_total", labels) or 0.0


def test_requests_are_counted_by_route_and_status_by_a_plain_asgi_middleware(tmp_path: Path) -> None:
    with api_rig(tmp_path) as rig:
        app: Any = rig.client.app
        assert not [m for m in app.user_middleware if m.cls is BaseHTTPMiddleware], (
            "a BaseHTTPMiddleware runs the app in a task of its own and streams its answer back"
        )
        rig.env()
        created = _count("POST", "/api/sessions", "201")
        refused = _count("POST", "unmatched", "401") + _count("POST", "/api/sessions", "401")
        unmatched = _count("GET", "unmatched", "404")
        assert rig.post("/api/sessions", {"name": "s1", "environment": "default"}).status_code == 201
        assert (
            rig.post("/api/sessions", {"name": "s2", "environment": "default"}, token=None).status_code == 401
        )
        assert rig.client.get("/nowhere", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 404
        assert _count("POST", "/api/sessions", "201") == created + 1
        # The guard's refusal comes before routing: counted, with no route.
        assert _count("POST", "unmatched", "401") + _count("POST", "/api/sessions", "401") == refused + 1
        assert _count("GET", "unmatched", "404") == unmatched + 1
