"""``Context.cached``: an object from the operator's watch cache once it is primed, else a read of the apiserver
(``cache.py``). The rig's controllers on a FakeKube, which tells the cache of every write as the real Kube does;
a read the test must not see happen is made to fail (``fail_next``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangar.models import API_VERSION
from hangar.turns import create_turn
from tests.unit.operator_rig import make_rig


async def test_a_primed_cache_answers_without_a_read_and_before_it_every_read_goes_out(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    await rig.session("s")
    ctx = rig.ctx
    # Not primed: what the cache may hold is not trusted, the apiserver is read.
    ctx.cache.put("sessions", {**rig.get("sessions", "s"), "status": {"message": "stale"}}, "default")
    rig.kube.set_status("sessions", "s", {"message": "newer"})  # another writer: no cache update
    got = await ctx.cached("default", "sessions", "s")
    assert got is not None and got["status"]["message"] == "newer"
    await ctx.resync_cache()
    assert ctx.cache.primed
    # Primed: the cache's own object, and no read at all (one would fail).
    rig.kube.fail_next("get", "sessions", 500, times=100)
    rig.kube.fail_next("get", "environments", 500, times=100)
    held = ctx.cache.get("sessions", "default", "s")
    assert held is not None and await ctx.cached("default", "sessions", "s") is held
    env = await ctx.cached("default", "environments", "dev")
    assert env is not None and env["spec"]["image"] == "img"
    # The operator's own write is in it at once (read your writes).
    await rig.kube.scoped("default").patch("sessions", "s", {"spec": {"model": "m2"}})
    got = await ctx.cached("default", "sessions", "s")
    assert got is not None and got["spec"]["model"] == "m2"


async def test_what_the_cache_does_not_hold_is_read(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    rig.env()
    ctx = rig.ctx
    await ctx.resync_cache()
    # Seeded after the priming, no watch event: not in the cache, so read.
    rig.kube.seed(
        "sessions",
        {
            "apiVersion": API_VERSION,
            "kind": "Session",
            "metadata": {"name": "late"},
            "spec": {"environment": "dev"},
        },
    )
    assert ctx.cache.get("sessions", "default", "late") is None
    got = await ctx.cached("default", "sessions", "late")
    assert got is not None and got["metadata"]["name"] == "late"
    # Nowhere at all: None (the apiserver's 404).
    assert await ctx.cached("default", "sessions", "nope") is None
    # Another namespace's object of the same name is another object.
    assert await ctx.cached("other", "sessions", "late") is None
    # A kind the cache does not keep (Turns) is always read.
    name = await create_turn(rig.kube.scoped("default"), "late", "hi")
    rig.kube.fail_next("get", "turns", 500)
    with pytest.raises(Exception, match="injected by fail_next"):
        await ctx.cached("default", "turns", name)
    got = await ctx.cached("default", "turns", name)
    assert got is not None and got["metadata"]["name"] == name
