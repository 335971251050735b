"""How every bench sees the apiserver: plain JSON, never kubernetes_asyncio's typed models.

The end of a sample is an object reaching a state, seen by a list and then a watch of that one object; the
pod-times watch (``_observe.PodTimes``) sees every pod. Both run on the loop that times the sample, so what
they cost there is paid by whichever sample is running. kubernetes_asyncio's ``Watch`` built a new API client
per watch (an SSL context with the CA bundle: ~20 ms of CPU, right after the list) and decoded every event
into typed models (~0.7 ms a pod event, JSON encoded and decoded again first): hangar's samples, with a
pool's refill and a claimed pod's relabel, made more of those events than the floors'. Here each response
is read as bytes and decoded with ``json.loads`` (~0.02 ms a pod event), through the API client's own
connection pool (``_preload_content=False``), for pods, Sessions, Sandboxes and claims alike.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

from _stats import log
from kubernetes_asyncio.client.exceptions import ApiException

Check = Callable[[dict[str, Any]], bool]
Handle = Callable[[str, dict[str, Any]], Awaitable[None]]


async def call(fn: Any, *args: Any, **params: Any) -> dict[str, Any]:
    """``fn`` (a kubernetes_asyncio API method: a list, a create) answered as JSON; ApiException when the
    status is not 2xx, as the typed call raises."""
    resp = await fn(*args, _preload_content=False, **params)
    try:
        body = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status < 300:
        raise ApiException(status=resp.status, reason=body.decode(errors="replace")[:2000])
    out: dict[str, Any] = json.loads(body)
    return out


async def events(list_fn: Any, *args: Any, **params: Any) -> AsyncGenerator[dict[str, Any], None]:
    """The events of one watch request (``list_fn`` with ``watch=True``), each a decoded JSON line, until the
    server ends the stream (its ``timeout_seconds``); an ERROR event raises ApiException, as kubernetes_asyncio's
    watch does. The connection is closed when the caller stops early."""
    resp = await list_fn(*args, watch=True, _preload_content=False, **params)
    try:
        if resp.status != 200:
            body = await resp.read()
            raise ApiException(status=resp.status, reason=body.decode(errors="replace")[:2000])
        while line := await resp.content.readline():
            ev = json.loads(line)
            if ev["type"] == "ERROR":  # the stream's end (410 Gone: the resourceVersion is too old), as typed
                st = ev["object"]
                raise ApiException(status=st.get("code"), reason=f"{st.get('reason')}: {st.get('message')}")
            yield ev
    finally:
        resp.close()  # a watch cut short can't go back to the pool mid-stream


async def forever(handle: Handle, list_fn: Any, *args: Any) -> None:
    """Every event of every object ``list_fn`` lists, ``handle(type, object)``d, until cancelled: each watch
    begins with the objects there are (ADDED) and is begun again when it ends or breaks."""
    while True:
        try:
            async with aclosing(events(list_fn, *args, timeout_seconds=300)) as stream:
                async for ev in stream:
                    await handle(ev["type"], ev["object"])
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log(f"watch broke ({e!r}); re-watching")
            await asyncio.sleep(0.5)


async def until(
    what: str, list_fn: Any, args: tuple[Any, ...], name: str, check: Check, timeout: float
) -> dict[str, Any]:
    """The object ``name`` once ``check`` holds for it, seen by a list and then a watch from that list's
    resourceVersion (nothing in between is missed); ``check`` may raise to end the wait (a failure)."""
    sel = f"metadata.name={name}"
    try:
        async with asyncio.timeout(timeout):
            listed = await call(list_fn, *args, field_selector=sel)
            for obj in listed.get("items") or []:
                if check(obj):
                    return dict(obj)
            rv = listed["metadata"]["resourceVersion"]
            while True:  # the stream ends at its own timeout: watch again from where it was
                stream = events(list_fn, *args, field_selector=sel, resource_version=rv, timeout_seconds=60)
                async with aclosing(stream):
                    async for ev in stream:
                        obj = ev["object"]
                        rv = obj["metadata"]["resourceVersion"]
                        if ev["type"] != "DELETED" and check(obj):
                            return dict(obj)
    except ApiException as e:
        raise RuntimeError(f"watching {what}: {e.status} {e.reason}") from e
    raise AssertionError("unreachable")
