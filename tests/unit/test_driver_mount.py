"""The start-up check behind HANGAR_DRIVER_MOUNT=image-volume: the probe pod mounts the driver as sandbox pods
do, and an answer without its image volume (the apiserver dropped it) is told apart from one with it. The
check against a real apiserver that drops it: tests/e2e/test_driver_mount_e2e.py."""

from __future__ import annotations

import copy

import pytest

from hangar.config import Settings, SettingsError
from hangar.models.environment import EnvironmentSpec
from hangar.testing.fake_kube import FakeKube
from hangar_operator.driver_mount import check_driver_mount, dropped, probe_pod, served_namespace
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import sandbox_pod

MOUNTED = Settings(driver_mount="image-volume", driver_image="driver:1")
SESSION = {
    "apiVersion": "hangar.dev/v1alpha1",
    "kind": "Session",
    "metadata": {"name": "s", "namespace": "team", "uid": "u"},
    "spec": {"harness": "claude"},
}


def test_the_probe_mounts_the_driver_as_a_sandbox_pod_does() -> None:
    probe = probe_pod(MOUNTED)
    pod = sandbox_pod(
        SESSION,
        EnvironmentSpec.model_validate({"image": "python:3.12"}),
        make_run("team", "team", "s", 1),
        MOUNTED,
        "gw:1",
    )
    (driver,) = [v for v in pod["spec"]["volumes"] if v["name"] == "driver"]
    assert probe["spec"]["volumes"] == [driver]
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "driver"]
    assert probe["spec"]["containers"][0]["volumeMounts"] == [mount]


def test_an_answer_without_the_image_volume_means_it_was_dropped() -> None:
    probe = probe_pod(MOUNTED)
    assert not dropped(probe)
    stripped = copy.deepcopy(probe)
    stripped["spec"]["volumes"] = []  # what a 1.34 apiserver with ImageVolume off answers
    stripped["spec"]["containers"][0]["volumeMounts"] = []
    assert dropped(stripped)
    assert dropped({"spec": {}}) and dropped({})


def test_the_probe_goes_to_a_namespace_the_operator_makes_pods_in() -> None:
    assert served_namespace(Settings(namespace="hangar", watch_namespaces=("team-a", "team-b"))) == "team-a"
    assert served_namespace(Settings(namespace="hangar", watch_namespaces=("*",))) == "hangar"


async def test_a_cluster_that_keeps_the_volume_passes_and_init_copy_asks_nothing() -> None:
    kube = FakeKube("team")
    await check_driver_mount(kube, MOUNTED)
    kube.fail_next("dry_run_create_core", "pods", 500)
    await check_driver_mount(kube, Settings(driver_image="driver:1"))  # init-copy: no dry run made
    assert kube.writes == []


async def test_a_refused_dry_run_refuses_the_setting() -> None:
    """An admission policy that refuses the probe: whether the volume would be kept is unknown, so no."""
    kube = FakeKube("team")
    kube.fail_next("dry_run_create_core", "pods", 403)
    with pytest.raises(SettingsError, match=r"could not check .* namespace team was refused \(403"):
        await check_driver_mount(kube, MOUNTED)
