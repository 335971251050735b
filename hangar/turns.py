"""Creating a session's next Turn: shared by the API (a message) and the operator (a queued steer)."""

from __future__ import annotations

from datetime import UTC, datetime

from .bodies import Body
from .kube import ApiException, Kube, owner_ref


def turn_index(turn: dict[str, object]) -> int:
    spec = turn.get("spec")
    return int(spec.get("index", 0)) if isinstance(spec, dict) else 0


async def create_turn(
    kube: Kube,
    session: str,
    message: Body | str,
    *,
    by: str = "",
    from_steer: str | None = None,
    klass: str = "unclassified",
    classified_by: str | None = None,
) -> str:
    """Creates Turn ``<session>-<n>`` with the next free index; the apiserver's name uniqueness makes the
    allocation race-free. A turn started by a queued steer is created once, however often this is called.
    ``message`` is as the Turn holds it (``hangar.bodies.stow``): inline, or a preview and a stored body;
    a plain string is an inline one."""
    msg = message if isinstance(message, Body) else Body(message)
    s = await kube.get("sessions", session)
    if s is None:
        raise LookupError(session)
    existing = await kube.list("turns", label_selector=f"hangar.dev/session={session}")
    if from_steer:
        for t in existing:
            if t["spec"].get("fromSteer") == from_steer:
                return str(t["metadata"]["name"])
    index = max([turn_index(t) for t in existing] or [0]) + 1
    for _ in range(50):
        spec: dict[str, object] = {"session": session, "index": index, **msg.fields(), "by": by}
        if from_steer:
            spec["fromSteer"] = from_steer
        if from_steer or klass != "unclassified":
            spec["class"] = klass
        if classified_by and klass != "unclassified":
            spec["classifiedBy"] = classified_by
            spec["classifiedAt"] = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        body = {
            "apiVersion": "hangar.dev/v1alpha1",
            "kind": "Turn",
            "metadata": {
                "name": f"{session}-{index}",
                "labels": {"hangar.dev/session": session, "app.kubernetes.io/part-of": "hangar"},
                "ownerReferences": [owner_ref(s)],
            },
            "spec": spec,
        }
        try:
            await kube.create("turns", body)
            return f"{session}-{index}"
        except ApiException as e:
            if e.status != 409:
                raise
            index += 1
    raise RuntimeError(f"could not allocate a turn index for {session}")
