"""The objects of one warm sandbox (a pool member): a run key Secret, an empty workspace PVC and a sandbox
Pod, owned by the Environment, made as a session's are (``sandbox_objects``) so a claimed one is no
different from a fresh one, except that its driver runs nothing until a session adopts it (HANGAR_POOL).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError

from hangar.config import Settings
from hangar.kube import JsonPatch, Obj, owner_ref
from hangar.models import labels as L
from hangar.models.environment import EnvironmentSpec
from hangar_driver.protocol import new_run_key

from .runs import Run
from .sandbox_objects import SANDBOX, labels, pvc_name, sandbox_pod, workspace_pvc

MEMBER = "pool-member"  # the component label of an unclaimed warm sandbox (a claimed one is SANDBOX)
RETIRED = "pool-retired"  # one being removed (its key Secret said so first: ``retire_key``)
# The component label of a member's key Secret: unclaimed, claimed, retired. Claims and retirements are
# test-and-sets of it (``take_key``, ``retire_key``).
KEY, KEY_CLAIMED, KEY_RETIRED = "run-key", "run-key-claimed", "run-key-retired"
_KEY_COMPONENT = "/metadata/labels/" + L.COMPONENT.replace("~", "~0").replace("/", "~1")
CLAIM_SESSION = "hangar.dev/claim-session"  # on a claimed key Secret: the claiming session's name
CLAIMED_AT = "hangar.dev/claimed-at"  # and when (epoch seconds)
_PREFIX = "pool."
_POOL_RUN = re.compile(r"^pool\.(?P<ns>[a-z0-9][-a-z0-9]*)\.(?P<member>[a-z0-9][-a-z0-9]*)$")


@dataclass(frozen=True)
class Member:
    namespace: str
    env: str
    name: str  # the pod's; its Secret is <name>-key, its volume <name>-workspace

    @property
    def run_id(self) -> str:
        # A dot and no "-r<n>" ending: never a session's run id (runs.py), in any namespace.
        return f"{_PREFIX}{self.namespace}.{self.name}"

    @property
    def key_secret(self) -> str:
        return f"{self.name}-key"

    @property
    def workspace(self) -> str:
        return pvc_name(self.name)


def new_member_name(env: str) -> str:
    # "w" + hex: the name never ends in "-r<digits>", so it is never read as a session's run.
    return f"{env[:40]}-pool-w{secrets.token_hex(4)}"


def parse_pool_run(run_id: str) -> tuple[str, str] | None:
    """(namespace, member) of a warm sandbox's run id, None for any other."""
    m = _POOL_RUN.match(run_id)
    return (m.group("ns"), m.group("member")) if m else None


def member_labels(env: str, component: str = MEMBER) -> dict[str, str]:
    return {**L.part_of(), L.COMPONENT: component, L.POOL: env}


def member_objects(
    env_obj: Obj, member: Member, spec: EnvironmentSpec, settings: Settings, gateway: str
) -> tuple[Obj, str, Obj, Obj]:
    """(key Secret, its key, workspace PVC, Pod) of a new warm sandbox of ``env_obj``."""
    assert spec.warm_pool is not None
    owner = [owner_ref(env_obj)]
    # The session-shaped object the sandbox builders read: the member's name, the pool's harness.
    as_session: Obj = {
        "apiVersion": env_obj["apiVersion"],
        "kind": env_obj["kind"],
        "metadata": {"name": member.name, "uid": env_obj["metadata"]["uid"]},
        "spec": {"harness": spec.warm_pool.harness},
    }
    key = new_run_key()
    secret: Obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": member.key_secret,
            "labels": member_labels(member.env, KEY),
            "ownerReferences": owner,
        },
        "type": "Opaque",
        "data": {"run-key": base64.b64encode(key.encode()).decode()},
    }
    pvc = workspace_pvc(as_session, settings)
    pvc["metadata"]["labels"] = member_labels(member.env, "workspace")
    pvc["metadata"]["ownerReferences"] = owner
    run = Run(member.namespace, member.name, member.name, member.run_id)
    pod = sandbox_pod(as_session, spec, run, settings, gateway)
    pod["metadata"]["labels"] = member_labels(member.env)
    pod["metadata"]["annotations"] = {L.RUN: member.run_id}
    pod["metadata"]["ownerReferences"] = owner
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "sandbox")
    container["env"] = [e for e in container["env"] if e["name"] != "HANGAR_SESSION"]
    container["env"].append({"name": "HANGAR_POOL", "value": "1"})
    return secret, key, pvc, pod


