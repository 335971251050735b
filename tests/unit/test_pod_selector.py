"""The operator's pod watch is filtered by the apiserver: every pod a pod handler takes passes the selector
(a sandbox, a warm one, a claimed one), and a pod of anything else never reaches the operator."""

from __future__ import annotations

import re
from typing import Any

import kopf
import pytest
from kopf._cogs.structs.references import Resource

from hangar.config import Settings
from hangar.models import labels as L
from hangar.models.environment import EnvironmentSpec
from hangar_operator import handlers
from hangar_operator.main import configure
from hangar_operator.pool_objects import Member, claim_patch, member_objects
from hangar_operator.runs import make_run
from hangar_operator.sandbox_objects import sandbox_pod

PODS = Resource("", "v1", "pods", kind="Pod", namespaced=True)
SESSIONS = Resource("hangar.dev", "v1alpha1", "sessions", kind="Session", namespaced=True)
SESSION = {
    "apiVersion": "hangar.dev/v1alpha1",
    "kind": "Session",
    "metadata": {"name": "s", "namespace": "ns", "uid": "u-1"},
    "spec": {"harness": "claude"},
}


def matches(selector: str, labels: dict[str, str]) -> bool:
    """The apiserver's reading of the two forms the selector uses: ``k=v`` and ``k in (a,b)``."""
    for req in re.findall(r"[^,()]+\([^)]*\)|[^,]+", selector):
        if m := re.fullmatch(r"\s*([\w./-]+)\s+in\s+\(([^)]*)\)\s*", req):
            if labels.get(m[1]) not in {v.strip() for v in m[2].split(",")}:
                return False
        elif m := re.fullmatch(r"\s*([\w./-]+)\s*=\s*([\w.-]+)\s*", req):
            if labels.get(m[1]) != m[2]:
                return False
        else:
            raise AssertionError(f"a selector form this test does not read: {req!r}")
    return True


def selector_for(resource: Resource) -> list[str]:
    settings = kopf.OperatorSettings()
    configure(settings)
    return list(settings.watching.label_selectors.collect(resource))


def test_the_pod_watch_alone_is_selected() -> None:
    assert selector_for(PODS) == [handlers.POD_SELECTOR]
    assert selector_for(SESSIONS) == []


def test_every_pod_handler_filter_passes_the_selector() -> None:
    pod_handlers = [
        h
        for h in kopf.get_default_registry()._watching.get_all_handlers()
        if h.selector is not None and h.selector.check(PODS)
    ]
    assert {h.id for h in pod_handlers} == {"sandbox_pod_event", "pool_member_event"}
    for h in pod_handlers:
        labels = {k: v for k, v in (h.labels or {}).items() if isinstance(v, str)}
        assert labels and matches(handlers.POD_SELECTOR, labels), h.id


def _member_pod() -> dict[str, Any]:
    env_obj = {
        "apiVersion": "hangar.dev/v1alpha1",
        "kind": "Environment",
        "metadata": {"name": "e", "namespace": "ns", "uid": "u-e"},
    }
    spec = EnvironmentSpec.model_validate({"image": "x", "warmPool": {"size": 1}})
    return member_objects(env_obj, Member("ns", "e", "wabc"), spec, Settings(), "g:1")[3]


def test_the_pods_hangar_makes_pass_and_others_do_not() -> None:
    sandbox = sandbox_pod(
        SESSION, EnvironmentSpec(image="x"), make_run("ns", "ns", "s", 1), Settings(), "g:1"
    )
    member = _member_pod()
    claimed = {
        **member["metadata"]["labels"],
        **claim_patch(SESSION, make_run("ns", "ns", "s", 1))["metadata"]["labels"],
    }
    claimed = {k: v for k, v in claimed.items() if v is not None}
    for labels in (sandbox["metadata"]["labels"], member["metadata"]["labels"], claimed):
        assert matches(handlers.POD_SELECTOR, labels), labels
    for labels in (
        {},
        {"app": "web"},
        {L.PART_OF: "hangar", L.COMPONENT: "workspace"},
        {L.PART_OF: "other", L.COMPONENT: "sandbox"},
        {L.COMPONENT: "pool-member"},
    ):
        assert not matches(handlers.POD_SELECTOR, labels), labels


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b,c in (d,e)", {"a": "b", "c": "e"}, True),
        ("a=b,c in (d,e)", {"a": "b"}, False),
    ],
)
def test_the_tests_reading_of_a_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected
