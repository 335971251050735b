"""Issue 11, the API side: what a client sends can't make the api answer 500, echo a huge input, skip
authentication or reach the apiserver with a name that is not one. Driven through the real app
(``tests/unit/api_rig.py``: the app, its Kube the in-process fake)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hangar.kube import Obj
from hangar.models.limits import MODEL_MAX
from hangar.testing.fake_kube import FakeKube
from tests.unit.api_rig import ALICE, ApiRig, api_rig, auth


class CountingKube(FakeKube):
    """The fake, counting reads: a refused name must not reach the apiserver at all."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, str]] = []

    async def get(self, plural: str, name: str) -> Obj | None:
        self.reads.append(("get", plural))
        return await super().get(plural, name)

    async def list(self, plural: str, label_selector: str | None = None) -> list[Obj]:
        self.reads.append(("list", plural))
        return await super().list(plural, label_selector)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ApiRig]:
    with api_rig(tmp_path) as r:
        r.env()
        yield r


def new_session(rig: ApiRig, name: str = "s1", **body: Any) -> Any:
    return rig.post("/api/sessions", {"name": name, "environment": "default", **body})


# --- 3. references validated before any apiserver call ------------------------------------------------
@pytest.mark.parametrize("env", [".", "default/", "%", "..", "a/b", "Default", "x" * 64, "-a"])
def test_an_environment_that_is_not_a_name_is_422_before_the_apiserver_is_asked(
    tmp_path: Path, env: str
) -> None:
    kube = CountingKube()
    with api_rig(tmp_path, kube=kube) as rig:
        rig.env()
        r = new_session(rig, environment=env)
        assert r.status_code == 422, r.text
        assert "environment" in r.json()["detail"]
        r = rig.post("/api/jobs", {"prompt": "p", "environment": env})
        assert r.status_code == 422, r.text
        assert kube.reads == [], "a refused name reached the apiserver"
        assert kube.peek("sessions", "s1") is None


@pytest.mark.parametrize("approval", ["%25", "%2e", "%2e%2e", "a%2Fb", "AP-1", "x" * 300])
def test_an_approval_id_that_is_not_a_name_is_404_before_the_apiserver_is_asked(
    tmp_path: Path, approval: str
) -> None:
    kube = CountingKube()
    with api_rig(tmp_path, kube=kube) as rig:
        rig.env()
        assert new_session(rig).status_code == 201
        assert (
            rig.post("/api/jobs", {"prompt": "p", "environment": "default", "name": "j1"}).status_code == 201
        )
        check_approval_refs(rig, approval)
        assert ("get", "approvals") not in kube.reads, "a refused approval id reached the apiserver"


def check_approval_refs(rig: ApiRig, approval: str) -> None:
    for path in (f"/api/sessions/s1/approvals/{approval}", f"/api/jobs/j1/approvals/{approval}"):
        r = rig.get(path)
        assert r.status_code == 404, (path, r.text)
        assert len(r.text) < 400
    r = rig.post(f"/api/sessions/s1/approvals/{approval}", {"decision": "allow"})
    assert r.status_code == 404, r.text


@pytest.mark.parametrize("ref", ["%25", "%2e", "S1", "s1%00", "a" * 300])
def test_a_session_job_or_steer_ref_that_is_not_a_name_is_404(rig: ApiRig, ref: str) -> None:
    for path in (f"/api/sessions/{ref}", f"/api/jobs/{ref}", f"/api/sessions/{ref}/turns"):
        r = rig.get(path)
        assert r.status_code == 404, (path, r.text)
        assert len(r.json()["detail"]) < 200
    assert new_session(rig).status_code == 201
    r = rig.post(f"/api/sessions/s1/steers/{ref}/withdraw")
    assert r.status_code == 404, r.text


# --- 4. never 500: NaN, Infinity, lone surrogates, since, apiserver errors, huge inputs ---------------
BAD_JSON = [
    b'{"name": "s1", "environment": "default", "tainted": NaN}',
    b'{"name": "s1", "environment": "default", "tainted": Infinity}',
    b'{"name": "s1", "environment": "default", "tainted": -Infinity}',
    b'{"name": "s1", "environment": "default", "tainted": 1e400}',
    b'{"name": "s1", "environment": "default", "message": "\\ud800"}',
    b'{"name": "s1", "environment": "default", "message": "a\\udfffb"}',
    b'{"name": "s1", "environment": "\\ud83d"}',
    b'{"\\udc00": 1, "name": "s1", "environment": "default"}',
    b'{"name": "s1", "environment": "default", "message": "\xff\xfe"}',
    b"[" * 100000 + b"]" * 100000,
]


@pytest.mark.parametrize("body", BAD_JSON, ids=range(len(BAD_JSON)))
def test_nan_infinity_and_lone_surrogates_are_422_never_500(rig: ApiRig, body: bytes) -> None:
    for path in ("/api/sessions", "/api/jobs", "/api/sessions/s1/messages", "/api/sessions/s1/steer"):
        r = rig.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (path, r.status_code, r.text)
        assert isinstance(r.json()["detail"], str)
    assert rig.kube.peek("sessions", "s1") is None


