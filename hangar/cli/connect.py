"""`hangar connect`: an mcp-only token for an MCP client (an IDE), and the client configuration to paste.

It asks the api of the current context to mint the token (an admin's login token may), then prints the token
and a ready ``mcpServers`` entry for that api's ``/mcp``. The token works on ``/mcp`` only, can't release or
reject a job, and expires (``--days``); ``--list`` shows the minted tokens, ``--revoke ID`` ends one.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .context import load
from .http import call


def mcp_config(api_url: str, token: str) -> dict[str, Any]:
    """The ``mcpServers`` shape Claude Code (``.mcp.json``), Cursor and other MCP clients read."""
    return {
        "mcpServers": {
            "hangar": {
                "type": "http",
                "url": api_url.rstrip("/") + "/mcp",
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    }


def cmd_connect(a: argparse.Namespace) -> None:
    if a.list:
        for t in call("GET", "/api/tokens")["tokens"]:
            state = f"revoked {t['revoked_at']}" if t.get("revoked_at") else f"expires {t['expires_at']}"
            print(f"{t['id']}  {t['role']}  {t['subject']}  {state}  {t.get('name') or ''}".rstrip())
        return
    if a.revoke:
        t = call("DELETE", f"/api/tokens/{a.revoke}")
        print(f"{t['id']} revoked at {t['revoked_at']}: MCP clients using it are refused (401 revoked token)")
        return
    t = call("POST", "/api/tokens", json={"name": a.name or "", "expires_in_days": a.days})
    config = mcp_config(load().api_url, t["token"])
    if a.json:
        keys = ("id", "token", "subject", "expires_at")
        print(json.dumps({**{k: t[k] for k in keys}, **config}))
        return
    print(
        f"mcp-only token {t['id']} for {t['subject']} (expires {t['expires_at']}; "
        f"`hangar connect --revoke {t['id']}` ends it). It is shown once:"
    )
    print(f"  {t['token']}")
    print("MCP client configuration (e.g. .mcp.json for Claude Code; Cursor's mcp.json):")
    print(json.dumps(config, indent=2))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "connect",
        help="mint an mcp-only token for an MCP client (an IDE) and print its configuration",
        description="The token works on the api's /mcp only (the REST routes refuse it), can't release or "
        "reject a job, and expires. Minting needs an admin's login token.",
    )
    p.add_argument("--name", help="what it is for, e.g. 'carol laptop IDE'")
    p.add_argument("--days", type=int, default=30, help="days until it expires (1..365, default 30)")
    p.add_argument(
        "--json", action="store_true", help="print {id, token, subject, expires_at, mcpServers} as JSON"
    )
    p.add_argument("--list", action="store_true", help="list the minted tokens (never the tokens)")
    p.add_argument("--revoke", metavar="ID", help="revoke a minted token (tok-…)")
    p.set_defaults(func=cmd_connect)
