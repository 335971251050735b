"""What points each harness's CLI at a scripted model server (``hangar.testing.model_server``), offline.

``hangar dev`` builds its ``default`` Environment from here (one Environment that serves every harness), and the
end-to-end tests take their harness variables from :func:`model_env`, so both run the CLIs the same way:

* Claude Code: ``ANTHROPIC_BASE_URL`` and a dummy ``ANTHROPIC_API_KEY`` (the CLI checks neither).
* Codex: ``OPENAI_BASE_URL`` (the driver writes it into a ``model_providers`` entry of config.toml) and a dummy
  ``OPENAI_API_KEY`` (the provider's ``env_key``: Codex refuses to start without it), and a model name.
* pi: its own provider in ``models.json``, which pi reads from ``PI_CODING_AGENT_DIR``. That file has to hold
  the server's URL, so it comes in a ConfigMap mounted into the sandbox (read-only: pi keeps its sessions in
  ``PI_CODING_AGENT_SESSION_DIR``, on the session's volume, so ``--session``/``--fork`` find them).
* Antigravity: no real CLI can be installed here, so the command is a DEV-ONLY STAND-IN,
  :mod:`hangar.devcluster.antigravity_standin`, shipped in the same ConfigMap.

Paths in the Environment are container paths: a cluster mounts them, the local pod runner maps them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .stack import environment_object

HARNESSES = ("claude", "codex", "pi", "antigravity")
CONFIG_MAP = "hangar-dev-scripted-model"
# Where the sandbox finds the ConfigMap's files, and the agent's HOME there (the operator's AGENT_HOME: the
# session's volume).
DEV_DIR = "/opt/hangar/dev"
AGENT_HOME = "/home/agent"
ANTHROPIC_KEY = "sk-ant-dev-not-a-real-key"
OPENAI_KEY = "sk-dev-not-a-real-key"
CODEX_MODEL = "scripted-model"
PI_PROVIDER = "scripted-model"
PI_MODEL = "scripted"
STANDIN_MODULE = "antigravity_standin"


def model_env(harness: str, base_url: str) -> dict[str, str]:
    """The variables that point ``harness``'s CLI at the scripted model server whose root URL is ``base_url``
    (pi also needs :func:`config_map` mounted: :func:`environment` does that)."""
    if harness == "codex":
        return {"OPENAI_BASE_URL": base_url + "/v1", "OPENAI_API_KEY": OPENAI_KEY}
    if harness == "pi":
        return {
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "PI_CODING_AGENT_DIR": DEV_DIR,
            "PI_CODING_AGENT_SESSION_DIR": f"{AGENT_HOME}/.pi/agent/sessions",
        }
    if harness == "antigravity":
        return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "PYTHONPATH": DEV_DIR}
    if harness == "claude":
        return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    raise ValueError(f"unknown harness {harness!r}: one of {', '.join(HARNESSES)}")


def harness_options(harness: str) -> dict[str, Any]:
    """The Environment's ``harnessOptions`` for ``harness`` (each adapter reads only its own keys)."""
    if harness == "codex":
        return {"model": CODEX_MODEL}
    if harness == "pi":
        return {"provider": PI_PROVIDER, "pi_args": ["--model", PI_MODEL]}
    if harness == "antigravity":
        return {"command": ["python3", "-m", STANDIN_MODULE]}
    return {}


def pi_models(base_url: str) -> dict[str, Any]:
    """pi's ``models.json``: one provider, the scripted model over the Anthropic Messages API."""
    return {
        "providers": {
            PI_PROVIDER: {
                "baseUrl": base_url,
                "api": "anthropic-messages",
                "apiKey": "ANTHROPIC_API_KEY",  # pi reads a value that names a variable from that variable
                "models": [
                    {
                        "id": PI_MODEL,
                        "name": "hangar dev's scripted model",
                        "reasoning": False,
                        "contextWindow": 200000,
                        "maxTokens": 8192,
                    }
                ],
            }
        }
    }


def config_map(base_url: str) -> dict[str, Any]:
    """The files the sandbox needs at ``DEV_DIR``: pi's models.json and the Antigravity stand-in."""
    standin = Path(__file__).with_name("antigravity_standin.py").read_text()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "labels": {"app.kubernetes.io/part-of": "hangar-dev"}},
        "data": {"models.json": json.dumps(pi_models(base_url), indent=2), f"{STANDIN_MODULE}.py": standin},
    }


def environment(name: str, base_url: str, harnesses: tuple[str, ...] = HARNESSES) -> dict[str, Any]:
    """An Environment in which each of ``harnesses`` runs against the scripted model at ``base_url``; with pi
    or antigravity it mounts :func:`config_map` (apply that too)."""
    env: dict[str, str] = {}
    options: dict[str, Any] = {}
    for harness in harnesses:
        env.update(model_env(harness, base_url))
        options.update(harness_options(harness))
    spec: dict[str, Any] = {"harnessOptions": options or None}
    if {"pi", "antigravity"} & set(harnesses):
        spec["podOverrides"] = {
            "volumes": [{"name": "scripted-model", "configMap": {"name": CONFIG_MAP}}],
            "containers": [
                {
                    "name": "sandbox",
                    "volumeMounts": [{"name": "scripted-model", "mountPath": DEV_DIR, "readOnly": True}],
                }
            ],
        }
    return environment_object(name, env, **spec)
