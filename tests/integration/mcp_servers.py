"""MCP servers the MCP tests start over stdio: `python tests/integration/mcp_servers.py KIND DIR`.

- `testkit`: an SDK server (`MCPServer`) with a stateful counter (is a session per worker or per
  run?), an effect applied once per idempotency key (`record`, which can linger so a test can
  kill the worker mid-call), a process that exits mid-call, one that freezes its event loop, an
  image result and a tool error result.
- `garbage`: a hand-written stdio server that completes the handshake and lists a tool, then
  answers the call with a line that is not JSON-RPC (the SDK's own servers cannot: they keep
  stray prints off the protocol stream).

Never imported by Capstan; run by the tests as a subprocess of a worker.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
PNG = b"\x89PNG\r\n\x1a\n" + b"capstan test image"


def testkit(state: Path) -> MCPServer:
    server: MCPServer = MCPServer("testkit", log_level="WARNING")
    calls = {"count": 0}

    @server.tool(annotations=READ_ONLY)
    def count() -> str:
        """Count calls made to this server process."""
        calls["count"] += 1
        return f"pid {os.getpid()} count {calls['count']}"

    @server.tool(annotations=ADDITIVE)
    async def record(label: str, ctx: Context, linger: float = 0.0) -> str:
        """Record `label` once per idempotency key, then wait `linger` seconds."""
        meta: dict[str, Any] = dict(ctx.request_context.meta or {})
        key = str(meta.get("capstan/idempotency_key"))
        effects = state / "effects.jsonl"
        seen = (
            [json.loads(line) for line in effects.read_text().splitlines()]
            if effects.exists()
            else []
        )
        if any(e["key"] == key for e in seen):
            return f"already recorded {label} (key {key})"
        with effects.open("a") as fh:
            fh.write(
                json.dumps({"key": key, "label": label, "run": meta.get("capstan/run_id")}) + "\n"
            )
        await anyio.sleep(min(linger, 30.0))
        return f"recorded {label} (key {key})"

    @server.tool()
    def die() -> str:
        """Exit the server process in the middle of the call."""
        os._exit(3)

    @server.tool()
    async def freeze() -> str:
        """Block the server's event loop: it answers nothing any more."""
        time.sleep(3600)  # noqa: ASYNC251 - on purpose
        return "never"

    @server.tool(annotations=READ_ONLY)
    def picture() -> list[Any]:
        """Return a small PNG image and a caption."""
        data = base64.b64encode(PNG).decode()
        return ["a test picture", ImageContent(data=data, mime_type="image/png")]

    @server.tool(annotations=READ_ONLY)
    def refuse(reason: str) -> str:
        """Fail with `reason` (an error result, not a protocol error)."""
        raise ToolError(reason)

    return server


def garbage() -> None:
    """A legacy (initialize handshake) server written by hand: the call gets garbage back."""
    tool = {
        "name": "garble",
        "description": "Answers with garbage.",
        "inputSchema": {"type": "object"},
    }
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0"},
            }
        elif method == "tools/list":
            result = {"tools": [tool]}
        elif method == "tools/call":
            sys.stdout.write("<<this is not JSON-RPC>>\n")
            sys.stdout.flush()
            continue
        else:
            reply = {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "garbage":
        garbage()
    else:
        testkit(Path(sys.argv[2])).run()