def claim_patch(session: Obj, run: Run) -> Obj:
    """A claimed warm sandbox's pod made the session's (after the claim won on its key Secret,
    ``take_key``): relabelled and re-owned as a session's pod."""
    return {
        "metadata": {
            "labels": {
                L.COMPONENT: SANDBOX,
                L.POOL: None,
                L.SESSION: session["metadata"]["name"],
                L.RUN: run.pod,
            },
            "annotations": {L.RUN: run.id, L.CLAIMED_BY: session["metadata"]["uid"]},
            "ownerReferences": [owner_ref(session)],
        }
    }


def _key_set(to: str, annotations: dict[str, str]) -> JsonPatch:
    return [
        {"op": "test", "path": _KEY_COMPONENT, "value": KEY},
        {"op": "replace", "path": _KEY_COMPONENT, "value": to},
        {"op": "add", "path": "/metadata/annotations", "value": annotations},
    ]


def take_key(session: Obj, run: Run, now: float) -> JsonPatch:
    """The claim's test-and-set, on the member's key Secret (a small object, where the pod is a large one
    with admission and watchers): it goes through only while the Secret is still the unclaimed member's,
    so of concurrent claims and retirements (this process's, another's) the apiserver lets exactly one
    through; the others get 422. It names the claim, for a later process to mend one left halfway."""
    meta = session["metadata"]
    return _key_set(
        KEY_CLAIMED,
        {
            L.CLAIMED_BY: str(meta["uid"]),
            CLAIM_SESSION: str(meta["name"]),
            L.RUN: run.id,
            CLAIMED_AT: f"{now:.3f}",
        },
    )


def retire_key() -> JsonPatch:
    """The same test-and-set for a retirement: a retirement and a claim never both win."""
    return _key_set(KEY_RETIRED, {})


def retire_patch() -> Obj:
    """The pod of a member whose retirement won on its key (a start finds it and finishes the removal)."""
    return {"metadata": {"labels": {L.COMPONENT: RETIRED}}}


def spec_hash(spec: Obj) -> str:
    """What a member was made from: the Environment's spec without the pool's size (resizing keeps members)."""
    body = json.loads(json.dumps(spec))
    (body.get("warmPool") or {}).pop("size", None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def created(pod: Obj) -> float:
    ts = str(pod["metadata"].get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def resource_version(obj: Obj) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:  # opaque by contract: then the one this process wrote is kept
        return 0


def env_spec(env_obj: Obj | None) -> EnvironmentSpec | None:
    if env_obj is None or env_obj["metadata"].get("deletionTimestamp"):
        return None
    try:
        return EnvironmentSpec.model_validate(env_obj.get("spec") or {})
    except ValidationError:
        return None


def pool_of(spec: EnvironmentSpec | None) -> int:
    """The pool's size: 0 without one, and for an Environment with a repository (a checkout is per
    session: its branch is the session's, so it can't be made before the session)."""
    if spec is None or spec.warm_pool is None or spec.repository is not None:
        return 0
    return spec.warm_pool.size


def volume_patch(s_obj: Obj) -> Obj:
    """A claimed member's volume goes with its sandbox: the session's from now on (status.workspace)."""
    name = str(s_obj["metadata"]["name"])
    return {
        "metadata": {
            "labels": {**labels(name, component="workspace"), L.POOL: None},
            "ownerReferences": [owner_ref(s_obj)],
        }
    }
