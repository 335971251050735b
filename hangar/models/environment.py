"""Environment: the sandbox template sessions and jobs run in."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from .base import ApprovalPolicy, Condition, Model, Resource, ResourceInfo, col, name_rule


class EnvVar(Model):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = ""


class SecretRef(Model):
    """A Secret whose keys become environment variables of the agent (envFrom)."""

    name: str = Field(min_length=1, max_length=253)
    prefix: str = ""


class Resources(Model):
    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)


class McpServer(Model):
    # Field names inside an MCP entry follow the spec's Environment YAML (``mcp.<name>.write_tools``).
    model_config = ConfigDict(alias_generator=None, populate_by_name=True, extra="ignore")

    url: str | None = None
    command: list[str] | None = None
    trust: Literal["trusted", "untrusted"] = "untrusted"
    write_tools: list[str] = Field(default_factory=list, description="fnmatch patterns of write tools")


class RepositoryPolicy(Model):
    """Who releases a job on this repository before it runs (docs/jobs.md, "Release")."""

    require_approval: bool = Field(
        default=False,
        description="Jobs wait in awaiting_approval until an approver or an admin releases them",
    )
    approvers: list[str] = Field(
        default_factory=list, description="Subjects that may release or reject jobs (admins always may)"
    )


class Repository(Model):
    url: str = Field(min_length=1, max_length=2048, description="The git remote (https)")
    base_branch: str = Field(default="main", min_length=1, max_length=255)
    credentials_secret: str | None = Field(
        default=None,
        max_length=253,
        description="A Secret with `token` (and optionally `username`) for git and the forge's API; only the "
        "driver's uid reads it, never the agent",
    )
    forge: Literal["github", "none"] = Field(
        default="github", description="Where pull requests are opened: github (GitHub and GHE), none"
    )
    api_url: str = Field(
        default="https://api.github.com",
        max_length=2048,
        description="The forge's API (GitHub Enterprise: https://<host>/api/v3)",
    )
    slug: str | None = Field(
        default=None, max_length=512, description="owner/name on the forge; default: from the URL's path"
    )
    policy: RepositoryPolicy = Field(default_factory=RepositoryPolicy)


class Verification(Model):
    command: str = Field(
        min_length=1, max_length=8192, description="Run with sh -c in the workspace, as the agent"
    )
    timeout_seconds: int = Field(default=600, ge=1, le=86400)
    repair_turns: int = Field(
        default=1,
        ge=0,
        le=5,
        description="Turns the agent gets to fix a failing verification before it fails",
    )


class WarmPool(Model):
    """Sandboxes kept started for this Environment, so a new session takes one instead of waiting for a pod
    (docs/architecture.md, "Warm sandbox pools")."""

    size: int = Field(default=0, ge=0, le=100, description="Warm sandboxes to keep ready; 0: no pool")
    max_age_seconds: int = Field(
        default=3600, ge=30, le=7 * 86400, description="A warm sandbox older than this is replaced"
    )
    harness: Literal["claude", "codex", "pi", "antigravity"] = Field(
        default="claude", description="The harness the warm sandboxes run: sessions of another wait as usual"
    )


class EnvironmentSpec(Model):
    image: str = Field(min_length=1, description="The sandbox image; it needs python3 3.8+ for the driver")
    idle_suspend_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Seconds a session without a turn keeps its sandbox before it is checkpointed and "
        "suspended (the next message resumes it); 0: never. Unset: HANGAR_IDLE_SUSPEND_SECONDS",
    )
    resources: Resources = Field(default_factory=Resources)
    env: list[EnvVar] = Field(default_factory=list)
    secret_refs: list[SecretRef] = Field(default_factory=list)
    pod_overrides: dict[str, Any] = Field(
        default_factory=dict, description="Merged into the sandbox pod spec (strategic fields only)"
    )
    runtime_class_name: str | None = None
    approvals: ApprovalPolicy | None = None
    approval_timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description="Seconds an approval waits for a decision before it is denied "
        "(default: HANGAR_APPROVAL_TIMEOUT_SECONDS, 600)",
    )
    mcp: dict[str, McpServer] = Field(default_factory=dict)
    egress: list[str] = Field(
        default_factory=list, description="Hosts or CIDRs (with optional :port) the sandbox may reach"
    )
    repository: Repository | None = None
    verification: Verification | None = Field(
        default=None, description="Checks a job's work after the agent finishes, before it is delivered"
    )
    warm_pool: WarmPool | None = Field(
        default=None,
        description="Sandboxes kept started for new sessions (not for an Environment with a repository)",
    )
    harness_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to the harness adapter: antigravity command and message_via, pi provider and "
        "pi_args, codex base_url, env_key and codex_config, claude claude_args",
    )


class PoolStatus(Model):
    size: int = Field(default=0, description="Warm sandboxes asked for (spec.warmPool.size)")
    ready: int = Field(default=0, description="Warm sandboxes whose driver is connected and verified")
    starting: int = Field(default=0, description="Warm sandboxes started and not ready yet")
    summary: str = Field(default="", description="ready/size, for kubectl get")


class EnvironmentStatus(Model):
    sessions: int = Field(default=0, description="Sessions that use this environment")
    pool: PoolStatus | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class Environment(Resource):
    info: ClassVar[ResourceInfo] = ResourceInfo(
        kind="Environment",
        plural="environments",
        singular="environment",
        short_names=["henv"],
        columns=[
            col("Image", "string", ".spec.image"),
            col("Approvals", "string", ".spec.approvals"),
            col("Sessions", "integer", ".status.sessions"),
            col("Warm", "string", ".status.pool.summary"),
            col("Repository", "string", ".spec.repository.url", priority=1),
            col("Age", "date", ".metadata.creationTimestamp"),
        ],
        root_rules=[name_rule("Environment")],
    )
    kind: str = "Environment"
    spec: EnvironmentSpec
    status: EnvironmentStatus = Field(default_factory=EnvironmentStatus)
