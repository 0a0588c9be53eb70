"""`capstan codec-server`: decrypt payloads for the Temporal Web UI (see
`capstan.runtime.codec_server`). Needs the same codec keys as the workers."""

from __future__ import annotations

import argparse
import asyncio

from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK
from capstan.runtime.blobs import keyring_for
from capstan.runtime.codec_server import DEFAULT_UI_ORIGINS, CodecServer
from capstan.runtime.config import ConfigError, Settings

__all__ = ["register"]


async def cmd_codec_server(args: argparse.Namespace, settings: Settings) -> int:
    keyring = keyring_for(settings)
    if keyring is None:
        raise ConfigError("codec-server: set CAPSTAN_CODEC_KEYS or CAPSTAN_CODEC_KEY_FILE")
    server = CodecServer(
        keyring,
        host=args.host,
        port=args.port,
        origins=args.ui_origin or DEFAULT_UI_ORIGINS,
        token=settings.codec_server_token,
    )
    print(f"codec server at {server.url} (keys: {', '.join(keyring.ids)})", flush=True)
    try:
        await asyncio.to_thread(server.serve_forever)
    finally:
        server.stop()
    return EXIT_OK


def register(parsers: Parsers) -> None:
    p = parsers.add("codec-server", cmd_codec_server)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8081)
    p.add_argument(
        "--ui-origin",
        action="append",
        default=None,
        help=f"a Web UI origin allowed to call it (repeatable; default {DEFAULT_UI_ORIGINS[0]})",
    )
