"""Fixtures every tier may use: a scripted model server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hangar.testing.model_server import ScriptedModel


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    """A scripted model server for one test: the test adds its steps (``model.add``)."""
    m = ScriptedModel([])
    m.start()
    try:
        yield m
    finally:
        m.stop()
