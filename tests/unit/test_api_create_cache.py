"""A session's create checks its Environment in the API's watch-fed cache first (one apiserver round trip
less before the operator can start or claim a sandbox); a miss, or a cache that can't say, reads the
apiserver, so an unknown Environment is still a 422."""

from __future__ import annotations

from pathlib import Path

from hangar.kube import Obj
from hangar.testing.fake_kube import FakeKube
from tests.unit.api_rig import api_rig


class CountingKube(FakeKube):
    def __init__(self) -> None:
        super().__init__()
        self.env_reads = 0

    async def get(self, plural: str, name: str) -> Obj | None:
        self.env_reads += plural == "environments"
        return await super().get(plural, name)


def test_the_create_reads_the_environment_from_the_cache_and_a_miss_from_the_apiserver(
    tmp_path: Path,
) -> None:
    kube = CountingKube()
    with api_rig(tmp_path, kube=kube) as rig:
        rig.env()
        cache = rig.client.app.state.api_cache  # type: ignore[attr-defined]
        # Not listed yet: the apiserver is asked.
        assert rig.post("/api/sessions", {"name": "s1", "environment": "default"}).status_code == 201
        assert kube.env_reads == 1
        cache.environments.relist([{"metadata": {"name": "default", "resourceVersion": "1"}}], "1")
        cache.environments.watching = True
        assert rig.post("/api/sessions", {"name": "s2", "environment": "default"}).status_code == 201
        assert kube.env_reads == 1, "a cached Environment was read again"
        # Not in the cache: asked, and refused since it is not there either.
        r = rig.post("/api/sessions", {"name": "s3", "environment": "nope"})
        assert r.status_code == 422 and "unknown environment 'nope'" in r.json()["detail"]
        assert kube.env_reads == 2 and kube.peek("sessions", "s3") is None
