"""Deployment-wide settings: one model for the operator and the api, read once from the environment (the
helm chart sets it; docs/configuration.md lists every variable).

Fail closed: a value outside what a setting allows refuses to start, with a message naming the variable
and the allowed values (:func:`load` raises :class:`SettingsError`). An empty variable counts as unset (the
chart renders optional values as ``""``). Client-side (``HANGAR_URL``, ``HANGAR_TOKEN``, ``HANGAR_CONTEXT``),
development (``HANGAR_DEV_ROOT``, ``HANGAR_CLI_DIR``) and test (``HANGAR_TEST_*``, ``HANGAR_HELM``,
``HANGAR_KEEP_LOGS``) variables are not deployment settings and are read where they are used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .models.base import ApprovalPolicy

GovernanceMode = Literal["off", "shadow", "enforce"]
# What Tower governs, one mode each: ``approval`` (approval.* events: Tower decides the calls the policy
# flags) and ``run`` (run.stop events: Tower may stop a run).
GovernanceKind = Literal["approval", "run"]
GOVERNANCE_KINDS: tuple[str, ...] = get_args(GovernanceKind)
GOVERNANCE_MODES: tuple[str, ...] = get_args(GovernanceMode)
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["json", "text"]
# How the driver reaches a sandbox pod: copied by an init container, or the driver image mounted as a volume.
DriverMount = Literal["init-copy", "image-volume"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_NAMESPACE = "a namespace name (a DNS label: a-z, 0-9, '-')"


def _matching(pattern: re.Pattern[str], value: str, what: str) -> str:
    """``value``, if ``pattern`` matches it whole; else the setting is refused, saying what it is not."""
    if not pattern.fullmatch(value):
        raise ValueError(f"{value!r} is not {what}")
    return value


class SettingsError(ValueError):
    """A setting hangar refuses to start with; the message names the variable and what it allows."""


def setting(
    default: Any,
    env: str,
    doc: str,
    *,
    chart: str = "",
    secret: bool = False,
    allowed: str = "",
    **rules: Any,
) -> Any:
    """A field read from ``env``. ``chart``: the values.yaml keys that set it; ``secret``: never echoed;
    ``allowed``: what it takes, in words, where its type doesn't say (docs/configuration.md)."""
    extra: dict[str, Any] = {"env": env, "chart": chart, "secret": secret, "allowed": allowed}
    return Field(default, validation_alias=env, description=doc, json_schema_extra=extra, **rules)


