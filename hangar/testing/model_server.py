"""Scripted model API servers for driving the real coding-agent CLIs offline.

One :class:`ScriptedModel` serves both wire protocols the CLIs speak, on 127.0.0.1:

* Anthropic Messages: ``POST /v1/messages`` (Claude Code appends ``?beta=true``; pi's ``anthropic-messages``
  provider uses it too), SSE when ``"stream": true`` else one JSON message, and
  ``POST /v1/messages/count_tokens``.
* OpenAI Responses: ``POST /v1/responses`` (Codex), SSE.

Every model request consumes the next *step* of the script whose ``when`` matches it, and is recorded.

    from hangar.testing.model_server import ScriptedModel, Step

    model = ScriptedModel([
        Step(text="I will write the file.", command="echo hi > x.txt"),   # the first request: a shell tool call
        Step(when="tool_result", text="FINAL: done"),                     # the request carrying its result
    ])
    base_url = model.start()     # http://127.0.0.1:PORT
    # Claude Code: ANTHROPIC_BASE_URL=base_url; pi: models.json baseUrl=base_url;
    # Codex: [model_providers.x] base_url = model.openai_base_url (base_url + "/v1")
    ...
    req = model.wait_for_request(2, timeout=10)       # blocks until the 2nd model request has arrived
    assert req.tool_results and not model.unmatched
    assert model.requests[-1].contains("STEER")       # any string anywhere in the request body
    model.stop()

A :class:`Step` (or the same keys as a dict, e.g. in a ``--script`` JSON file):

* ``when``: ``None``/``"next"`` matches any request; ``"tool_result"`` a request that carries a tool result;
  ``"tool_result:XYZ"`` a tool result containing XYZ; any other string, a substring of the request's new user
  text (the user input after the last assistant output); or a callable ``Request -> bool`` (Python only).
* ``text``: the reply text. ``words``/``word_delay``: then stream ``words`` more words (``word1 word2 …``)
  ``word_delay`` seconds apart, so a test can steer or interrupt while text streams.
* ``command``: end the reply with a shell tool call, named after what the request offers: Claude Code
  ``Bash {command, description}``, pi ``bash {command}``, Codex ``exec_command {cmd, yield_time_ms}``, else
  ``shell_command {command}`` / ``shell {command: [...]}``.
* ``tool`` and ``tool_input``: end the reply with a call of that tool instead, e.g.
  ``Step(tool="WebSearch", tool_input={"query": "…"})`` (Anthropic: a ``tool_use`` block) or
  ``Step(tool="mcp__tracker__read_issue", tool_input={"number": 7})``; on the Responses API a
  ``function_call`` with that name and the input as its arguments (a tool of a namespace the request offers,
  such as Codex's ``mcp__<server>``, is called as ``{"namespace": "mcp__<server>", "name": "<tool>"}``).
* ``blocks``: raw Anthropic content blocks that open the reply, before its text (e.g. a server tool's
  ``server_tool_use`` and ``web_search_tool_result``); a block with an ``input`` streams it as
  ``input_json_delta``. ``items``: raw Responses API output items that open the reply (e.g. a
  ``web_search_call``). Each API ignores the other's.
* ``repeat``: the step is not consumed (for catch-all steps such as the demo's).
* ``delay``: seconds to wait before answering.

A request that no step matches gets the text ``(no scripted step matched)`` and lands in ``unmatched``.
Usage is reported on every response (input tokens ~ request size / 4, output tokens ~ words), so usage and
cost flow through the CLIs.

Command line (the dev demo): ``python -m hangar.testing.model_server [--anthropic|--openai] [--script FILE]
[--port N]`` prints ``listening on http://127.0.0.1:PORT`` and serves until stopped. Without ``--script`` it
runs :data:`DEMO_SCRIPT`: one harmless shell command, then an answer, for every turn; a message that asks to
"say hello" (the README's demo) gets a command that runs :data:`DEMO_STEER_SECONDS` seconds, so a person can
steer the turn while it runs, and a steer asking to "count them" gets one more command that counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any, NamedTuple

from .json_handler import JsonHandler

__all__ = ["DEMO_SCRIPT", "DEMO_STEER_SECONDS", "Request", "ScriptedModel", "Step", "load_script"]

NO_MATCH_TEXT = "(no scripted step matched)"
REDACTED_HEADERS = {"x-api-key", "authorization", "cookie"}


@dataclass
class Step:
    """One scripted model reply. See the module docstring."""

    when: str | Callable[[Request], bool] | None = None
    text: str = ""
    words: int = 0
    word_delay: float = 0.0
    command: str | None = None
    description: str = "Run a shell command"
    repeat: bool = False
    delay: float = 0.0
    name: str = ""
    tool: str | None = None
    tool_input: dict[str, Any] | None = None
    blocks: list[dict[str, Any]] | None = None
    items: list[dict[str, Any]] | None = None
    # Python only: after its words, the reply keeps streaming a word every ``word_delay`` until the test
    # sets ``gate``, and only then ends (with its tool call): a test decides the moment, not the clock.
    gate: threading.Event | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        known = {"when", "text", "words", "word_delay", "command", "description", "repeat", "delay", "name"}
        known |= {"tool", "tool_input", "blocks", "items"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown step keys: {sorted(unknown)}")
        return cls(**data)

    def matches(self, req: Request) -> bool:
        when = self.when
        if when is None or when == "" or when == "next":
            return True
        if callable(when):
            return bool(when(req))
        if when == "tool_result":
            return bool(req.tool_results)
        if when.startswith("tool_result:"):
            needle = when[len("tool_result:") :]
            return any(needle in t for t in req.tool_results)
        return when in req.user_text

    def reply_text(self) -> list[str]:
        """The text as chunks: the fixed text first, then one chunk per slow word."""
        chunks: list[str] = []
        if self.text:
            chunks.append(self.text)
        for i in range(self.words):
            chunks.append(("" if i == 0 and not self.text else " ") + f"word{i + 1}")
        return chunks


@dataclass
class Request:
    """One recorded model request."""

    index: int  # 1-based, in arrival order, over model requests only
    api: str  # "anthropic" | "openai"
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    user_text: str  # the new user input of this request (after the last assistant output)
    tool_results: list[str]  # tool results in that same tail
    tools: list[str]  # names of the tools offered
    stream: bool
    step: Step | None = None
    tool_name: str | None = None  # the tool this reply called, if any
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    disconnected: bool = False  # the client went away before the reply was complete

    @property
    def raw(self) -> str:
        return json.dumps(self.body)

    def strings(self) -> Iterator[str]:
        """Every string value in the body (message texts, tool results, system prompt, …)."""
        stack: list[Any] = [self.body]
        while stack:
            v = stack.pop()
            if isinstance(v, str):
                yield v
            elif isinstance(v, dict):
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)

    def contains(self, needle: str) -> bool:
        return any(needle in s for s in self.strings())

    @property
    def messages(self) -> list[Any]:
        """The conversation sent: Anthropic ``messages`` or Responses ``input`` items."""
        m = self.body.get("messages") if self.api == "anthropic" else self.body.get("input")
        return m if isinstance(m, list) else []


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict) and isinstance(b.get("text"), str):
                parts.append(b["text"])
        return "\n".join(parts)
    return ""


def _anthropic_tail(body: dict[str, Any]) -> tuple[str, list[str]]:
    msgs = body.get("messages") or []
    texts: list[str] = []
    results: list[str] = []
    tail = []
    for m in reversed(msgs):
        if isinstance(m, dict) and m.get("role") == "system":
            continue  # Claude Code (permission prompts on) puts its environment notes after the user's message
        if not isinstance(m, dict) or m.get("role") != "user":
            break
        tail.append(m)
    for m in reversed(tail):
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for b in content or []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text":
                texts.append(str(b.get("text", "")))
            elif b.get("type") == "tool_result":
                results.append(_block_text(b.get("content")))
    return "\n".join(texts), results


def _openai_tail(body: dict[str, Any]) -> tuple[str, list[str]]:
    items = body.get("input")
    if isinstance(items, str):
        return items, []
    texts: list[str] = []
    results: list[str] = []
    tail = []
    for it in reversed(items or []):
        if not isinstance(it, dict):
            continue
        kind = it.get("type", "message")
        if kind == "function_call_output" or kind == "custom_tool_call_output":
            tail.append(it)
        elif kind == "message" and it.get("role") in ("user", "developer", "system"):
            tail.append(it)
        else:
            break  # an assistant message, a function call, reasoning: the model's own output
    for it in reversed(tail):
        if it.get("type", "message") == "message":
            if it.get("role") == "user":
                texts.append(_block_text(it.get("content")))
        else:
            out = it.get("output")
            results.append(out if isinstance(out, str) else _block_text(out))
    return "\n".join(texts), results


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            n = t.get("name") or (t.get("function") or {}).get("name")
            if isinstance(n, str):
                names.append(n)
    return names


def _anthropic_tool(tools: list[str], command: str, description: str) -> tuple[str, dict[str, Any]]:
    if "Bash" in tools:
        return "Bash", {"command": command, "description": description}
    if "bash" in tools:
        return "bash", {"command": command}
    return "Bash", {"command": command, "description": description}


def _openai_namespace(body: dict[str, Any], name: str) -> tuple[str, str] | None:
    """(namespace, function) when ``name`` is ``<namespace>__<function>`` of a namespace tool the request
    offers (Codex: ``mcp__<server>`` holding the server's tools), else None."""
    for t in body.get("tools") or []:
        if not isinstance(t, dict) or t.get("type") != "namespace" or not isinstance(t.get("name"), str):
            continue
        prefix = t["name"] + "__"
        inner = {f.get("name") for f in t.get("tools") or [] if isinstance(f, dict)}
        if name.startswith(prefix) and name[len(prefix) :] in inner:
            return t["name"], name[len(prefix) :]
    return None


def _openai_tool(tools: list[str], command: str) -> tuple[str, dict[str, Any]]:
    if "exec_command" in tools:
        return "exec_command", {"cmd": command, "yield_time_ms": 20000}
    if "shell_command" in tools:
        return "shell_command", {"command": command}
    if "shell" in tools:
        return "shell", {"command": ["bash", "-lc", command]}
    return "exec_command", {"cmd": command, "yield_time_ms": 20000}


class _ClientGone(Exception):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    model: ScriptedModel


def _json_delta(obj: Any) -> dict[str, Any]:
    return {"type": "input_json_delta", "partial_json": json.dumps(obj)}


class _Answer(NamedTuple):
    step: Step
    n: int  # numbers the ids in the answer
    model: str
    chunks: list[str]
    tool: tuple[str, dict[str, Any]] | None
    in_tokens: int
    out_tokens: int


class _Handler(JsonHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            raise _ClientGone() from e

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())

    def _end_sse(self) -> None:
        self._chunk(b"")

    def _gated(self, step: Step, chunks: list[str]) -> Iterator[str]:
        """The step's chunks, then while its ``gate`` is not set, one more word at a time."""
        yield from chunks
        n = step.words
        while step.gate is not None and not step.gate.is_set():
            n += 1
            yield f" word{n}"
            if not chunks and step.word_delay <= 0:
                self._sleep(0.1)  # the loop's own pace when the step streams no words of its own

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self.server.model._stopping.wait(seconds):
            raise _ClientGone()

    def _read_body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        return body if isinstance(body, dict) else {}

    # -- routes ------------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/healthz", "/"):
            self.send_json(200, {"ok": True})
        elif path in ("/v1/models", "/models"):
            self.send_json(200, {"data": [], "object": "list"})
        else:
            self.send_json(404, {"error": {"type": "not_found", "message": path}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._read_body()
        model = self.server.model
        if path.endswith("/messages/count_tokens"):
            model._record_other(path, body)
            self.send_json(200, {"input_tokens": 42})
            return
        if path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/responses"):
            api = "openai"
        else:
            model._record_other(path, body)
            self.send_json(404, {"error": {"type": "not_found", "message": path}})
            return
        headers = {k: ("<redacted>" if k.lower() in REDACTED_HEADERS else v) for k, v in self.headers.items()}
        req = model._record(api, self.path, headers, body)
        try:
            if req.step is not None and req.step.delay:
                self._sleep(req.step.delay)
            if api == "anthropic":
                self._anthropic(req)
            else:
                self._openai(req)
        except _ClientGone:
            req.disconnected = True
            self.close_connection = True
        finally:
            req.finished.set()

    # -- Anthropic Messages ------------------------------------------------------------------------------------

    def _answer(
        self, req: Request, default_model: str, shell: Callable[[str, str], tuple[str, dict[str, Any]]]
    ) -> _Answer:
        """What the request is answered, whichever API speaks it: the step's text and tool call (a command
        becomes a call of the request's shell tool, ``shell(command, description)``), and the tokens."""
        step = req.step or Step(text=NO_MATCH_TEXT)
        chunks = step.reply_text()
        tool: tuple[str, dict[str, Any]] | None = None
        if step.tool is not None:
            tool = (step.tool, dict(step.tool_input or {}))
        elif step.command is not None:
            tool = shell(step.command, step.description)
        if tool is not None:
            req.tool_name = tool[0]
        return _Answer(
            step=step,
            n=self.server.model._next_id(),
            model=str(req.body.get("model") or default_model),
            chunks=chunks,
            tool=tool,
            in_tokens=max(1, len(req.raw) // 4),
            out_tokens=5 + sum(len(c.split()) for c in chunks) + (20 if tool else 0),
        )

    def _anthropic(self, req: Request) -> None:
        step, n, model_name, chunks, tool, in_tokens, out_tokens = self._answer(
            req,
            "claude-sonnet-4-5",
            lambda command, description: _anthropic_tool(req.tools, command, description),
        )
        msg_id = f"msg_scripted_{n}"
        usage0 = {
            "input_tokens": in_tokens,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        stop_reason = "tool_use" if tool else "end_turn"
        tool_id = f"toolu_scripted_{n}"
        if not req.stream:
            content: list[dict[str, Any]] = [dict(b) for b in step.blocks or []]
            if chunks:
                content.append({"type": "text", "text": "".join(chunks)})
            if tool:
                content.append({"type": "tool_use", "id": tool_id, "name": tool[0], "input": tool[1]})
            usage = dict(usage0, output_tokens=out_tokens)
            self.send_json(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model_name,
                    "content": content,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return
        self._start_sse()
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model_name,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage0,
                },
            },
        )
        index = 0
        for block in step.blocks or []:
            start = dict(block)
            deltas = []
            if "input" in start:  # streamed as JSON, as the real API does
                start["input"] = {}
                deltas.append(_json_delta(block["input"]))
            self._block(index, start, deltas)
            index += 1
        if chunks:

            def words() -> Iterator[dict[str, Any]]:
                for i, c in enumerate(self._gated(step, chunks)):
                    if i > 0 or not step.text:  # a slow word (the fixed text goes at once)
                        self._sleep(step.word_delay)
                    yield {"type": "text_delta", "text": c}

            self._block(index, {"type": "text", "text": ""}, words())
            index += 1
        if tool:
            block = {"type": "tool_use", "id": tool_id, "name": tool[0], "input": {}}
            self._block(index, block, [_json_delta(tool[1])])
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": out_tokens},
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self._end_sse()

    def _block(self, index: int, block: dict[str, Any], deltas: Iterable[dict[str, Any]]) -> None:
        """One streamed content block: its start, its deltas, its stop."""
        self._event(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        )
        for delta in deltas:
            self._event(
                "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            )
        self._event("content_block_stop", {"type": "content_block_stop", "index": index})

    # -- OpenAI Responses --------------------------------------------------------------------------------------

    def _openai(self, req: Request) -> None:
        step, n, model_name, chunks, tool, in_tokens, out_tokens = self._answer(
            req, "fake-model", lambda command, _description: _openai_tool(req.tools, command)
        )
        resp_id = f"resp_scripted_{n}"
        usage = {
            "input_tokens": in_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": in_tokens + out_tokens,
        }
        output: list[dict[str, Any]] = [dict(it) for it in step.items or []]
        msg_item = {
            "id": f"msg_scripted_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "".join(chunks), "annotations": []}],
        }
        args = json.dumps(tool[1]) if tool else ""
        fc_item = {
            "id": f"fc_scripted_{n}",
            "type": "function_call",
            "status": "completed",
            "call_id": f"call_scripted_{n}",
            "name": tool[0] if tool else "",
            "arguments": args,
        }
        namespace = _openai_namespace(req.body, tool[0]) if tool else None
        if namespace is not None:
            # Codex offers an MCP server's tools as a namespace (``mcp__<server>``): the call names both.
            fc_item["namespace"], fc_item["name"] = namespace
        if chunks:
            output.append(msg_item)
        if tool:
            output.append(fc_item)
        base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model_name}
        if not req.stream:
            self.send_json(200, dict(base, status="completed", output=output, usage=usage))
            return
        seq = itertools.count()

        def ev(name: str, payload: dict[str, Any]) -> None:
            self._event(name, dict({"type": name, "sequence_number": next(seq)}, **payload))

        self._start_sse()
        ev("response.created", {"response": dict(base, status="in_progress", output=[])})
        ev("response.in_progress", {"response": dict(base, status="in_progress", output=[])})
        out_index = 0
        for item in step.items or []:
            ev(
                "response.output_item.added",
                {"output_index": out_index, "item": dict(item, status="in_progress")},
            )
            ev("response.output_item.done", {"output_index": out_index, "item": item})
            out_index += 1
        if chunks:
            item_id = msg_item["id"]
            ev(
                "response.output_item.added",
                {"output_index": out_index, "item": dict(msg_item, status="in_progress", content=[])},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            ev(
                "response.content_part.added",
                {"item_id": item_id, "output_index": out_index, "content_index": 0, "part": part},
            )
            sent: list[str] = []
            for i, c in enumerate(self._gated(step, chunks)):
                if i > 0 or not step.text:
                    self._sleep(step.word_delay)
                sent.append(c)
                ev(
                    "response.output_text.delta",
                    {"item_id": item_id, "output_index": out_index, "content_index": 0, "delta": c},
                )
            full = "".join(sent)
            msg_item["content"] = [{"type": "output_text", "text": full, "annotations": []}]
            ev(
                "response.output_text.done",
                {"item_id": item_id, "output_index": out_index, "content_index": 0, "text": full},
            )
            ev(
                "response.content_part.done",
                {
                    "item_id": item_id,
                    "output_index": out_index,
                    "content_index": 0,
                    "part": dict(part, text=full),
                },
            )
            ev("response.output_item.done", {"output_index": out_index, "item": msg_item})
            out_index += 1
        if tool:
            ev(
                "response.output_item.added",
                {"output_index": out_index, "item": dict(fc_item, status="in_progress", arguments="")},
            )
            ev(
                "response.function_call_arguments.delta",
                {"item_id": fc_item["id"], "output_index": out_index, "delta": args},
            )
            ev(
                "response.function_call_arguments.done",
                {"item_id": fc_item["id"], "output_index": out_index, "arguments": args},
            )
            ev("response.output_item.done", {"output_index": out_index, "item": fc_item})
        ev("response.completed", {"response": dict(base, status="completed", output=output, usage=usage)})
        self._end_sse()


class ScriptedModel:
    """A scripted Anthropic Messages + OpenAI Responses server on 127.0.0.1. See the module docstring."""

    def __init__(
        self, steps: Sequence[Step | dict[str, Any]] | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.host = host
        self.port = port
        self._steps: list[Step] = []
        self._requests: list[Request] = []
        self._other: list[tuple[str, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.add(*(steps or []))

    # -- script ------------------------------------------------------------------------------------------------

    def add(self, *steps: Step | dict[str, Any]) -> None:
        """Append steps to the script (also while serving)."""
        with self._cond:
            for s in steps:
                self._steps.append(s if isinstance(s, Step) else Step.from_dict(s))

    @property
    def remaining(self) -> list[Step]:
        with self._cond:
            return list(self._steps)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving in a background thread; returns the base URL (``http://127.0.0.1:PORT``)."""
        if self._server is not None:
            return self.base_url
        server = _Server((self.host, self.port), _Handler)
        server.model = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="scripted-model", daemon=True
        )
        self._thread.start()
        return self.base_url

    def serve_forever(self) -> None:
        """Serve in the calling thread (the command line)."""
        self.start()
        assert self._thread is not None
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        self._stopping.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> ScriptedModel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    # -- recording ---------------------------------------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        """The model requests so far (Messages and Responses; count_tokens etc. are in ``other_requests``)."""
        with self._cond:
            return list(self._requests)

    @property
    def other_requests(self) -> list[tuple[str, dict[str, Any]]]:
        with self._cond:
            return list(self._other)

    @property
    def unmatched(self) -> list[Request]:
        return [r for r in self.requests if r.step is None]

    def wait_for_request(self, n: int, timeout: float = 10.0) -> Request:
        """Block until at least ``n`` model requests have arrived; return the n-th (1-based)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"{len(self._requests)} model requests after {timeout}s, waited for {n}")
            return self._requests[n - 1]

    def wait_for(self, predicate: Callable[[Request], bool], timeout: float = 10.0) -> Request:
        """Block until a recorded request satisfies ``predicate``; return the first one that does."""
        found: list[Request] = []

        def check() -> bool:
            for r in self._requests:
                if predicate(r):
                    found.append(r)
                    return True
            return False

        with self._cond:
            if not self._cond.wait_for(check, timeout):
                raise TimeoutError(f"no matching request among {len(self._requests)} after {timeout}s")
        return found[0]

    def _next_id(self) -> int:
        return next(self._ids)

    def _record_other(self, path: str, body: dict[str, Any]) -> None:
        with self._cond:
            self._other.append((path, body))

    def _record(self, api: str, path: str, headers: dict[str, str], body: dict[str, Any]) -> Request:
        if api == "anthropic":
            user_text, results = _anthropic_tail(body)
        else:
            user_text, results = _openai_tail(body)
        with self._cond:
            req = Request(
                index=len(self._requests) + 1,
                api=api,
                path=path,
                headers=headers,
                body=body,
                user_text=user_text,
                tool_results=results,
                tools=_tool_names(body),
                stream=bool(body.get("stream")),
            )
            for i, step in enumerate(self._steps):
                if step.matches(req):
                    req.step = step
                    if not step.repeat:
                        del self._steps[i]
                    break
            self._requests.append(req)
            self._cond.notify_all()
        return req


# How long the demo's first command runs: a person has that long to steer the turn (``hangar dev``'s README
# demo). Only a message asking to "say hello" gets the slow command, so forks, jobs and the other harnesses'
# turns stay quick.
DEMO_STEER_SECONDS = 20

# A steer ("also count them") arrives with the slow command's result: answer it with one more command.
_DEMO_STEERED = Step(
    when="count them",
    text="You also asked me to count them.",
    command='echo "entries here: $(ls -A | wc -l)"',
    description="Count the entries in the working directory",
    repeat=True,
    name="demo-steered",
)

DEMO_SCRIPT: list[Step] = [
    _DEMO_STEERED,
    dataclasses.replace(_DEMO_STEERED, when="tool_result:count them", name="demo-steered-in-result"),
    Step(
        when="tool_result:entries here:",
        text="I counted them too: the number of entries is in the command's output above. This was a scripted "
        "demo turn, and your steer reached it while the first command ran.",
        repeat=True,
        name="demo-counted",
    ),
    Step(
        when="tool_result",
        text="The command ran and printed the working directory. This was a scripted demo turn: "
        "hangar started the agent, it ran a shell command, and it answered.",
        repeat=True,
        name="demo-answer",
    ),
    # `hangar dev up --tower`'s governance demo: a call the deny-risky rules flag, so Tower decides it.
    Step(
        when="force-push",
        text="Force-pushing the branch, as asked.",
        command="git push --force origin main || echo 'no remote here: nothing was pushed'",
        description="Force-push the branch",
        repeat=True,
        name="demo-force-push",
    ),
    Step(
        when="say hello",
        text="Hello! Let me have a look at the working directory first.",
        command="echo 'hello from hangar' && pwd && ls -a && "
        f"echo 'now {DEMO_STEER_SECONDS} s of nothing: time to steer this turn' && "
        f"python3 -c 'import time; time.sleep({DEMO_STEER_SECONDS})'",
        description=f"Show the working directory, then wait {DEMO_STEER_SECONDS} s (the dev demo's time to steer)",
        repeat=True,
        name="demo-slow-command",
    ),
    Step(
        text="Let me have a look at the working directory first.",
        command="echo 'hello from hangar' && pwd && ls -a",
        description="Show the working directory",
        repeat=True,
        name="demo-command",
    ),
]


def load_script(path: str) -> list[Step]:
    """Read a JSON script: a list of step objects, or ``{"steps": [...]}``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = data.get("steps", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of steps")
    return [Step.from_dict(d) for d in data]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m hangar.testing.model_server", description="Scripted model API server (loopback)."
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--anthropic", action="store_true", help="print the Anthropic base URL (default)")
    g.add_argument("--openai", action="store_true", help="print the OpenAI Responses base URL (…/v1)")
    p.add_argument("--script", help="JSON file with the steps (default: the demo script)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    args = p.parse_args(argv)
    steps = load_script(args.script) if args.script else DEMO_SCRIPT
    model = ScriptedModel(steps, port=args.port)
    model.start()
    url = model.openai_base_url if args.openai else model.anthropic_base_url
    print(f"listening on {url}", flush=True)

    def on_signal(signum: int, frame: object) -> None:
        threading.Thread(target=model.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    model.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
