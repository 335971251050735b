"""``HANGAR_DRIVER_MOUNT=image-volume`` needs the apiserver's ImageVolume feature. Where it is off, the
apiserver drops a pod's image volumes and their mounts without an error, and the sandbox would run whatever
its own image holds at /opt/hangar/lib (hangar's sandbox image has a driver there, of that image's release)
or nothing. So the operator asks once, at its start, with a dry-run pod, and refuses to start on a cluster
that would drop it (fail closed: a setting hangar cannot honour stops it, naming the setting)."""

from __future__ import annotations

from hangar.config import Settings, SettingsError
from hangar.kube import ApiException, Kube, Obj

from .sandbox_objects import driver_volume, driver_volume_mount

PROBE = "hangar-driver-mount-check"  # a dry run: never created


def probe_pod(settings: Settings) -> Obj:
    """A pod that mounts the driver as sandbox pods do, and nothing else."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE, "labels": {"app.kubernetes.io/part-of": "hangar"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "probe",
                    "image": settings.driver_image,
                    "volumeMounts": [driver_volume_mount(settings)],
                }
            ],
            "volumes": [driver_volume(settings)],
        },
    }


def served_namespace(settings: Settings) -> str:
    """A namespace whose pods the operator makes: its first watched one (every one: its home)."""
    if settings.watch_all or not settings.watch_namespaces:
        return settings.namespace
    return settings.watch_namespaces[0]


def dropped(made: Obj) -> bool:
    """Did the apiserver drop the probe's image volume (its ImageVolume feature is off)?"""
    return not any("image" in v for v in (made.get("spec") or {}).get("volumes") or [])


async def check_driver_mount(kube: Kube, settings: Settings) -> None:
    """Nothing for ``init-copy``; for ``image-volume``, :class:`SettingsError` when the cluster drops image
    volumes. ``kube``: scoped to a namespace whose pods the operator may create."""
    if settings.driver_mount != "image-volume":
        return
    try:
        made = await kube.dry_run_create_core("pods", probe_pod(settings))
    except ApiException as e:  # an admission policy's refusal, say: unknown is not yes
        raise SettingsError(
            f"HANGAR_DRIVER_MOUNT=image-volume: could not check that this cluster keeps image volumes: a "
            f"dry-run pod in namespace {kube.namespace} was refused ({e.status} {e.reason}); set "
            "HANGAR_DRIVER_MOUNT=init-copy, or let the operator create pods there"
        ) from None
    if dropped(made):
        raise SettingsError(
            "HANGAR_DRIVER_MOUNT=image-volume: this cluster's apiserver drops image volumes (its ImageVolume "
            "feature is off: Kubernetes 1.33+ with the feature gate, on by default from 1.35); set "
            "HANGAR_DRIVER_MOUNT=init-copy (chart value sandbox.driverMount)"
        )