def _split(raw: Any) -> Any:
    """A comma-separated variable as a tuple (a tuple or list given in code passes through)."""
    if isinstance(raw, str):
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    return raw


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
    )

    # --- where hangar runs ------------------------------------------------------------------------------
    namespace: str = setting(
        "default",
        "HANGAR_NAMESPACE",
        "The namespace hangar runs in; the api serves this one (the chart sets the pod's own).",
        allowed="a namespace name",
    )
    watch_namespaces: Annotated[tuple[str, ...], NoDecode] = setting(
        (),
        "HANGAR_WATCH_NAMESPACES",
        "Comma-separated namespaces whose resources the operator serves, or `*` for all; "
        "empty: HANGAR_NAMESPACE only.",
        chart="watchNamespaces, watchAllNamespaces",
        allowed="namespace names, comma-separated, or `*`",
    )
    database_url: str = setting(
        "sqlite:///hangar.db",
        "HANGAR_DATABASE_URL",
        "`sqlite:///PATH` or `postgresql://…`: events, audit log, accepted Tower event ids.",
        chart="database.url, database.existingSecret",
        secret=True,
        allowed="`sqlite:///PATH`, `postgresql://…`",
    )
    # --- ports and addresses ----------------------------------------------------------------------------
    gateway_address: str = setting(
        "",
        "HANGAR_GATEWAY_ADDRESS",
        "host:port sandbox drivers dial for the operator's gateway.",
        chart="gateway.address",
        allowed="host:port",
    )
    gateway_port: int = setting(
        7443,
        "HANGAR_GATEWAY_PORT",
        "Port of the driver gateway (0: any free port, as tests use).",
        chart="gateway.port",
        ge=0,
        le=65535,
    )
    gateway_host: str = setting("0.0.0.0", "HANGAR_GATEWAY_HOST", "Address the gateway listens on.")
    operator_host: str = setting(
        "0.0.0.0", "HANGAR_OPERATOR_HOST", "Address of the operator's /healthz, /readyz and /metrics."
    )
    operator_port: int = setting(
        8080,
        "HANGAR_OPERATOR_PORT",
        "Port of the operator's /healthz, /readyz and /metrics.",
        chart="operator.metricsPort",
        ge=1,
        le=65535,
    )
    api_port: int = setting(8000, "HANGAR_API_PORT", "Port of the api.", chart="api.port", ge=1, le=65535)
    # --- approvals and sandboxes ------------------------------------------------------------------------
    approvals: ApprovalPolicy | None = setting(
        None,
        "HANGAR_APPROVALS",
        "Deployment-wide approval policy; an Environment's or a session's own wins. Unset: auto.",
        chart="approvals.policy",
    )
    approval_timeout: int = setting(
        600,
        "HANGAR_APPROVAL_TIMEOUT_SECONDS",
        "Seconds an unanswered `ask` waits before it is denied.",
        chart="approvals.timeoutSeconds",
        gt=0,
    )
    max_sandboxes: int = setting(
        10,
        "HANGAR_MAX_SANDBOXES",
        "How many sandboxes may run at once (warm pools' unclaimed sandboxes included).",
        chart="sandbox.slots",
        ge=1,
    )
    runtime_class: str | None = setting(
        None,
        "HANGAR_SANDBOX_RUNTIME_CLASS",
        "RuntimeClass of sandbox pods (e.g. gvisor); an Environment's own wins.",
        chart="sandbox.runtimeClassName",
    )
    sandbox_service_account: str | None = setting(
        None,
        "HANGAR_SANDBOX_SERVICE_ACCOUNT",
        "ServiceAccount of sandbox pods (no permissions, no token mounted); unset: the namespace's default.",
        chart="sandbox.serviceAccount.name",
    )
    driver_image: str = setting(
        "ghcr.io/hangar-dev/hangar-sandbox:0.1.0",
        "HANGAR_DRIVER_IMAGE",
        "Image holding hangar-driver (in /opt/hangar/lib), copied into each sandbox pod; the chart sets "
        "hangar's own image, so the driver is always the operator's release.",
        chart="sandbox.driverImage, image",
    )
    driver_mount: DriverMount = setting(
        "init-copy",
        "HANGAR_DRIVER_MOUNT",
        "How hangar-driver reaches a sandbox pod. `init-copy`: an init container copies it out of the driver "
        "image (any cluster). `image-volume`: the driver image's /opt/hangar/lib is mounted read-only as an "
        "image volume, with no init container and nothing copied (Kubernetes 1.33+ with the ImageVolume "
        "feature, on by default from 1.35, and a runtime that supports it, e.g. containerd 2.1+).",
        chart="sandbox.driverMount",
        allowed="`init-copy`, `image-volume`",
    )
    cli_path: str = setting(
        "/opt/hangar/clis/node_modules/.bin",
        "HANGAR_SANDBOX_CLI_PATH",
        "Where the agent CLIs are inside a sandbox pod.",
    )
    workspace_size: str = setting(
        "10Gi",
        "HANGAR_WORKSPACE_SIZE",
        "Size of each session's workspace volume (a quantity).",
        allowed="a quantity (`10Gi`)",
    )
    storage_class: str | None = setting(
        None, "HANGAR_WORKSPACE_STORAGE_CLASS", "StorageClass of workspace volumes; unset: the cluster's."
    )
    snapshot_class: str | None = setting(
        None,
        "HANGAR_WORKSPACE_SNAPSHOT_CLASS",
        "VolumeSnapshotClass of the workspace snapshots taken with each checkpoint (clusters with the CSI "
        "snapshot API); unset: the cluster's default class.",
        chart="sandbox.snapshotClassName",
    )
    interrupt_grace: float = setting(
        10.0,
        "HANGAR_INTERRUPT_GRACE_SECONDS",
        "Seconds the driver has to confirm an interrupt before hangar kills the run.",
        gt=0,
    )
    connect_timeout: float = setting(
        300.0,
        "HANGAR_CONNECT_TIMEOUT_SECONDS",
        "Seconds a new sandbox has to connect before the session fails its start.",
        gt=0,
    )
    idle_suspend_after: int = setting(
        900,
        "HANGAR_IDLE_SUSPEND_SECONDS",
        "Seconds an idle session keeps its sandbox before it is suspended; 0: never.",
        ge=0,
    )
    # --- the api's callers ------------------------------------------------------------------------------
    api_tokens_file: Path | None = setting(
        None,
        "HANGAR_API_TOKENS_FILE",
        "YAML/JSON list of {token, subject, role, expires?, revoked?} (role: admin, jobs or mcp); it must exist.",
    )
    admin_token: SecretStr | None = setting(
        None, "HANGAR_ADMIN_TOKEN", "An admin API token.", chart="auth.existingSecret", secret=True
    )
    admin_subject: str = setting("admin", "HANGAR_ADMIN_SUBJECT", "Who HANGAR_ADMIN_TOKEN's caller is.")
    mcp_state_key: SecretStr | None = setting(
        None,
        "HANGAR_MCP_STATE_KEY",
        "Seals MCP requestState between rounds (32+ characters); unset: a key per process.",
        chart="auth.existingSecret",
        secret=True,
        allowed="secret text, 32+ characters",
    )
    mcp_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = setting(
        (),
        "HANGAR_MCP_ALLOWED_HOSTS",
        "Comma-separated Host values for the MCP server's DNS-rebinding check; unset: off.",
    )
    # --- the api's limits (docs/limits.md) -------------------------------------------------------------
    # 4 MiB: every body the schemas allow fits once JSON-escaped (a 262,144-byte message of control
    # characters is 1.5 MiB as \u escapes), so a field over its limit gets the 422 that names it, not a 413.
    api_body_max: int = setting(
        4194304,
        "HANGAR_API_BODY_MAX_BYTES",
        "Largest REST request body, in bytes; a larger one is refused (413) without being read.",
        ge=1024,
        le=16777216,
    )
    api_write_rate: float = setting(
        20.0,
        "HANGAR_API_WRITE_RATE",
        "Writes (POST, PUT, PATCH, DELETE) a second each token earns back on the REST routes; past its "
        "burst a write is refused (429, Retry-After).",
        gt=0,
        le=100000,
    )
    api_withdraw_wait: float = setting(
        20.0,
        "HANGAR_API_WITHDRAW_WAIT_SECONDS",
        "Seconds a withdraw waits for the sandbox's verdict before it answers 202 (asked, not yet answered).",
        gt=0,
        le=300,
    )
    api_write_burst: int = setting(
        200,
        "HANGAR_API_WRITE_BURST",
        "Writes a token may make at once before HANGAR_API_WRITE_RATE applies.",
        ge=1,
        le=100000,
    )
    # --- governance by Tower (spec 002) -----------------------------------------------------------------
    governance: GovernanceMode = setting(
        "off",
        "HANGAR_GOVERNANCE",
        "Tower's mode for every kind; any kind in shadow or enforce turns the events route on.",
        chart="governance.mode",
    )
    governance_modes: Annotated[dict[GovernanceKind, GovernanceMode], NoDecode] = setting(
        {},
        "HANGAR_GOVERNANCE_MODES",
        "Per-kind modes over HANGAR_GOVERNANCE: `kind=mode,…`, kinds `approval` and `run`.",
        chart="governance.modes",
        allowed="`kind=mode,…`: kinds `approval`, `run`; modes as HANGAR_GOVERNANCE",
    )
    governance_webhook_secret: str | None = setting(
        None,
        "HANGAR_GOVERNANCE_WEBHOOK_SECRET",
        "The Kubernetes Secret in HANGAR_NAMESPACE holding the secret Tower signs events with: `name` or "
        "`name/key` (key `webhook-secret` by default; one secret a line while one rotates). Re-read as it "
        "changes; needed when on.",
        chart="governance.existingSecret, governance.webhookSecretKey, governance.webhookSecretName",
        allowed="`name` or `name/key` of a Secret",
    )
    governance_url: str | None = setting(
        None,
        "HANGAR_GOVERNANCE_URL",
        "Where hangar re-reads a decision.",
        chart="governance.url",
        allowed="an http(s) URL",
    )
    governance_credential: SecretStr | None = setting(
        None,
        "HANGAR_GOVERNANCE_CREDENTIAL",
        "hangar's key for re-reading decisions.",
        chart="governance.existingSecret, governance.credentialName",
        secret=True,
    )
    governance_suspend_after: int = setting(
        60,
        "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS",
        "Seconds a tool call waits in its turn for Tower before the session is suspended.",
        chart="governance.suspendAfterSeconds",
        ge=0,
    )
    # --- logs -------------------------------------------------------------------------------------------
    log_level: LogLevel = setting(
        "info",
        "HANGAR_LOG_LEVEL",
        "Least severe log record written.",
        chart="logLevel",
        allowed="`debug`, `info`, `warning`, `error` (any case)",
    )
    log_format: LogFormat = setting(
        "json", "HANGAR_LOG_FORMAT", "json (one object a line) or text, for the operator and the api."
    )

    @field_validator("watch_namespaces", "mcp_allowed_hosts", mode="before")
    @classmethod
    def _comma_list(cls, raw: Any) -> Any:
        return _split(raw)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, ns: str) -> str:
        return _matching(_DNS_LABEL, ns, _NAMESPACE)

    @field_validator("watch_namespaces")
    @classmethod
    def _watched(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if "*" in names and len(names) > 1:
            raise ValueError("`*` (every namespace) stands alone, not in a list of namespaces")
        for n in names:
            if n != "*":
                _matching(_DNS_LABEL, n, _NAMESPACE + ", nor `*`")
        return tuple(dict.fromkeys(names))

    @field_validator("database_url")
    @classmethod
    def _database(cls, url: str) -> str:
        if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return url

    @field_validator("workspace_size")
    @classmethod
    def _quantity(cls, size: str) -> str:
        return _matching(_QUANTITY, size, "a Kubernetes quantity (e.g. 10Gi, 500Mi)")

    @field_validator("mcp_state_key")
    @classmethod
    def _state_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None and len(key.get_secret_value()) < 32:
            raise ValueError("too short: give at least 32 characters")
        return key

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, raw: Any) -> Any:
        return raw.strip().lower() if isinstance(raw, str) else raw

    @field_validator("governance_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("https://", "http://")):
            raise ValueError(f"{url!r} is not an http(s) URL")
        return url

    @field_validator("governance_modes", mode="before")
    @classmethod
    def _modes(cls, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        modes: dict[str, str] = {}
        for part in _split(raw):
            kind, eq, mode = (s.strip() for s in part.partition("="))
            if not eq:
                raise ValueError(f"{part!r} is not kind=mode (e.g. approval=enforce,run=shadow)")
            if kind not in GOVERNANCE_KINDS:
                raise ValueError(f"unknown kind {kind!r}: the kinds are {', '.join(GOVERNANCE_KINDS)}")
            if mode not in GOVERNANCE_MODES:
                raise ValueError(f"{kind}={mode!r}: the modes are {', '.join(GOVERNANCE_MODES)}")
            if kind in modes:
                raise ValueError(f"{kind} is given twice")
            modes[kind] = mode
        return modes

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if not self.watch_namespaces:
            # Frozen: the default depends on another field, so it is filled in here, once.
            self.__dict__["watch_namespaces"] = (self.namespace,)
        if self.governance_on and self.governance_webhook_secret is None:
            raise ValueError(
                "governance is on (HANGAR_GOVERNANCE / HANGAR_GOVERNANCE_MODES) but "
                "HANGAR_GOVERNANCE_WEBHOOK_SECRET is unset: Tower's events could not be verified"
            )
        if self.approvals == "governed" and self.governance_mode("approval") == "off":
            raise ValueError(
                "HANGAR_APPROVALS=governed needs Tower: set HANGAR_GOVERNANCE (or approval= in "
                "HANGAR_GOVERNANCE_MODES) to shadow or enforce"
            )
        return self

    def governance_mode(self, kind: GovernanceKind) -> GovernanceMode:
        """Tower's mode for ``kind``: its own in HANGAR_GOVERNANCE_MODES, else HANGAR_GOVERNANCE."""
        return self.governance_modes.get(kind, self.governance)

    @property
    def governance_on(self) -> bool:
        """Is any kind in shadow or enforce (the events route answers)?"""
        return any(self.governance_mode(k) != "off" for k in get_args(GovernanceKind))

    @property
    def watch_all(self) -> bool:
        """Does the operator serve every namespace (HANGAR_WATCH_NAMESPACES=*)?"""
        return self.watch_namespaces == ("*",)


# HANGAR_ variables that are not deployment settings (module docstring): not reported as unknown.
NOT_SETTINGS = frozenset(
    {"HANGAR_URL", "HANGAR_TOKEN", "HANGAR_CONTEXT", "HANGAR_DEV_ROOT", "HANGAR_CLI_DIR", "HANGAR_HELM"}
    | {"HANGAR_KEEP_LOGS"}
)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``HANGAR_*`` variables in ``environ`` that no setting reads: most likely misspelled ones."""
    known = set(env_names().values()) | NOT_SETTINGS
    return sorted(
        n for n in environ if n.startswith("HANGAR_") and n not in known and not n.startswith("HANGAR_TEST_")
    )


def env_names() -> dict[str, str]:
    """Each setting's variable, by field name."""
    return {name: str(f.validation_alias) for name, f in Settings.model_fields.items()}


def _describe(e: ValidationError) -> str:
    fields = Settings.model_fields
    by_env = {str(f.validation_alias): f for f in fields.values()}
    lines = []
    for err in e.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        if not err["loc"]:
            lines.append(msg)
            continue
        key = str(err["loc"][0])
        f = by_env.get(key) or fields.get(key)
        extra = f.json_schema_extra if f is not None and isinstance(f.json_schema_extra, dict) else {}
        env = str(extra.get("env") or key)
        shown = "" if extra.get("secret") else f"={err['input']!r}" if isinstance(err["input"], str) else ""
        lines.append(f"{env}{shown}: {msg}")
    return "; ".join(lines)


def load(**overrides: Any) -> Settings:
    """The settings from the environment (``overrides`` by field name win); :class:`SettingsError` when a
    value is not allowed."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        raise SettingsError(_describe(e)) from None
