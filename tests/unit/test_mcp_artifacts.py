"""Parsing artifact URIs (what is refused, and why), their MIME types and the resource_link blocks."""

from __future__ import annotations

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from hangar_api.mcp.artifacts import ArtifactRef, content, links, mime_type, parse_uri, uri_for

BASE = "hangar://sessions/api-fix/artifacts"


@pytest.mark.parametrize(
    ("uri", "ref"),
    [
        (f"{BASE}/2/report.md", ArtifactRef("api-fix", "api-fix-2", "report.md")),
        (f"{BASE}/api-fix-12/report.md", ArtifactRef("api-fix", "api-fix-12", "report.md")),
        (f"{BASE}/3/my%20notes.txt", ArtifactRef("api-fix", "api-fix-3", "my notes.txt")),
        (f"{BASE}/03/a..b", ArtifactRef("api-fix", "api-fix-3", "a..b")),
    ],
)
def test_a_good_uri_names_the_session_turn_and_artifact(uri: str, ref: ArtifactRef) -> None:
    assert parse_uri(uri) == ref


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        (f"{BASE}/2/../../etc/passwd", "climbs out"),
        (f"{BASE}/2/%2E%2E%2Fsecret", "climbs out"),
        (f"{BASE}/2/a%5C..%5Cb", "climbs out"),
        (f"{BASE}/2//etc/passwd", "absolute"),
        (f"{BASE}/2/%2Fetc%2Fpasswd", "absolute"),
        (f"{BASE}/2/C:%5Cwin", "absolute"),
        (f"{BASE}/2/a%00b", "NUL"),
        (f"{BASE}/2/%FF", "UTF-8"),
        (f"{BASE}/2", "no path"),
        (f"{BASE}/2/", "no path"),
        (f"{BASE}/other-2/x", "turn 'other-2'"),
        (f"{BASE}/x/y", "turn 'x'"),
        (f"{BASE}/2/x?y=1", "no query"),
        ("hangar://sessions/Bad_Name/artifacts/2/x", "not a session name"),
    ],
)
def test_a_bad_uri_is_refused_with_the_reason(uri: str, why: str) -> None:
    with pytest.raises(ToolError) as e:
        parse_uri(uri)
    assert str(e.value).startswith("invalid: ") and why in str(e.value), e.value


def test_mime_types_and_text_or_blob() -> None:
    assert mime_type("report.md") == "text/markdown"
    assert mime_type("data.json") == "application/json"
    assert mime_type("shot.png") == "image/png"
    assert mime_type("blob") == "application/octet-stream"
    assert content(b"# hi\n", "text/markdown") == "# hi\n"
    assert content(b"\xff\xfe", "text/plain") == b"\xff\xfe", "text that isn't UTF-8 goes as a blob"
    assert content(b"\x89PNG", "image/png") == b"\x89PNG"


def test_wait_for_turn_artifacts_become_resource_links() -> None:
    turn = {"session": "api-fix", "index": 2, "name": "api-fix-2"}
    arts = [{"name": "report 1.md", "size": 9}, {"name": "shot.png", "size": 70}]
    [a, b] = links({"turn": turn, "artifacts": arts})
    assert str(a.uri) == f"{BASE}/2/report%201.md" == uri_for("api-fix", 2, "report 1.md")
    assert (a.name, a.mime_type, a.size, a.type) == ("report 1.md", "text/markdown", 9, "resource_link")
    assert (b.mime_type, b.size) == ("image/png", 70)
    assert parse_uri(str(a.uri)) == ArtifactRef("api-fix", "api-fix-2", "report 1.md"), "a link reads back"
    assert links({"turn": None, "artifacts": arts}) == []
