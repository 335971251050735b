"""Typed reads of the status of kinds hangar does not define: a sandbox Pod's and a workspace
VolumeSnapshot's, only the fields the operator reads. Unknown fields are ignored (the kubelet and the CSI
snapshot controller own these objects and add to them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hangar.kube import Obj


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class ContainerStatus(_Read):
    name: str = ""
    state: dict[str, Any] = Field(default_factory=dict)


class PodStatus(_Read):
    phase: str | None = None
    container_statuses: list[ContainerStatus] = Field(default_factory=list, alias="containerStatuses")


class SnapshotStatus(_Read):
    ready_to_use: bool | None = Field(default=None, alias="readyToUse")
    restore_size: str | int | None = Field(default=None, alias="restoreSize")
    error: dict[str, Any] | None = None


def pod_status(pod: Obj | None) -> PodStatus:
    return PodStatus.model_validate((pod or {}).get("status") or {})


def snapshot_status(snapshot: Obj) -> SnapshotStatus:
    return SnapshotStatus.model_validate(snapshot.get("status") or {})
