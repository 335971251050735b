"""The route class of every REST router: it declares, besides the route's own answers, the errors the
guard and the handlers give (``{"detail": str}``, :class:`hangar_api.errors.Problem`): 401/403/413/422/503
on every authenticated route, 404 where the path names something, 409 and 429 on the writing routes. It
also answers with ``exclude_unset``, so an optional key a view leaves out stays out (the document marks
those keys optional). The document itself: ``hangar_api/openapi.py``."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from .errors import Problem
from .guard import WRITES, guarded

WHY: dict[int, str] = {
    401: "No bearer token, or an unknown one (checked before the body is read)",
    403: "The token's role may not use this route",
    404: "Nothing of that name (or a name that can't be one), or a job that is not the caller's",
    409: "The state does not allow it now (the reason says why)",
    413: "The request body is over HANGAR_API_BODY_MAX_BYTES, or the apiserver refused the object's size",
    422: "The request is not valid: the reason names the field and what it allows",
    429: "Over the per-token write rate (HANGAR_API_WRITE_RATE, HANGAR_API_WRITE_BURST); see Retry-After",
    503: "The Kubernetes API could not be reached or did not answer; try again (Retry-After)",
}


def error_statuses(path: str, methods: set[str]) -> list[int]:
    if not guarded(path):
        return []
    out = [401, 403, 413, 422, 503]
    if "{" in path:
        out.append(404)
    if methods & WRITES:
        out += [409, 429]
    return sorted(out)


class Route(APIRoute):
    def __init__(self, path: str, endpoint: Any, **kw: Any) -> None:
        methods = {m.upper() for m in kw.get("methods") or ()}
        declared: dict[int | str, Any] = {
            s: {"model": Problem, "description": WHY[s]} for s in error_statuses(path, methods)
        }
        media = getattr(kw.get("response_class"), "media_type", None)
        if media and "json" not in media:
            # A route that answers other than JSON (a patch) still refuses in JSON: FastAPI would file a
            # model under the route's media type, so the errors name their content themselves.
            ref = {"$ref": f"#/components/schemas/{Problem.__name__}"}
            for s in declared:
                declared[s] = {"description": WHY[int(s)], "content": {"application/json": {"schema": ref}}}
        if 429 in declared:
            declared[429]["headers"] = {
                "Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}
            }
        declared.update(kw.get("responses") or {})
        kw["responses"] = declared
        kw["response_model_exclude_unset"] = True
        super().__init__(path, endpoint, **kw)
