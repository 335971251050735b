"""Structured logs (hangar/logs.py): one JSON object a line at HANGAR_LOG_LEVEL, carrying the resource a
record is about, whether kopf's per-object logger or hangar's own code logged it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from hangar import logs

BODY = {
    "apiVersion": "hangar.dev/v1alpha1",
    "kind": "Session",
    "metadata": {"name": "demo", "namespace": "team-a", "uid": "u-1"},
}


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()
    try:
        yield out
    finally:
        root.handlers[:], root.level = saved


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_at_the_level_given(stream: io.StringIO) -> None:
    logs.configure("warning", "json", stream)
    log = logging.getLogger("hangar.test")
    log.info("not written")
    log.warning("slot wait for %s", "demo", extra=logs.ref("team-a", "demo", "Session"))
    (rec,) = lines(stream)
    assert rec["level"] == "warning" and rec["logger"] == "hangar.test"
    assert rec["message"] == "slot wait for demo"
    assert (rec["kind"], rec["namespace"], rec["name"]) == ("Session", "team-a", "demo")
    assert rec["time"].endswith("+00:00")


def test_kopf_object_records_carry_the_object(stream: io.StringIO) -> None:
    logs.configure("info", "json", stream)
    logger = kopf.ObjectLogger(body=kopf.Body(BODY), settings=kopf.OperatorSettings())
    logger.info("Handler 'sessions' succeeded.")
    (rec,) = lines(stream)
    assert rec["logger"] == "kopf.objects" and rec["message"] == "Handler 'sessions' succeeded."
    assert (rec["kind"], rec["namespace"], rec["name"]) == ("Session", "team-a", "demo")
    assert "settings" not in rec


def test_an_exception_is_one_field_of_one_line(stream: io.StringIO) -> None:
    logs.configure("debug", "json", stream)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("hangar.test").exception("reconcile failed")
    (rec,) = lines(stream)
    assert rec["level"] == "error" and "RuntimeError: boom" in rec["exception"]


def test_records_without_a_resource_have_no_resource_fields(stream: io.StringIO) -> None:
    logs.configure("info", "json", stream)
    logging.getLogger("uvicorn.error").info("Application startup complete.")
    (rec,) = lines(stream)
    assert {"kind", "namespace", "name"}.isdisjoint(rec)


def test_chatty_libraries_only_when_debugging(stream: io.StringIO) -> None:
    logs.configure("info", "json", stream)
    logging.getLogger("httpx").info("HTTP Request: GET /")
    assert stream.getvalue() == ""
    logs.configure("debug", "json", stream)
    logging.getLogger("httpx").info("HTTP Request: GET /")
    assert lines(stream)[0]["message"] == "HTTP Request: GET /"


def test_text_names_the_resource(stream: io.StringIO) -> None:
    logs.configure("info", "text", stream)
    logging.getLogger("hangar.test").info("started", extra=logs.ref("team-a", "demo"))
    assert stream.getvalue().rstrip().endswith("INFO hangar.test: [team-a/demo] started")
