"""`capstan run`, `status`, `transcript` and `ls`: start runs and read them."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from capstan.cli.commands import Parsers
from capstan.cli.support import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    add_output_schema,
    spec_from_args,
)
from capstan.cli.support import client_for as _client
from capstan.cli.support import print_json as _print_json
from capstan.cli.thread import start_thread_run
from capstan.cli.waiting import announce_waits
from capstan.client.runs import CapstanClient
from capstan.client.transcript import build_transcript
from capstan.client.watch import format_step
from capstan.core.spec import FinishMode, RunResult, RunSpec, RunStatus, TerminalReason
from capstan.runtime.config import Settings
from capstan.runtime.embedded import running_ui

__all__ = ["register"]


def _ui_link(settings: Settings, run_id: str) -> str | None:
    """The run's page in the embedded server's Web UI, when that UI is up."""
    if not settings.embedded:
        return None
    ui = running_ui("127.0.0.1", settings.embedded_port)
    return f"{ui}/namespaces/{settings.namespace}/workflows/{run_id}" if ui else None


def _shown(client: CapstanClient, ended: RunResult | RunStatus) -> str:
    """The output as a person reads it: a typed result's JSON indented, else the text."""
    data = client.output_data(ended)
    return json.dumps(data, indent=2, ensure_ascii=False) if ended.output_format == "json" else data


def _as_json(client: CapstanClient, ended: RunResult) -> dict[str, object]:
    """`run --wait --json`: the result, its `output` as data (as `RunStatusView`'s)."""
    shown = ended.model_dump(mode="json")
    shown["output"] = client.output_data(ended)
    return shown


def _result_lines(result: RunResult, client: CapstanClient) -> list[str]:
    lines = [f"run {result.run_id}: {result.terminal_reason.value} after {result.steps} steps"]
    if result.output is not None:
        lines.append(f"output: {_shown(client, result)}")
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
        _print_json(_as_json(client, result))
    else:
        print("\n".join(_result_lines(result, client)))
    return EXIT_OK if result.terminal_reason is TerminalReason.COMPLETED else EXIT_RUN_NOT_COMPLETED


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    status = await client.status(args.run_id)
    if args.json:
        _print_json(client.status_view(status).model_dump(mode="json"))
        return EXIT_OK
    reason = status.terminal_reason.value if status.terminal_reason else "-"
    print(f"run {status.run_id}: phase {status.phase}, step {status.step}, terminal {reason}")
    if status.waiting_for:
        print(f"waiting for: {', '.join(status.waiting_for)}")
    if status.messages_waiting:
        print(f"messages waiting: {status.messages_waiting:,} (the model reads them in order)")
    if link := _ui_link(settings, args.run_id):
        print(f"web UI: {link}")
    if status.source == "history":
        print(
            f"(no worker answered: as of history event {status.as_of_event}; "
            f"start one with `capstan worker`)"
        )
    if status.output is not None:
        print(f"output: {_shown(client, status)}")
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


def register(parsers: Parsers) -> None:
    """Add `run`, `status`, `transcript` and `ls`."""
    p = parsers.add("run", cmd_run)
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
    add_output_schema(p)
    p.add_argument("--json", action="store_true")
    for name, fn in (("status", cmd_status), ("transcript", cmd_transcript)):
        p = parsers.add(name, fn)
        p.add_argument("run_id")
        p.add_argument("--json", action="store_true")
    p = parsers.add("ls", cmd_ls)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--reason",
        choices=[r.value for r in TerminalReason],
        default=None,
        help="only runs that ended with this terminal reason",
    )
    p.add_argument("--json", action="store_true")
