"""Deployment-wide settings, read once from the environment (the helm chart sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .models.base import ApprovalPolicy


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _policy(raw: str | None) -> ApprovalPolicy | None:
    if raw in ("auto", "ask", "deny-risky", "governed"):
        return raw  # type: ignore[return-value]
    return None


@dataclass(frozen=True)
class Settings:
    namespace: str = field(default_factory=lambda: os.environ.get("HANGAR_NAMESPACE", "default"))
    # The namespaces whose resources the operator serves (the api serves ``namespace`` only).
    watch_namespaces: tuple[str, ...] = field(
        default_factory=lambda: tuple(
            n.strip()
            for n in (
                os.environ.get("HANGAR_WATCH_NAMESPACES") or os.environ.get("HANGAR_NAMESPACE", "default")
            ).split(",")
            if n.strip()
        )
    )
    database_url: str = field(
        default_factory=lambda: os.environ.get("HANGAR_DATABASE_URL", "sqlite:///hangar.db")
    )
    # Where drivers dial the operator's gateway (host:port as seen from a sandbox pod).
    gateway_address: str = field(default_factory=lambda: os.environ.get("HANGAR_GATEWAY_ADDRESS", ""))
    gateway_port: int = field(default_factory=lambda: _int("HANGAR_GATEWAY_PORT", 7443))
    gateway_host: str = field(default_factory=lambda: os.environ.get("HANGAR_GATEWAY_HOST", "0.0.0.0"))
    operator_port: int = field(default_factory=lambda: _int("HANGAR_OPERATOR_PORT", 8080))
    api_port: int = field(default_factory=lambda: _int("HANGAR_API_PORT", 8000))
    approvals: ApprovalPolicy | None = field(
        default_factory=lambda: _policy(os.environ.get("HANGAR_APPROVALS"))
    )
    approval_timeout: int = field(default_factory=lambda: _int("HANGAR_APPROVAL_TIMEOUT_SECONDS", 600))
    max_sandboxes: int = field(default_factory=lambda: _int("HANGAR_MAX_SANDBOXES", 10))
    runtime_class: str | None = field(
        default_factory=lambda: os.environ.get("HANGAR_SANDBOX_RUNTIME_CLASS") or None
    )
    driver_image: str = field(
        default_factory=lambda: os.environ.get(
            "HANGAR_DRIVER_IMAGE", "ghcr.io/hangar-dev/hangar-sandbox:0.1.0"
        )
    )
    cli_path: str = field(
        default_factory=lambda: os.environ.get(
            "HANGAR_SANDBOX_CLI_PATH", "/opt/hangar/clis/node_modules/.bin"
        )
    )
    workspace_size: str = field(default_factory=lambda: os.environ.get("HANGAR_WORKSPACE_SIZE", "10Gi"))
    storage_class: str | None = field(
        default_factory=lambda: os.environ.get("HANGAR_WORKSPACE_STORAGE_CLASS") or None
    )
    # Seconds the driver has to confirm an interrupt before hangar kills the run.
    interrupt_grace: float = field(
        default_factory=lambda: float(os.environ.get("HANGAR_INTERRUPT_GRACE_SECONDS", "10"))
    )
    # Seconds a new sandbox has to connect before the session fails its start.
    connect_timeout: float = field(
        default_factory=lambda: float(os.environ.get("HANGAR_CONNECT_TIMEOUT_SECONDS", "300"))
    )


def load() -> Settings:
    return Settings()
