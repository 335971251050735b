"""A STAND-IN for the Antigravity CLI, for ``hangar dev`` only: no Antigravity CLI can be installed here.

It does what a one-shot agent does, against the model the dev stack runs (the scripted model server, over the
Anthropic Messages API at ``$ANTHROPIC_BASE_URL``): it sends the message, runs each shell command the model
asks for in the current directory, sends back the output, and when the model stops asking prints its last
answer on stdout (which hangar's antigravity adapter takes as the turn's summary). The commands it runs go to
stderr.

    python3 -m antigravity_standin "MESSAGE"      # or the message on stdin

``hangar dev up`` puts this file in the ConfigMap ``hangar-dev-standins``, which the dev Environment mounts
into the sandbox. Standard library only, Python 3.8+: it runs on the sandbox image's python3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from typing import Any

MAX_STEPS = 20
COMMAND_TIMEOUT = 600
TOOL = {
    "name": "bash",
    "description": "Run a shell command in the working directory",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def ask(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One model call: the reply message (non-streaming)."""
    base = os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
    body = {"model": "antigravity-standin", "max_tokens": 4096, "messages": messages, "tools": [TOOL]}
    req = urllib.request.Request(
        base.rstrip("/") + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "anthropic-version": "2023-06-01",
            "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
        },
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        reply = json.load(r)
    if not isinstance(reply, dict):
        raise ValueError(f"the model answered {reply!r}")
    return reply


def run(command: str) -> tuple[str, bool]:
    """Runs ``command`` with the shell: its output (stdout and stderr) and whether it failed."""
    sys.stderr.write(f"$ {command}\n")
    sys.stderr.flush()
    try:
        p = subprocess.run(
            command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return f"(timed out after {COMMAND_TIMEOUT} s)", True
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        out += f"\n(exit status {p.returncode})"
    return out, p.returncode != 0


def main(argv: list[str]) -> int:
    message = " ".join(argv) if argv else sys.stdin.read()
    messages: list[dict[str, Any]] = [{"role": "user", "content": message}]
    for _ in range(MAX_STEPS):
        reply = ask(messages)
        content = [b for b in reply.get("content") or [] if isinstance(b, dict)]
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in content if b.get("type") == "tool_use"]
        if not calls:
            print("\n".join(str(b["text"]) for b in content if b.get("type") == "text" and b.get("text")))
            return 0
        results = []
        for call in calls:
            command = (call.get("input") or {}).get("command")
            if isinstance(command, str):
                out, failed = run(command)
            else:
                out, failed = f"unknown tool {call.get('name')!r}: only bash {{command}} is offered", True
            results.append(
                {"type": "tool_result", "tool_use_id": call.get("id"), "content": out, "is_error": failed}
            )
        messages.append({"role": "user", "content": results})
    sys.stderr.write(f"antigravity-standin: stopped after {MAX_STEPS} model calls\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
