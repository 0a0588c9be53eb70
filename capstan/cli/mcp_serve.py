"""`capstan mcp`: durable runs as MCP tools over stdio (`capstan.api.mcp_server`)."""

from __future__ import annotations

import argparse

from capstan.cli.commands import EXIT_OK, Parsers
from capstan.cli.support import client_for as _client
from capstan.runtime.config import Settings

__all__ = ["register"]


async def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.api.mcp_server import stdio_server

    client = await _client(settings)  # no server answering: one line, before stdio opens
    await stdio_server(client).run_stdio_async()
    return EXIT_OK


def register(parsers: Parsers) -> None:
    """Add `mcp`."""
    parsers.add("mcp", cmd_mcp)
