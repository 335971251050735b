"""Shared pieces of every hangar resource model.

Resources are camelCase on the wire, like every Kubernetes API; the Python side uses snake_case names.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

GROUP = "hangar.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

Harness = Literal["claude", "codex", "pi", "antigravity"]
LIVE_HARNESSES: frozenset[str] = frozenset({"claude", "codex"})
ApprovalPolicy = Literal["auto", "ask", "deny-risky", "governed"]
APPROVAL_POLICIES: tuple[str, ...] = get_args(ApprovalPolicy)
SteerClass = Literal["correction", "redirect", "new_info", "unclassified"]

# A DNS label short enough that "<name>-<n>" pod and secret names stay within 63 characters.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX = 40


def iso(when: datetime | float | None = None) -> str:
    """The one time stamp form in resources and events: UTC, milliseconds, ``Z``."""
    if when is None:
        dt = datetime.now(UTC)
    elif isinstance(when, datetime):
        dt = when.astimezone(UTC)
    else:
        dt = datetime.fromtimestamp(when, UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(value: Any) -> datetime | None:
    """A time stamp from a resource (``iso``'s form or any ISO 8601), or None when there is none."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", serialize_by_alias=True
    )

    def dump(self) -> dict[str, Any]:
        """The wire form: camelCase, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


class PrinterColumn(Model):
    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0


class ResourceInfo(Model):
    """How a kind is served: everything the CRD needs besides the schema."""

    kind: str
    plural: str
    singular: str
    short_names: list[str]
    columns: list[PrinterColumn]
    # CEL rules on the whole object (they may read metadata.name).
    root_rules: list[dict[str, str]] = Field(default_factory=list)


class Resource(Model):
    """A hangar custom resource: subclasses set ``spec`` and ``status`` types and ``info``."""

    info: ClassVar[ResourceInfo]
    api_version: str = Field(default=API_VERSION)
    kind: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_null_status(cls, data: Any) -> Any:
        # A new object has no status yet (or a null one): read it as the status model's defaults.
        if isinstance(data, dict) and "status" in data and data["status"] is None:
            return {k: v for k, v in data.items() if k != "status"}
        return data

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def generation(self) -> int | None:
        gen = self.metadata.get("generation")
        return int(gen) if isinstance(gen, int) else None

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.metadata.get("labels") or {})

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))


def name_rule(kind: str, max_len: int = NAME_MAX) -> dict[str, str]:
    return {
        "rule": f"self.metadata.name.size() <= {max_len} && self.metadata.name.matches('{NAME_PATTERN}')",
        "message": (
            f"{kind} name must be a DNS label of at most {max_len} characters: lowercase letters, digits "
            "and '-', starting with a letter"
        ),
    }


def col(name: str, type_: str, path: str, description: str = "", priority: int = 0) -> PrinterColumn:
    return PrinterColumn.model_validate(
        {"name": name, "type": type_, "jsonPath": path, "description": description, "priority": priority}
    )
