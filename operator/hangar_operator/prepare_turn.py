"""The first turn's CLI, pre-started: ``prepare_turn`` to a sandbox that is connected with nothing to run.

The driver pre-starts the next turn's CLI itself once a turn ends (``hangar_driver/live.py``, "Pre-started
CLIs"), from that turn's configuration. A sandbox's first turn has no turn before it, and the driver cannot
guess its configuration: so once the session's own run is connected (a warm pool's sandbox only once it was
adopted: the run in the session's status is the session's, and a pooled driver refuses every other command)
and no turn is queued, running or was ever run there, the operator sends what that turn's ``start_turn`` will
carry but the message. The driver starts that CLI under the same rules as its own pre-starts: a
``start_turn`` that differs starts afresh, so a wrong guess costs a process, never a turn's semantics.

It goes ``PRESTART_AFTER`` after the run's driver connected, not at once: the CLI's start (node, about half
a second of a core) is speculative, and started at the connect it competed with the session's `connected`
write on its way to whoever waits for it (docs/performance.md, 2026-12-02 13:05-14:15). A first message
sooner than that gets its CLI from its ``start_turn``, as without a pre-start.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from hangar.kube import Obj
from hangar.models import LIVE_HARNESSES, Session, Turn
from hangar.models.environment import EnvironmentSpec
from hangar.turns import turn_index

from .context import Context

# The runs a prepare_turn went to, so an idle session's reconciles send it once. Bounded: a run forgotten
# gets it again with the same command id, which its driver answers as a duplicate without starting anything.
REMEMBERED = 4096
_sent: OrderedDict[str, None] = OrderedDict()
PRESTART_AFTER = 0.25  # seconds after the run's driver connected (the module's head says why)


def turn_body(s: Session, policy: str, env: EnvironmentSpec) -> dict[str, Any]:
    """What a ``start_turn`` of this session carries besides the turn's name and message (sessions.py)."""
    st = s.status
    return {
        "model": s.spec.model,
        "conversation": st.conversation,
        # A fork's first turn: the CLI copies the parent's conversation rather than continue it.
        "fork": bool(st.conversation and st.forked_from and st.conversation == st.forked_from.conversation),
        "approvals": policy,
        "tainted": st.taint.tainted or s.spec.tainted,
        "extra": env.harness_options,
    }


def prepare_body(
    s: Session, run_pod: str, turns: list[Obj], policy: str, env: EnvironmentSpec
) -> dict[str, Any] | None:
    """The ``prepare_turn`` to send to run ``run_pod`` now, or None: only while it is connected and idle, with
    no turn queued or running, and none ever run in it (after one the driver pre-starts the next itself)."""
    st = s.status
    if s.spec.harness not in LIVE_HARNESSES or s.spec.stopped:
        return None
    if st.phase != "Idle" or st.current_turn or not st.sandbox.connected or st.sandbox.run != run_pod:
        return None
    if st.suspended is not None or st.resuming is not None:
        return None
    for t in turns:
        ts = Turn.model_validate(t).status
        if not ts.ended or ts.run == run_pod:
            return None
    # The name the next Turn gets (hangar.turns.create_turn): its $HANGAR_IO is part of the CLI's environment.
    index = max([turn_index(t) for t in turns] or [0]) + 1
    return {"turn": f"{s.name}-{index}", **turn_body(s, policy, env)}


async def prepare_first_turn(
    ctx: Context,
    ns: str,
    s_obj: Obj,
    turns: list[Obj],
    policy: str,
    env: EnvironmentSpec,
    later: Callable[[float], None] | None = None,
) -> bool:
    """Send ``prepare_turn`` when ``prepare_body`` says so, once per run, ``PRESTART_AFTER`` after the run
    connected: sooner, ``later`` is told in how many seconds to look again. True when it was sent."""
    s = Session.model_validate(s_obj)
    run = ctx.run_of(ns, s.status.sandbox.run)
    if run is None or run.id in _sent or not ctx.gateway.connected(run.id):
        return False
    body = prepare_body(s, run.pod, turns, policy, env)
    if body is None:
        return False
    left = PRESTART_AFTER - ctx.gateway.connected_for(run.id)
    if left > 0:
        if later is not None:
            later(left)
        return False
    await ctx.gateway.send(run.id, "prepare_turn", body, command_id=f"prepare-{run.pod}")
    _sent[run.id] = None
    while len(_sent) > REMEMBERED:
        _sent.popitem(last=False)
    return True
