"""The OpenAPI document, published as ``docs/openapi.json``: the app's own (``create_app``), whose routes
declare every status they answer (``hangar_api/routing.py``) and whose answers are the models of
``hangar_api/schemas.py``.

``python -m hangar_api.openapi`` rewrites docs/openapi.json; ``--check`` fails when it is stale (and
tests/unit/test_api_schemas.py does the same check).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from .app import create_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def document(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def render(app: FastAPI) -> str:
    return json.dumps(document(app), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _app() -> FastAPI:
    from hangar.config import load

    # The document does not depend on the deployment's settings; a token is needed to build the app.
    return create_app(load(admin_token="openapi-document", database_url="sqlite:///:memory:"))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render(_app())
    if "--check" in args:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is stale: run `python -m hangar_api.openapi`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(DOC)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