def test_since_is_bounded(rig: ApiRig) -> None:
    assert new_session(rig).status_code == 201
    for since in (2**63, 2**64, 10**30, -1):
        r = rig.get(f"/api/sessions/s1/events?since={since}")
        assert r.status_code == 422, r.text
    r = rig.get(f"/api/sessions/s1/events?since={2**63 - 1}")
    assert r.status_code == 200, r.text
    assert r.json()["events"] == []


def test_a_turn_index_out_of_range_is_404_and_not_a_number_422(rig: ApiRig) -> None:
    assert new_session(rig).status_code == 201
    for n in ("0", "-1", str(10**7), str(2**70)):
        assert rig.get(f"/api/sessions/s1/turns/{n}").status_code == 404, n
    for n in ("x", "1.5", "NaN", "%00"):
        assert rig.get(f"/api/sessions/s1/turns/{n}").status_code == 422, n


def test_a_model_id_is_limited_in_bytes(rig: ApiRig) -> None:
    r = new_session(rig, model="m" * (MODEL_MAX + 1))
    assert r.status_code == 422 and "model" in r.json()["detail"], r.text
    r = new_session(rig, model="é" * (MODEL_MAX // 2 + 1))  # half as many characters, over the bytes
    assert r.status_code == 422 and "bytes" in r.json()["detail"], r.text
    r = new_session(rig, model="m" * 2 * 1024 * 1024)  # the issue's 2 MiB model: the field's refusal
    assert r.status_code == 422 and "model" in r.json()["detail"], r.text[:300]
    r = new_session(rig, model="m" * 5 * 1024 * 1024)  # over the body limit: not read
    assert r.status_code == 413 and "HANGAR_API_BODY_MAX_BYTES" in r.json()["detail"], r.text[:300]
    r = rig.post("/api/jobs", {"prompt": "p", "environment": "default", "model": "é" * (MODEL_MAX // 2 + 1)})
    assert r.status_code == 422, r.text
    assert new_session(rig, model="claude-sonnet-4-5").status_code == 201


def test_messages_are_limited_in_bytes_not_characters(tmp_path: Path) -> None:
    with api_rig(tmp_path, api_body_max=4 * 1024 * 1024) as rig:
        rig.env()
        emoji = "\U0001f600"
        r = new_session(rig, message=emoji * 262144)  # 262,144 characters, 1 MiB
        assert r.status_code == 422 and "bytes" in r.json()["detail"], r.text[:300]
        assert len(r.text) < 1000
        assert rig.kube.peek("sessions", "s1") is None
        r = rig.post("/api/jobs", {"prompt": emoji * 65537, "environment": "default"})
        assert r.status_code == 422, r.text[:300]
        r = new_session(rig, message=emoji * 65536)  # 262,144 bytes: at the limit
        assert r.status_code == 201, r.text[:300]


def test_a_huge_invalid_input_gets_a_short_answer(tmp_path: Path) -> None:
    with api_rig(tmp_path, api_body_max=16 * 1024 * 1024) as rig:
        rig.env()
        r = new_session(rig, name="x" * 10_000_000)
        assert r.status_code == 422
        assert len(r.content) < 2500, len(r.content)
        r = rig.post(
            "/api/sessions",
            content=b'{"name": "' + b"x" * 10_000_000,
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422 and len(r.content) < 2500


@pytest.mark.parametrize(
    ("apiserver", "client"),
    [(400, 422), (404, 404), (409, 409), (413, 413), (422, 422), (500, 503), (403, 503)],
)
def test_apiserver_errors_are_mapped_never_500(rig: ApiRig, apiserver: int, client: int) -> None:
    rig.kube.fail_next("create", "sessions", apiserver)
    r = new_session(rig)
    assert r.status_code == client, r.text
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]
    assert new_session(rig, name="s2").status_code == 201
    rig.kube.fail_next("delete", "sessions", apiserver)
    r = rig.client.delete("/api/sessions/s2", headers=auth())
    assert r.status_code == (202 if apiserver == 404 else client), r.text  # a 404 delete: it is gone


# --- 6. authentication before parsing, body limit ------------------------------------------------------
def test_no_token_and_bad_json_is_401(rig: ApiRig) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
        r = rig.client.post(
            "/api/sessions", content=b"{not json", headers={**headers, "content-type": "application/json"}
        )
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
    r = rig.client.post(
        "/api/jobs", content=b"\xff" * (4 * 1024 * 1024), headers={"content-type": "application/json"}
    )
    assert r.status_code == 401
    assert rig.audit() == [], "an unauthenticated caller is not audited (anyone could fill the log)"


def test_a_body_over_the_limit_is_413_naming_it(tmp_path: Path) -> None:
    with api_rig(tmp_path, api_body_max=2048) as rig:
        rig.env()
        r = new_session(rig, message="m" * 3000)
        assert r.status_code == 413
        assert "2048 bytes" in r.json()["detail"] and "HANGAR_API_BODY_MAX_BYTES" in r.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
            yield b'{"name": "s1", "environment": "default", "message": "'
            for _ in range(10):
                yield b"m" * 1000
            yield b'"}'

        r = rig.client.post(
            "/api/sessions", content=chunks(), headers={**auth(), "content-type": "application/json"}
        )
        assert r.status_code == 413, r.text
        r = rig.client.request("GET", "/api/sessions", headers=auth(), content=b"x" * 999999)
        assert r.status_code == 413
        assert new_session(rig, message="m" * 1000).status_code == 201
        assert [e["status"] for e in rig.audit()] == [413, 413, 413]


# --- rate limits and the audit of refusals ------------------------------------------------------------
def test_writes_are_rate_limited_per_token_with_retry_after(tmp_path: Path) -> None:
    with api_rig(tmp_path, api_write_burst=3, api_write_rate=0.01) as rig:
        rig.env()
        codes = [new_session(rig, name=f"s{i}").status_code for i in range(3)]
        assert codes == [201, 201, 201]
        r = new_session(rig, name="s9")
        assert r.status_code == 429, r.text
        assert int(r.headers["retry-after"]) >= 1
        assert "HANGAR_API_WRITE_RATE" in r.json()["detail"]
        assert rig.kube.peek("sessions", "s9") is None
        for _ in range(3):
            assert new_session(rig, name="s9").status_code == 429
        assert rig.get("/api/sessions").status_code == 200, "reads are not limited"
        # Another token has its own bucket.
        r = rig.post("/api/jobs", {"prompt": "p", "environment": "default", "name": "j1"}, token=ALICE)
        assert r.status_code == 201, r.text
        limited = [e for e in rig.audit() if e["status"] == 429]
        assert len(limited) == 1 and limited[0]["actor"] == "root", "429s are audited once per window"


def test_every_refusal_of_an_authenticated_caller_is_audited(rig: ApiRig) -> None:
    assert rig.get("/api/sessions/nope").status_code == 404
    assert rig.get("/api/sessions", token=ALICE).status_code == 403
    assert new_session(rig, environment="missing").status_code == 422
    assert new_session(rig).status_code == 201
    assert new_session(rig).status_code == 409
    entries = sorted(rig.audit(), key=lambda e: e["at"])
    assert [(e["actor"], e["status"], e["target"]) for e in entries] == [
        ("root", 404, "/api/sessions/nope"),
        ("alice", 403, "/api/sessions"),
        ("root", 422, "/api/sessions"),
        ("root", 409, "/api/sessions"),
    ]
    assert "unknown environment 'missing'" in entries[2]["reason"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/api/sessions", "GET, POST"),
        ("PUT", "/api/sessions/demo", "DELETE, GET"),
        ("OPTIONS", "/api/jobs", "GET, POST"),
        ("PATCH", "/api/sessions/demo/approvals/ap-0123456789ab", "GET, POST"),
        ("DELETE", "/api/tokens", "GET, POST"),
    ],
)
def test_a_method_the_path_lacks_is_405_naming_every_method_it_has(
    rig: ApiRig, method: str, path: str, allow: str
) -> None:
    r = rig.client.request(method, path, headers=auth())
    assert r.status_code == 405, r.text
    # Starlette named only the first route's methods; a path's GET and POST are two routes (RFC 9110: all).
    assert r.headers["allow"] == allow
    assert r.json()["detail"] == f"{method} is not allowed on {path}: use {allow}"


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/api/sessions", {"name": "s1", "environment": "default", "tainted": 0}, "tainted"),
        ("/api/sessions", {"name": "s1", "environment": "default", "tainted": "true"}, "tainted"),
        ("/api/sessions", {"name": "s1", "environment": "default", "mesage": "hi"}, "mesage"),
        ("/api/jobs", {"prompt": "p", "environment": "default", "attempts": "2"}, "attempts"),
        ("/api/jobs", {"prompt": "p", "environment": "default", "attempts": 2.5}, "attempts"),
        ("/api/jobs", {"prompt": 5, "environment": "default"}, "prompt"),
        ("/api/tokens", {"name": "laptop", "expires_in_days": "30"}, "expires_in_days"),
        ("/api/sessions/demo/steer", {"message": "go", "interrupt": True}, "interrupt"),
    ],
)
def test_a_body_is_its_schema_no_coerced_types_nor_unknown_fields(
    rig: ApiRig, path: str, body: dict[str, Any], named: str
) -> None:
    r = rig.post(path, body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"{named}: "), r.text
    assert rig.kube.peek("sessions", "s1") is None


def test_an_integer_may_be_written_with_a_zero_fraction_as_json_schema_allows(rig: ApiRig) -> None:
    r = rig.post("/api/tokens", {"name": "laptop", "expires_in_days": 29.0})
    assert r.status_code == 201, r.text
    r = rig.post("/api/jobs", {"prompt": "p", "environment": "default", "attempts": 2.0, "tainted": True})
    assert r.status_code == 201 and r.json()["attempts_requested"] == 2, r.text
    assert rig.post("/api/tokens", {"expires_in_days": True}).status_code == 422
