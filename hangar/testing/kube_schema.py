"""What the apiserver does to a hangar object with its CRD's structural schema before storing it: prune the
fields the schema doesn't know and fill in its defaults. The schema is the one ``hangar crds`` writes
(``crd_for``), so the fake stores what the real apiserver stores.

Not done here: the CEL rules (``x-kubernetes-validations``: name pattern, fields fixed once set); the fake
checks values with the pydantic models instead of the OpenAPI types.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from hangar.crdgen import crd_for
from hangar.models import KINDS

Schema = dict[str, Any]


@cache
def schema_of(plural: str) -> Schema:
    model = next(k for k in KINDS if k.info.plural == plural)
    out: Schema = crd_for(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


def _structural(value: Any, schema: Schema) -> Any:
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return value
        props: dict[str, Schema] = schema.get("properties") or {}
        extra: Schema | None = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for k, v in value.items():
            sub = props.get(k, extra)
            if sub is None:
                if schema.get("x-kubernetes-preserve-unknown-fields"):
                    out[k] = v
                continue  # pruned
            if v is None and not sub.get("nullable"):
                continue  # a null the schema doesn't allow is dropped, and the default applies
            out[k] = _structural(v, sub)
        for k, sub in props.items():
            if k not in out and "default" in sub:
                out[k] = _structural(copy.deepcopy(sub["default"]), sub)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_structural(v, schema["items"]) for v in value]
    return value


def prune_and_default(plural: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the apiserver would store it: unknown fields gone, defaults set (``metadata`` as is)."""
    schema = schema_of(plural)
    meta = obj.get("metadata")
    out: dict[str, Any] = _structural({k: v for k, v in obj.items() if k != "metadata"}, schema)
    if meta is not None:
        out["metadata"] = meta
    return out
