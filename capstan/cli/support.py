"""What every `capstan` command shares: exit codes, one-line errors, JSON output, connecting."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from capstan.audit.display import duration
from capstan.cli.commands import EXIT_ERROR, EXIT_OK, EXIT_RUN_NOT_COMPLETED, Command
from capstan.client.agents import load_spec, read_output_schema, resolve_agent
from capstan.client.runs import CapstanClient
from capstan.core.errors import CapstanError
from capstan.core.spec import RunSpec
from capstan.runtime.config import ConfigError, Settings
from capstan.runtime.temporal_connection import TemporalConnectError

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_RUN_NOT_COMPLETED",
    "CliError",
    "Command",
    "add_output_schema",
    "client_for",
    "expires_in",
    "print_json",
    "spec_from_args",
]

CONNECT_TIMEOUT = 10.0


class CliError(CapstanError):
    """A failure worth one clear line."""


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


async def client_for(settings: Settings) -> CapstanClient:
    """A connected client, or a `CliError` line saying what is wrong and what to change."""
    hint = (
        "start one with `capstan server` (or `capstan worker`)"
        if settings.embedded
        else "check TEMPORAL_ADDRESS (or the address of the temporal.toml profile)"
    )
    try:
        return await asyncio.wait_for(CapstanClient.connect(settings), CONNECT_TIMEOUT)
    except ConfigError as exc:
        raise CliError(str(exc)) from exc
    except TemporalConnectError as exc:
        raise CliError(f"{exc}: {hint}" if exc.unreachable else str(exc)) from exc
    except TimeoutError as exc:
        raise CliError(
            f"no Temporal server answers at {settings.address} within {CONNECT_TIMEOUT:.0f}s: "
            + hint
        ) from exc


def expires_in(at: datetime, now: datetime | None = None) -> str:
    """`expires in 23 h 59 m`, or `expired 5 m ago` (naive times are UTC, as runs record)."""
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    left = (at - (now or datetime.now(UTC))).total_seconds()
    return f"expires in {duration(left)}" if left >= 0 else f"expired {duration(-left)} ago"


def add_output_schema(p: argparse.ArgumentParser) -> None:
    """`--output-schema FILE`, `--priority N` and `--fairness-key KEY`, for the commands that
    start runs (`run`, `schedule create`)."""
    p.add_argument(
        "--output-schema",
        default=None,
        metavar="FILE",
        help="a JSON Schema the answer must match (the run returns it as JSON)",
    )
    p.add_argument(
        "--priority",
        type=int,
        choices=range(1, 6),
        default=None,
        metavar="1-5",
        help="1 is served first, 5 last (default: the server's, 3)",
    )
    p.add_argument(
        "--fairness-key",
        default=None,
        metavar="KEY",
        help="runs sharing a key share the workers in turn with other keys",
    )


def spec_from_args(
    args: argparse.Namespace, settings: Settings, command: str, **fields: Any
) -> RunSpec:
    """The spec `command` (`run`, `schedule create`) starts: a spec file (`--spec`), an agent
    definition (`--agent`), or flags; flags given on the command line (and `fields`, the
    command's own, when not None) override the file's or the definition's fields."""
    given = {
        "model": args.model,
        "max_steps": args.max_steps,
        "system_prompt": args.system,
        "auto_approve": args.auto_approve or None,
        "allowed_tools": tuple(args.tools.split(",")) if args.tools else None,
        "output_schema": read_output_schema(Path(args.output_schema))
        if args.output_schema
        else None,
        "priority": args.priority,
        "fairness_key": args.fairness_key,
        **fields,
    }
    overrides = {k: v for k, v in given.items() if v is not None}
    if args.task is not None:
        overrides["task"] = args.task
    if args.spec:
        return load_spec(Path(args.spec), **overrides)
    if args.task is None:
        raise CliError(f"{command}: give a task (or --spec FILE with one)")
    if args.agent:
        if settings.agents_file is None:
            raise CliError(f"{command} --agent: set CAPSTAN_AGENTS to the agents file (TOML)")
        task = overrides.pop("task")
        return resolve_agent(settings.agents_file, args.agent, task, **overrides)
    try:
        return RunSpec.model_validate(overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CliError(f"{command}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
