"""The sessions REST API refuses bad input with a clear 4xx and changes nothing."""

from __future__ import annotations

import httpx
import pytest

from hangar.devcluster.stack import Stack

from .conftest import Cluster
from .helpers import Api, environment

pytestmark = pytest.mark.e2e


def names(cluster: Cluster, kind: str) -> list[str]:
    return sorted(cluster.kubectl("get", kind, "-o", "name").stdout.split())


def test_tokens_and_roles(stack: Stack) -> None:
    r = httpx.get(f"{stack.api_url}/api/sessions")
    assert r.status_code == 401 and r.json()["detail"] == "missing bearer token"
    r = httpx.get(f"{stack.api_url}/api/sessions", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["detail"] == "unknown token"


def test_bad_session_input_is_refused_and_nothing_is_created(cluster: Cluster, stack: Stack) -> None:
    api = Api(stack)
    environment(cluster, "api-env", {})
    before = names(cluster, "hsess")
    r = api.post("/api/sessions", {"name": "no-env", "environment": "missing-env", "message": "hi"})
    assert r.status_code == 422 and "unknown environment 'missing-env'" in r.json()["detail"]
    for bad in ("Bad_Name", "-x", "a" * 41, ""):
        r = api.post("/api/sessions", {"name": bad, "environment": "api-env"})
        assert r.status_code == 422, bad
        assert r.json()["detail"].startswith("name: "), r.text
    r = api.post("/api/sessions", {"name": "ok-name", "environment": "api-env", "harness": "emacs"})
    assert r.status_code == 422 and r.json()["detail"].startswith("harness: "), r.text
    r = api.post("/api/sessions", {"name": "ok-name", "environment": "api-env", "message": ""})
    assert r.status_code == 422 and r.json()["detail"].startswith("message: "), r.text
    r = api.post("/api/sessions", {"name": "ok-name", "environment": "api-env", "approvals": "yolo"})
    assert r.status_code == 422
    assert names(cluster, "hsess") == before


def test_session_lifecycle_errors(cluster: Cluster, stack: Stack) -> None:
    api = Api(stack)
    environment(cluster, "api-env", {})
    assert api.post("/api/sessions", {"name": "api-dup", "environment": "api-env"}).status_code == 201
    r = api.post("/api/sessions", {"name": "api-dup", "environment": "api-env"})
    assert r.status_code == 409 and "already exists" in r.json()["detail"]
    assert api.get("/api/sessions/nope").status_code == 404
    assert api.get("/api/sessions/api-dup/turns/7").status_code == 404
    assert api.get("/api/sessions/api-dup/events", params={"since": -1}).status_code == 422
    r = api.post("/api/sessions/api-dup/messages", {"message": ""})
    assert r.status_code == 422
    r = api.post("/api/sessions/api-dup/messages", {})
    assert r.status_code == 422
    assert names(cluster, "hturn") == [n for n in names(cluster, "hturn") if "api-dup" not in n]
    assert api.delete("/api/sessions/api-dup").status_code == 202
    r = api.post("/api/sessions/api-dup/messages", {"message": "are you there?"})
    assert r.status_code == 404 and r.json()["detail"] == "no session 'api-dup'"
    assert api.delete("/api/sessions/api-dup").status_code == 404
    assert not [n for n in names(cluster, "hturn") if "api-dup" in n]


def test_openapi_is_published(stack: Stack) -> None:
    doc = httpx.get(f"{stack.api_url}/openapi.json").json()
    assert "/api/sessions/{ref}/messages" in doc["paths"]
    schema = doc["components"]["schemas"]["NewSession"]
    assert schema["properties"]["harness"]["enum"] == ["claude", "codex", "pi", "antigravity"]


def test_health_and_metrics_endpoints(stack: Stack) -> None:
    for base in (stack.api_url, stack.operator_url):
        assert httpx.get(f"{base}/healthz").text == "ok"
        assert httpx.get(f"{base}/readyz").status_code == 200
    op = httpx.get(f"{stack.operator_url}/metrics").text
    assert "hangar_sandboxes_started_total" in op and "hangar_turns_total" in op
    httpx.get(f"{stack.api_url}/api/sessions", headers={"Authorization": f"Bearer {stack.token}"})
    api = httpx.get(f"{stack.api_url}/metrics").text
    assert 'hangar_api_requests_total{method="GET",route="/api/sessions",status="200"}' in api


def test_references_that_are_not_names_are_refused_before_the_apiserver(
    cluster: Cluster, stack: Stack
) -> None:
    """Issue 11, finding 3 and 4 on the real apiserver: '.' read the whole list (and passed), 'default/'
    reached another path, '%' and an approval id '%25' answered 500, since=2^63 overflowed SQLite."""
    api = Api(stack)
    environment(cluster, "api-env", {})
    before = names(cluster, "hsess")
    for env in (".", "default/", "%", "..", "api-env/", "api-env/status"):
        r = api.post("/api/sessions", {"name": "ref-check", "environment": env})
        assert r.status_code == 422 and "environment" in r.json()["detail"], (env, r.text)
        r = api.post("/api/jobs", {"prompt": "p", "environment": env, "name": "ref-check-job"})
        assert r.status_code == 422, (env, r.text)
    assert names(cluster, "hsess") == before
    assert names(cluster, "hjob") == [n for n in names(cluster, "hjob") if "ref-check" not in n]
    assert api.post("/api/sessions", {"name": "ref-ok", "environment": "api-env"}).status_code == 201
    for approval in ("%25", "%2e", "%2e%2e", "a%2Fb", "%00"):
        r = api.get(f"/api/sessions/ref-ok/approvals/{approval}")
        assert r.status_code == 404, (approval, r.text)
        r = api.post(f"/api/sessions/ref-ok/approvals/{approval}", {"decision": "allow"})
        assert r.status_code == 404, (approval, r.text)
    for since in (2**63, 2**64):
        assert api.get("/api/sessions/ref-ok/events", params={"since": since}).status_code == 422
    r = api.get("/api/sessions/ref-ok/events", params={"since": 2**63 - 1})
    assert r.status_code == 200 and r.json()["events"] == []
    r = api.post(
        "/api/sessions", {"name": "ref-model", "environment": "api-env", "model": "m" * 5 * 1024 * 1024}
    )
    assert r.status_code == 413, r.text[:300]  # over the 4 MiB body limit
    r = api.post(
        "/api/sessions", {"name": "ref-emoji", "environment": "api-env", "message": "\U0001f600" * 262144}
    )
    assert r.status_code in (413, 422), r.text[:300]  # 1 MiB of text, ~1.5 MiB escaped: over the body limit
    r = api.http.post(
        "/api/sessions",
        content=b'{"name": "ref-nan", "environment": "api-env", "message": "\\ud800"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert not [
        n for n in names(cluster, "hsess") if n.split("/")[-1] in ("ref-model", "ref-emoji", "ref-nan")
    ]
    assert api.delete("/api/sessions/ref-ok").status_code == 202
