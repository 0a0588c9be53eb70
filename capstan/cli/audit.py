"""`capstan audit`, `capstan replay`, `capstan export-history`: what a run saw and did, later."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK, CliError
from capstan.cli.support import client_for as _client
from capstan.runtime.config import Settings

if TYPE_CHECKING:
    from temporalio.client import WorkflowHistory

# History reading, trail rendering and the replayer load in the command that uses them: every
# other command (and `capstan --help`) would pay for them at start otherwise.

__all__ = ["register", "replay_histories"]

EXIT_PROBLEMS = 1


async def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.audit.history import load_histories
    from capstan.audit.render import render_trail
    from capstan.audit.trail import build_trail, verify_chain
    from capstan.audit.tree import tree_entries

    if args.verify_file:
        records = [
            json.loads(line) for line in Path(args.verify_file).read_text().splitlines() if line
        ]
        problems = verify_chain(records)
        for p in problems:
            print(p)
        print(
            f"{len(records)} records; "
            + ("chain intact" if not problems else f"{len(problems)} problems")
        )
        return EXIT_OK if not problems else EXIT_PROBLEMS
    if not args.run_id:
        raise CliError("name a run (or --verify-file FILE)")
    client = await _client(settings)
    histories = await load_histories(client.client, args.run_id)
    if not histories:
        raise CliError(f"no run {args.run_id!r}")
    # a run's children (`delegate`) are audited with it, in the same hash chain
    records, issues = build_trail(await tree_entries(client.client, histories), client.content())
    if args.verify:
        problems = issues + verify_chain(records)
        for p in problems:
            print(p)
        print(
            f"{len(records)} records; "
            + ("verified" if not problems else f"{len(problems)} problems")
        )
        return EXIT_OK if not problems else EXIT_PROBLEMS
    text = render_trail(records, issues, args.format)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(
            f"wrote {len(records)} records to {args.out}"
            + (f" ({len(issues)} integrity issues)" if issues else "")
        )
    else:
        print(text, end="")
    return EXIT_OK if not issues else EXIT_PROBLEMS


async def replay_histories(histories: list[WorkflowHistory]) -> list[str]:
    """Replay each history against the current workflow code; the divergences, in words."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from capstan.workflows.agent import AgentWorkflow

    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    problems = []
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            problems.append(
                f"{history.workflow_id}: the current code does not reproduce this history: "
                f"{result.replay_failure}"
            )
    return problems


async def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.audit.history import load_histories

    if args.file:
        histories = _history_files(Path(args.file))
    elif args.run_id:
        client = await _client(settings)
        histories = await load_histories(client.client, args.run_id)
        if not histories:
            raise CliError(f"no run {args.run_id!r}")
    else:
        raise CliError("name a run or --file HISTORY.json")
    problems = await replay_histories(histories)
    for p in problems:
        print(p)
    if not problems:
        print(f"replayed {len(histories)} history file(s) against the current code: no divergence")
    return EXIT_OK if not problems else EXIT_PROBLEMS


def _history_files(path: Path) -> list[WorkflowHistory]:
    """One exported history, or every one in a directory `export-history` wrote for a run that
    continued as new (in the order of the chain: the file names number it)."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise CliError(f"{path} holds no history files (*.json)")
    elif path.is_file():
        files = [path]
    else:
        raise CliError(f"no history file or directory {path}")
    return [_history_file(f) for f in files]


def _history_file(path: Path) -> WorkflowHistory:
    """One exported history, checked before the replayer sees it: the SDK's replayer panics and
    never returns on a history that does not start with a run's start event."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import WorkflowHistory

    try:
        history = WorkflowHistory.from_json(path.stem, path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise CliError(f"{path} is not a Temporal history in JSON: {exc}") from None
    first = history.events[0] if history.events else None
    started = first.workflow_execution_started_event_attributes if first else None
    if first is None or first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise CliError(f"{path} is not a run's history: it does not begin with the run's start")
    if started is None or not started.original_execution_run_id:
        raise CliError(f"{path} is not a run's history: its start event names no run id")
    return history


async def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from capstan.audit.history import load_histories

    client = await _client(settings)
    histories = await load_histories(client.client, args.run_id)
    if not histories:
        raise CliError(f"no run {args.run_id!r}")
    out = Path(args.out or f"{args.run_id}.json")
    if len(histories) == 1:
        out.write_text(histories[0].to_json())
        print(f"wrote {out}")
        return EXIT_OK
    base = out if not out.suffix else out.with_suffix("")
    base.mkdir(parents=True, exist_ok=True)
    for i, h in enumerate(histories):
        (base / f"{args.run_id}.{i:03d}.json").write_text(h.to_json())
    print(f"wrote {len(histories)} histories (continue-as-new chain) to {base}/")
    return EXIT_OK


def register(parsers: Parsers) -> None:
    p = parsers.add("audit", cmd_audit)
    p.add_argument("run_id", nargs="?", default=None)
    p.add_argument("--format", choices=["jsonl", "md", "html"], default="jsonl")
    p.add_argument("--out", default=None)
    p.add_argument("--verify", action="store_true", help="check every blob and the hash chain")
    p.add_argument("--verify-file", default=None, help="check the hash chain of an exported trail")
    p = parsers.add("replay", cmd_replay)
    p.add_argument("run_id", nargs="?", default=None)
    p.add_argument(
        "--file", default=None, help="an exported history, or the directory of a chain's"
    )
    p = parsers.add("export-history", cmd_export)
    p.add_argument("run_id")
    p.add_argument("--out", default=None)
