"""The operator's start settles its heap (main.settle_heap): what exists then is out of the collector's
generations, so a full collection on the loop that claims sandboxes walks only what came after."""

from __future__ import annotations

import gc

from hangar_operator.main import settle_heap


def test_settling_the_heap_takes_what_exists_out_of_the_collectors_generations() -> None:
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        settle_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the modules, the test runner's objects
        # a full collection afterwards walks only what is new, not what was frozen
        assert sum(len(gc.get_objects(generation=g)) for g in range(3)) < frozen
    finally:
        gc.unfreeze()
