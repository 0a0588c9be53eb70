"""`capstan mcp`: durable runs as MCP tools (`capstan.api.mcp_server`), over stdio for the
user's own model client, or with `--http` over streamable HTTP with the API's tokens."""

from __future__ import annotations

import argparse
from pathlib import Path

from capstan.cli.commands import EXIT_OK, Parsers
from capstan.cli.support import client_for as _client
from capstan.runtime.config import Settings

__all__ = ["register"]


async def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    if args.http:
        from capstan.api.server import serve_mcp
        from capstan.runtime.api_settings import ApiSettings

        api = ApiSettings.from_env()
        chosen = {"host": args.host, "port": args.port, "tokens_file": args.tokens}
        api = api.model_copy(update={k: v for k, v in chosen.items() if v is not None})
        await serve_mcp(settings, api)
        return EXIT_OK
    from capstan.api.mcp_server import stdio_server

    client = await _client(settings)  # no server answering: one line, before stdio opens
    await stdio_server(client).run_stdio_async()
    return EXIT_OK


def register(parsers: Parsers) -> None:
    """Add `mcp`."""
    p = parsers.add("mcp", cmd_mcp)
    p.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at /mcp with the API's tokens (CAPSTAN_API_TOKEN or "
        "--tokens), instead of stdio; `capstan serve` answers at /mcp too",
    )
    p.add_argument("--host", default=None, help="with --http: address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="with --http: port (default: 8700)")
    p.add_argument("--tokens", type=Path, default=None, help="with --http: tokens file (TOML)")
