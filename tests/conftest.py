"""Fixtures every tier may use: a scripted model server on 127.0.0.1; operator rigs closed after each test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings

from hangar.testing.model_server import ScriptedModel
from tests.unit.operator_rig import close_open_rigs

# The property tests draw the same examples on every run (the test command gates every change: a rare input
# found on one run must not fail another change's run), unless HYPOTHESIS_PROFILE=explore asks for new ones
# (docs/development.md). No example database under "fixed": examples saved by earlier local runs change what
# the generator draws next (it avoids inputs it has tried), so a working tree with a .hypothesis/ drew other
# inputs than CI's fresh clone (a CI failure that did not reproduce locally).
settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(autouse=True)
async def _close_rigs() -> AsyncIterator[None]:
    """Every operator rig a test made is stopped after it (``Rig.close``), after the test's own fixtures."""
    yield
    await close_open_rigs()


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    """A scripted model server for one test: the test adds its steps (``model.add``)."""
    m = ScriptedModel([])
    m.start()
    try:
        yield m
    finally:
        m.stop()
