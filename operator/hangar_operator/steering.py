"""Steering a running turn: steers, withdrawals, interrupts and their classes (the operator's side).

People write requests into the Turn's spec (REST, the CLI, ``kubectl patch``: the same path); this module
delivers them to the sandbox's driver and records what happened in the Turn's status. The Runtime calls it
under the session's lock.

Steers (``spec.steers[]``, status in ``status.steers[]``):

- A new steer on a running turn becomes ``sending`` and goes to the driver (command ``steer-<turn>-<id>``,
  carrying the turn, so a steer that arrives after its turn ended is reported ``queued`` by the driver and
  never lands in the next one). The driver's adapter reports its fate once: ``delivered`` (the CLI has it in
  this turn) or ``queued`` (the turn ended first: the steer starts the next Turn, ``nextTurn``).
- A steer written to a turn that has already ended is ``queued`` at once; one on a one-shot harness is
  ``refused`` (the REST API says so before writing anything).
- ``withdrawn: true`` in spec asks to take it back: not yet sent → ``cancelled`` here; sent → the driver's
  ``withdraw`` command arbitrates (``withdraw-<turn>-<id>``). The adapter either still holds it (withdrawn:
  ``cancelled``, no ``steer`` event follows) or has handed it on (``withdraw: too_late``; its ``steer``
  event brings delivered or queued). Never both.
- The sandbox lost (or killed for an unconfirmed interrupt) with a steer still ``sending``: ``queued``, so it
  starts the next Turn. The CLI may have read it just before it died; we prefer a rare repeat to a loss.

Interrupts (``spec.interrupts[]``): sent to the driver (``interrupt-<turn>-<id>``, with the message if
any) and a deadline armed. The confirmation is a signed ``turn_ended`` or, for an interrupt with a message
on a live turn, the signed ``interrupted`` (continued) event: the same turn goes on with the message
(``messageStatus: delivered``). A message that could not go on in the same turn (one-shot harness, the turn
ended first, the run killed) starts the next Turn (``messageStatus: queued``). No confirmation in time: the
pod is deleted and the turn recorded ``interrupted``/130, "hangar killed the run".

Classes: ``class`` (with ``classifiedBy``/``classifiedAt``) on a steer or interrupt in spec is mirrored into
its status record, counted (``hangar_steer_classifications_total``) and shown as a ``steer.classified``
progress event.

Nothing here depends on the turn belonging to a session rather than a job except ``owner`` (whose lock,
sandbox and activity stream the turn uses) and where the next Turn is created.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hangar.kube import Obj
from hangar.models import LIVE_HARNESSES
from hangar.turns import turn_index

from . import metrics

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("hangar.operator.steering")

# The driver events this module applies (the Runtime routes them here).
EVENTS = frozenset({"steer", "interrupted", "command_result"})
FINISHED = ("Completed", "Failed", "Interrupted", "NeedsInput")
FINAL_STEER = ("delivered", "queued", "cancelled", "refused")
SHOWN_CHARS = 300


def iso(ts: float | None = None) -> str:
    dt = datetime.fromtimestamp(ts, UTC) if ts is not None else datetime.now(UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def one_shot_reason(harness: str) -> str:
    return (
        f"{harness} cannot be steered: it runs one-shot, so a message can't reach a running turn. "
        "Send it to start the next turn, or interrupt the run"
    )


def steer_command(turn: str, steer_id: str) -> str:
    return f"steer-{turn}-{steer_id}"


def withdraw_command(turn: str, steer_id: str) -> str:
    return f"withdraw-{turn}-{steer_id}"


def interrupt_command(turn: str, interrupt_id: str) -> str:
    return f"interrupt-{turn}-{interrupt_id}"


def _short(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


class Steering:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.deadlines: dict[str, asyncio.Task[None]] = {}
        # Command ids this process has queued on the gateway. The gateway's queue lives in memory only: after
        # an operator restart what the resources show as sent is sent again (same ids; the driver dedupes).
        self.sent: set[str] = set()

    def forget_sent(self, turn: str) -> None:
        """The turn will run again in another sandbox: what was sent for it is sent again there."""
        for prefix in ("steer-", "withdraw-", "interrupt-"):
            self.sent -= {cid for cid in self.sent if cid.startswith(f"{prefix}{turn}-")}
        self.cancel_deadline(turn)

    def stop(self) -> None:
        for task in self.deadlines.values():
            task.cancel()
        self.deadlines.clear()

    # --- helpers ----------------------------------------------------------------------------------------
    async def _event(self, owner: str, turn: str, payload: dict[str, Any]) -> None:
        await self.rt.event(owner, "progress", payload, turn)

    async def _send(self, run: str, op: str, body: dict[str, Any], command_id: str) -> None:
        await self.rt.gateway.send(run, op, body, command_id=command_id)
        self.sent.add(command_id)

    async def _next_turn(self, owner: str, req: dict[str, Any]) -> str:
        """The turn a steer's or interrupt's message starts (``req`` is its spec entry): created once."""
        return await self.rt.create_turn(
            owner,
            req["message"],
            by=req.get("by", ""),
            from_steer=str(req["id"]),
            klass=req.get("class", "unclassified"),
        )

    async def _find(self, owner: str, kind: str, item_id: str, hint: str | None) -> Obj | None:
        """The turn whose spec holds steer/interrupt ``item_id``: the hinted turn first, else the latest."""
        if not item_id:
            return None
        if hint:
            turn = await self.rt.kube.get("turns", hint)
            if turn and any(x.get("id") == item_id for x in turn["spec"].get(kind) or []):
                return turn
        turns = await self.rt.kube.list("turns", label_selector=f"hangar.dev/session={owner}")
        for turn in sorted(turns, key=turn_index, reverse=True):
            if any(x.get("id") == item_id for x in turn["spec"].get(kind) or []):
                return turn
        return None

    @staticmethod
    def _states(turn: Obj, kind: str) -> list[dict[str, Any]]:
        return [dict(x) for x in (turn.get("status") or {}).get(kind) or []]

    async def _sandbox(self, owner: str) -> tuple[str | None, str]:
        s = await self.rt.kube.get("sessions", owner)
        if s is None:
            return None, "claude"
        run = ((s.get("status") or {}).get("sandbox") or {}).get("run")
        return run, str(s["spec"].get("harness", "claude"))

    @staticmethod
    def _class_changed(req: dict[str, Any], state: dict[str, Any]) -> bool:
        klass = req.get("class") or "unclassified"
        at = req.get("classifiedAt")
        if klass == "unclassified" and not req.get("classifiedBy"):
            return False
        return not (
            state.get("class", "unclassified") == klass and (not at or state.get("classifiedAt") == at)
        )

    def _classify(
        self, owner: str, turn: str, kind: str, req: dict[str, Any], state: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Mirror a class set in spec into the status record; the progress event to show, if it changed."""
        if not self._class_changed(req, state):
            return None
        klass = req.get("class") or "unclassified"
        at = req.get("classifiedAt")
        by = req.get("classifiedBy") or "spec"
        state.update({"class": klass, "classifiedBy": by, "classifiedAt": at or iso()})
        metrics.STEER_CLASSIFICATIONS.labels(klass).inc()
        return {
            "message": f"steer.classified: {kind} {req['id']} is {klass} (by {by})",
            "event": "steer.classified",
            kind: req["id"],
            "class": klass,
            "by": by,
        }

    # --- requests in spec -------------------------------------------------------------------------------
    def pending(self, turn: Obj) -> bool:
        """Does this Turn (as a watch event shows it) ask for something not done yet? No API call: most
        events are the operator's own status writes and need nothing."""
        status = turn.get("status") or {}
        phase = status.get("phase") or "Queued"
        if phase == "Queued":
            return False  # delivered when it starts (Runtime._start_turn)
        name = turn["metadata"]["name"]
        spec = turn.get("spec") or {}
        states = {x.get("id"): x for x in status.get("steers") or []}
        for req in spec.get("steers") or []:
            state = states.get(req.get("id"))
            if state is None or self._class_changed(req, state):
                return True
            if state.get("status") == "sending" and (
                (req.get("withdrawn") and not state.get("withdraw"))
                or steer_command(name, str(req["id"])) not in self.sent
            ):
                return True
        states = {x.get("id"): x for x in status.get("interrupts") or []}
        for req in spec.get("interrupts") or []:
            state = states.get(req.get("id"))
            if state is None or self._class_changed(req, state):
                return True
            if (
                state.get("status") == "sent"
                and phase not in FINISHED
                and (interrupt_command(name, str(req["id"])) not in self.sent or name not in self.deadlines)
            ):
                return True
        return False

    async def reconcile(self, owner: str, turn_name: str) -> None:
        """Deliver what the Turn's spec asks for and its status doesn't show yet. Idempotent."""
        turn = await self.rt.kube.get("turns", turn_name)
        if turn is None:
            return
        run, harness = await self._sandbox(owner)
        await self._reconcile_steers(owner, turn, run, harness)
        await self._reconcile_interrupts(owner, turn, run)

    async def _reconcile_steers(self, owner: str, turn: Obj, run: str | None, harness: str) -> None:
        name = turn["metadata"]["name"]
        status = turn.get("status") or {}
        phase = status.get("phase") or "Queued"
        same_run = bool(run) and status.get("run") == run
        live = phase == "Running" and same_run
        states = self._states(turn, "steers")
        by_id = {x.get("id"): x for x in states}
        changed = False
        sends: list[tuple[str, dict[str, Any], str]] = []
        events: list[dict[str, Any]] = []
        for req in turn["spec"].get("steers") or []:
            sid = str(req["id"])
            state = by_id.get(sid)
            if state is None:
                if req.get("withdrawn"):
                    state = {"id": sid, "status": "cancelled", "withdraw": "withdrawn", "at": iso()}
                    state["reason"] = "withdrawn before it was sent to the agent"
                    events.append(
                        {"message": f"steer {sid} withdrawn", "event": "steer.status", "steer": sid}
                    )
                elif harness not in LIVE_HARNESSES:
                    state = {"id": sid, "status": "refused", "at": iso(), "reason": one_shot_reason(harness)}
                    events.append({"message": f"steer {sid} refused", "event": "steer.status", "steer": sid})
                elif phase in FINISHED:
                    state = {"id": sid, "status": "queued", "at": iso()}
                    state["reason"] = "the turn had ended before the steer was sent"
                    state["nextTurn"] = await self._next_turn(owner, req)
                    events.append(
                        {
                            "message": f"steer {sid} queued: it starts {state['nextTurn']}",
                            "event": "steer.status",
                            "steer": sid,
                        }
                    )
                elif live and run:
                    state = {"id": sid, "status": "sending", "at": iso()}
                    sends.append(
                        (
                            "steer",
                            {"steer_id": sid, "message": req["message"], "turn": name},
                            steer_command(name, sid),
                        )
                    )
                    events.append(
                        {
                            "message": f"steered: {_short(req['message'])}",
                            "event": "steer",
                            "steer": sid,
                            "by": req.get("by", ""),
                            "class": req.get("class", "unclassified"),
                        }
                    )
                else:
                    continue  # a queued turn, or its sandbox is not there yet: delivered once it runs
                metrics.INTERVENTIONS.labels("steer", req.get("class", "unclassified")).inc()
                if state["status"] != "sending":
                    metrics.STEERS.labels(status=state["status"]).inc()
                states.append(state)
                by_id[sid] = state
                changed = True
            elif state.get("status") == "sending" and same_run and run:
                if req.get("withdrawn") and not state.get("withdraw"):
                    state["withdraw"] = "requested"
                    changed = True
                if steer_command(name, sid) not in self.sent:  # after an operator restart
                    sends.append(
                        (
                            "steer",
                            {"steer_id": sid, "message": req["message"], "turn": name},
                            steer_command(name, sid),
                        )
                    )
                if state.get("withdraw") == "requested" and withdraw_command(name, sid) not in self.sent:
                    sends.append(("withdraw", {"steer_id": sid, "turn": name}, withdraw_command(name, sid)))
            shown = self._classify(owner, name, "steer", req, state)
            if shown:
                events.append(shown)
                changed = True
        if changed:
            await self.rt.kube.patch_status("turns", name, {"steers": states})
        for op, body, cid in sends:
            if run:
                await self._send(run, op, body, cid)
        for payload in events:
            await self._event(owner, name, payload)

    async def _reconcile_interrupts(self, owner: str, turn: Obj, run: str | None) -> None:
        name = turn["metadata"]["name"]
        status = turn.get("status") or {}
        phase = status.get("phase") or "Queued"
        same_run = bool(run) and status.get("run") == run
        states = self._states(turn, "interrupts")
        by_id = {x.get("id"): x for x in states}
        changed = False
        arm = False
        events: list[dict[str, Any]] = []
        for req in turn["spec"].get("interrupts") or []:
            iid = str(req["id"])
            state = by_id.get(iid)
            message = req.get("message") or None
            if state is None:
                if phase in FINISHED:
                    state = {
                        "id": iid,
                        "status": "too_late",
                        "at": iso(),
                        "reason": "the turn had already ended",
                    }
                    if message:
                        state["messageStatus"] = "queued"
                        state["nextTurn"] = await self._next_turn(owner, req)
                    events.append(
                        {
                            "message": f"interrupt {iid}: the turn had already ended",
                            "event": "interrupt.status",
                        }
                    )
                elif phase == "Running" and same_run and run:
                    state = {"id": iid, "status": "sent", "at": iso()}
                    body: dict[str, Any] = {"turn": name, "interrupt_id": iid}
                    if message:
                        body["message"] = message
                    await self._send(run, "interrupt", body, interrupt_command(name, iid))
                    metrics.INTERRUPTS.inc()
                    arm = True
                    events.append(
                        {
                            "message": "interrupt requested" + (f": {_short(message)}" if message else ""),
                            "event": "interrupt",
                            "interrupt": iid,
                            "by": req.get("by", ""),
                            "class": req.get("class", "unclassified"),
                        }
                    )
                else:
                    continue  # not running yet: delivered once it runs
                metrics.INTERVENTIONS.labels("interrupt", req.get("class", "unclassified")).inc()
                states.append(state)
                by_id[iid] = state
                changed = True
            elif state.get("status") == "sent" and same_run and run and phase not in FINISHED:
                if interrupt_command(name, iid) not in self.sent:  # after an operator restart
                    body = {"turn": name, "interrupt_id": iid}
                    if message:
                        body["message"] = message
                    await self._send(run, "interrupt", body, interrupt_command(name, iid))
                if name not in self.deadlines:
                    arm = True
            shown = self._classify(owner, name, "interrupt", req, state)
            if shown:
                events.append(shown)
                changed = True
        if changed:
            await self.rt.kube.patch_status("turns", name, {"interrupts": states})
        if arm:
            self.arm_deadline(owner, name)
        for payload in events:
            await self._event(owner, name, payload)

    # --- driver events ----------------------------------------------------------------------------------
    async def on_event(self, owner: str, name: str, p: dict[str, Any], hint: str | None) -> None:
        if name == "steer":
            await self._steer_outcome(owner, hint, p)
        elif name == "interrupted":
            await self._interrupted(owner, hint, p)
        elif name == "command_result":
            op = p.get("op")
            if op == "steer" and not p.get("ok"):
                await self._steer_refused(owner, hint, str(p.get("steer_id", "")), str(p.get("error") or ""))
            elif op == "withdraw" and p.get("ok"):
                await self._withdraw_result(owner, hint, str(p.get("steer_id", "")), bool(p.get("withdrawn")))

    async def _steer_outcome(self, owner: str, hint: str | None, p: dict[str, Any]) -> None:
        sid, outcome = str(p.get("steer_id", "")), str(p.get("status", ""))
        if outcome not in ("delivered", "queued"):
            return
        turn = await self._find(owner, "steers", sid, hint)
        if turn is None:
            log.warning("%s: outcome %s of an unknown steer %s", owner, outcome, sid)
            return
        name = turn["metadata"]["name"]
        states = self._states(turn, "steers")
        state = next((x for x in states if x.get("id") == sid), None)
        if state is None:
            state = {"id": sid}
            states.append(state)
        if state.get("status") in FINAL_STEER:
            if state.get("status") != outcome:
                log.error(
                    "%s: steer %s is %s; the driver now says %s", name, sid, state.get("status"), outcome
                )
            return
        state.update(status=outcome, at=iso(), reason=str(p.get("reason") or "")[:500])
        if isinstance(p.get("written_at"), int | float):
            state["writtenAt"] = iso(float(p["written_at"]))
        if state.get("withdraw") == "requested":
            state["withdraw"] = "too_late"
        message = f"steer {sid} {outcome}"
        if outcome == "queued":
            req = next((x for x in turn["spec"].get("steers") or [] if x.get("id") == sid), None)
            if req is not None:
                state["nextTurn"] = await self._next_turn(owner, req)
                message += f": the turn ended first, it starts {state['nextTurn']}"
        await self.rt.kube.patch_status("turns", name, {"steers": states})
        metrics.STEERS.labels(status=outcome).inc()
        await self._event(owner, name, {"message": message, "event": "steer.status", "steer": sid})

    async def _steer_refused(self, owner: str, hint: str | None, sid: str, reason: str) -> None:
        turn = await self._find(owner, "steers", sid, hint)
        if turn is None:
            return
        states = self._states(turn, "steers")
        changed = False
        for x in states:
            if x.get("id") == sid and x.get("status") == "sending":
                x.update(status="refused", reason=reason[:500] or "refused by the sandbox", at=iso())
                changed = True
        if changed:
            await self.rt.kube.patch_status("turns", turn["metadata"]["name"], {"steers": states})
            metrics.STEERS.labels(status="refused").inc()

    async def _withdraw_result(self, owner: str, hint: str | None, sid: str, withdrawn: bool) -> None:
        turn = await self._find(owner, "steers", sid, hint)
        if turn is None:
            return
        name = turn["metadata"]["name"]
        states = self._states(turn, "steers")
        state = next((x for x in states if x.get("id") == sid), None)
        if state is None:
            return
        if withdrawn:
            if state.get("status") != "sending":
                log.error("%s: steer %s withdrawn by the driver but %s here", name, sid, state.get("status"))
                return
            state.update(status="cancelled", withdraw="withdrawn", at=iso(), reason="withdrawn")
            metrics.STEERS.labels(status="cancelled").inc()
            shown = f"steer {sid} withdrawn"
        else:
            if state.get("withdraw") == "too_late":
                return
            state["withdraw"] = "too_late"
            shown = f"steer {sid}: too late to withdraw, the agent has it"
        await self.rt.kube.patch_status("turns", name, {"steers": states})
        await self._event(owner, name, {"message": shown, "event": "steer.status", "steer": sid})

    async def _interrupted(self, owner: str, hint: str | None, p: dict[str, Any]) -> None:
        """The CLI stopped for an interrupt with a message and the same turn goes on with it (signed)."""
        iid = str(p.get("interrupt_id") or "")
        turn = await self._find(owner, "interrupts", iid, hint)
        if turn is None:
            return
        name = turn["metadata"]["name"]
        states = self._states(turn, "interrupts")
        state = next((x for x in states if x.get("id") == iid), None)
        if state is None or state.get("status") != "sent":
            return
        state.update(status="confirmed", at=iso(), messageStatus="delivered")
        await self.rt.kube.patch_status("turns", name, {"interrupts": states})
        if not any(x.get("status") == "sent" for x in states):
            self.cancel_deadline(name)
        await self._event(
            owner,
            name,
            {"message": f"interrupted: the turn goes on with {iid}'s message", "event": "interrupt.status"},
        )

    # --- the turn's end ---------------------------------------------------------------------------------
    def end_patch(self, turn_name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Status fields the turn's signed end adds: it confirms every interrupt still waiting."""
        interrupts = status.get("interrupts") or []
        self.cancel_deadline(turn_name)
        if not any(i.get("status") == "sent" for i in interrupts):
            return {}
        return {
            "interrupts": [
                {**i, "status": "confirmed", "at": iso()} if i.get("status") == "sent" else i
                for i in interrupts
            ]
        }

    async def after_end(self, owner: str, turn_name: str, lost: str | None = None) -> None:
        """After the turn ended (or its sandbox was lost: ``lost`` says how): nothing asked for is lost.

        Steers never sent are ``queued`` (withdrawn ones ``cancelled``); with ``lost``, steers still
        ``sending`` are ``queued`` too. An interrupt's message the turn did not go on with starts the next turn.
        """
        turn = await self.rt.kube.get("turns", turn_name)
        if turn is None:
            return
        steers = self._states(turn, "steers")
        by_id = {x.get("id"): x for x in steers}
        changed_s = False
        events: list[dict[str, Any]] = []
        for req in turn["spec"].get("steers") or []:
            sid = str(req["id"])
            state = by_id.get(sid)
            if state is None:
                state = {"id": sid}
                steers.append(state)
            elif state.get("status") != "sending" or not lost:
                continue
            if req.get("withdrawn") and state.get("status") is None:
                state.update(status="cancelled", withdraw="withdrawn", at=iso(), reason="withdrawn")
            else:
                reason = f"not delivered: {lost}" if lost else "the turn ended before the steer was sent"
                state.update(status="queued", at=iso(), reason=reason)
                if state.get("withdraw") == "requested":
                    state["withdraw"] = "too_late"
                state["nextTurn"] = await self._next_turn(owner, req)
                events.append(
                    {
                        "message": f"steer {sid} queued: it starts {state['nextTurn']}",
                        "event": "steer.status",
                        "steer": sid,
                    }
                )
            metrics.STEERS.labels(status=state["status"]).inc()
            changed_s = True
        interrupts = self._states(turn, "interrupts")
        by_iid = {x.get("id"): x for x in interrupts}
        changed_i = False
        for req in turn["spec"].get("interrupts") or []:
            iid = str(req["id"])
            state = by_iid.get(iid)
            if state is None:
                state = {"id": iid, "status": "too_late", "at": iso(), "reason": "the turn had already ended"}
                interrupts.append(state)
                changed_i = True
            if req.get("message") and not state.get("messageStatus"):
                state["messageStatus"] = "queued"
                state["nextTurn"] = await self._next_turn(owner, req)
                events.append(
                    {
                        "message": f"interrupt {iid}: its message starts {state['nextTurn']}",
                        "event": "interrupt.status",
                    }
                )
                changed_i = True
        patch: dict[str, Any] = {}
        if changed_s:
            patch["steers"] = steers
        if changed_i:
            patch["interrupts"] = interrupts
        if patch:
            await self.rt.kube.patch_status("turns", turn_name, patch)
        for payload in events:
            await self._event(owner, turn_name, payload)

    # --- the interrupt deadline -------------------------------------------------------------------------
    def arm_deadline(self, owner: str, turn: str) -> None:
        self.cancel_deadline(turn)
        self.deadlines[turn] = asyncio.create_task(self._interrupt_deadline(owner, turn))

    def cancel_deadline(self, turn: str) -> None:
        task = self.deadlines.pop(turn, None)
        if task and task is not asyncio.current_task():
            task.cancel()

    async def _interrupt_deadline(self, owner: str, turn_name: str) -> None:
        """An interrupt the driver doesn't confirm (a signed turn_ended or interrupted) in time kills the run."""
        await asyncio.sleep(self.rt.settings.interrupt_grace)
        rt = self.rt
        async with rt.lock(owner):
            if self.deadlines.get(turn_name) is not asyncio.current_task():
                return
            self.deadlines.pop(turn_name, None)
            turn = await rt.kube.get("turns", turn_name)
            status = (turn or {}).get("status") or {}
            if turn is None or status.get("phase") not in ("Running", "NeedsInput"):
                return
            if not any(i.get("status") == "sent" for i in status.get("interrupts") or []):
                return
            states = [
                {**i, "status": "killed", "at": iso(), "reason": "no confirmation from the driver in time"}
                if i.get("status") == "sent"
                else i
                for i in status.get("interrupts") or []
            ]
            await rt.kube.patch_status(
                "turns",
                turn_name,
                {
                    "phase": "Interrupted",
                    "outcome": "interrupted",
                    "exitStatus": 130,
                    "finishedAt": iso(),
                    "reason": "the driver did not confirm the interrupt in time; hangar killed the run",
                    "interrupts": states,
                },
            )
            metrics.INTERRUPT_KILLS.inc()
            metrics.TURNS.labels(outcome="interrupted").inc()
            await rt.event(
                owner,
                "progress",
                {
                    "message": "the driver did not confirm the interrupt in time: hangar killed the run",
                    "event": "interrupt.status",
                },
                turn_name,
            )
            await rt._release_sandbox(owner, "interrupt not confirmed: run killed", keep_phase="Idle")
            await self.after_end(owner, turn_name, lost="hangar killed the run")
        await rt.reconcile_session(owner)
