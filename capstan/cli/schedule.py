"""`capstan schedule create|ls|describe|pause|unpause|trigger|delete` (Temporal Schedules).

The run a schedule starts is given as `run` gives it: an agent definition (`--agent`), a whole
spec (`--spec`), or a task with flags. The logic is in `capstan.client.schedules`.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from pydantic import ValidationError

from capstan.audit.display import duration
from capstan.cli.commands import Parsers
from capstan.cli.intermixed import IntermixedParser
from capstan.cli.support import (
    EXIT_OK,
    CliError,
    add_output_schema,
    print_json,
    spec_from_args,
)
from capstan.cli.support import client_for as _client
from capstan.client.schedules import OVERLAP, Schedules, ScheduleSummary, When, parse_duration
from capstan.core.spec import RunSpec
from capstan.runtime.config import Settings

__all__ = ["register"]


def _spec(args: argparse.Namespace, settings: Settings) -> RunSpec:
    return spec_from_args(args, settings, "schedule create")


def _duration(text: str | None) -> timedelta | None:
    return parse_duration(text) if text is not None else None


def _when(args: argparse.Namespace) -> When:
    try:
        return When(
            cron=args.cron,
            every=_duration(args.every),
            overlap=args.overlap,
            catchup=_duration(args.catchup),
            jitter=_duration(args.jitter),
            time_zone=args.tz,
            paused=args.paused,
            note=args.note,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise CliError(f"schedule create: {where + ': ' if where else ''}{first['msg']}") from None


async def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    when = _when(args)
    spec = _spec(args, settings)
    client = await _client(settings)
    await Schedules(client).create(args.name, spec, when)
    print(f"schedule {args.name} created; its runs are schedule-{args.name}-<time>")
    if not await client.workers_polling():
        print(
            f"capstan: no worker is polling task queue {settings.task_queue!r}; scheduled runs "
            "are stored and start when one does (`capstan worker`)",
            file=sys.stderr,
        )
    return EXIT_OK


def _lines(s: ScheduleSummary) -> list[str]:
    state = "paused" if s.paused else "active"
    lines = [f"schedule {s.name}: {state}, {s.timing}, overlap {s.overlap}"]
    what = f"agent {s.agent}: " if s.agent else ""
    lines.append(f"runs: {what}{s.task!r}")
    extras = [
        f"catch-up window {duration(s.catchup_seconds)}" if s.catchup_seconds else "",
        f"jitter {duration(s.jitter_seconds)}" if s.jitter_seconds else "",
        f"time zone {s.time_zone}" if s.time_zone else "",
        f"note: {s.note}" if s.note else "",
    ]
    if any(extras):
        lines.append(", ".join(e for e in extras if e))
    lines.append(
        f"started {s.runs_started}, skipped (overlap) {s.skipped_overlap}, "
        f"missed (catch-up) {s.missed_catchup}, running {len(s.running)}"
    )
    lines.append("next runs: " + (", ".join(s.next_runs[:3]) or "none"))
    lines.append("recent runs:" if s.recent else "recent runs: none")
    for r in s.recent:
        lines.append(f"  {r.run_id}  {r.terminal_reason or r.status}  scheduled {r.scheduled_at}")
    return lines


async def cmd_describe(args: argparse.Namespace, settings: Settings) -> int:
    summary = await Schedules(await _client(settings)).describe(args.name)
    if args.json:
        print_json(summary.model_dump(mode="json"))
    else:
        print("\n".join(_lines(summary)))
    return EXIT_OK


async def cmd_ls(args: argparse.Namespace, settings: Settings) -> int:
    rows = await Schedules(await _client(settings)).list_schedules()
    if args.json:
        print_json([r.model_dump(mode="json") for r in rows])
        return EXIT_OK
    for r in rows:
        upcoming = r.next_runs[0] if r.next_runs else "-"
        print(f"{r.name}\t{'paused' if r.paused else 'active'}\t{r.timing}\tnext {upcoming}")
    return EXIT_OK


async def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    await Schedules(await _client(settings)).pause(args.name, args.note)
    print(f"schedule {args.name} paused")
    return EXIT_OK


async def cmd_unpause(args: argparse.Namespace, settings: Settings) -> int:
    await Schedules(await _client(settings)).unpause(args.name, args.note)
    print(f"schedule {args.name} unpaused")
    return EXIT_OK


async def cmd_trigger(args: argparse.Namespace, settings: Settings) -> int:
    await Schedules(await _client(settings)).trigger(args.name, args.overlap)
    print(f"schedule {args.name} triggered (overlap policy {args.overlap or 'of the schedule'})")
    return EXIT_OK


async def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    await Schedules(await _client(settings)).delete(args.name)
    print(f"schedule {args.name} deleted (runs it started go on)")
    return EXIT_OK


def _add_create(actions: argparse._SubParsersAction[IntermixedParser]) -> None:
    q = actions.add_parser("create", help="start runs on a cron or an interval")
    q.add_argument("name")
    q.add_argument("task", nargs="?", default=None)
    timing = q.add_mutually_exclusive_group(required=True)
    timing.add_argument("--cron", default=None, help='e.g. "0 2 * * *" (02:00 every day)')
    timing.add_argument("--every", default=None, help="an interval: 90s, 15m, 1h, 1h30m, 2d")
    q.add_argument("--agent", default=None, help="an agent defined in CAPSTAN_AGENTS")
    q.add_argument("--spec", default=None, metavar="FILE", help="a whole RunSpec (TOML or JSON)")
    q.add_argument("--model", default=None)
    q.add_argument("--max-steps", type=int, default=None)
    q.add_argument("--system", default=None, help="system prompt")
    q.add_argument("--auto-approve", action="store_true", help="run `ask` tools unattended")
    q.add_argument("--tools", default=None, help="comma-separated tools to offer")
    add_output_schema(q)
    q.add_argument("--overlap", choices=list(OVERLAP), default="skip", help="default skip")
    q.add_argument("--catchup", default=None, help="run missed times up to this late (1h)")
    q.add_argument("--jitter", default=None, help="delay each run by up to this (5m)")
    q.add_argument("--tz", default=None, help="IANA time zone of --cron (default UTC)")
    q.add_argument("--paused", action="store_true", help="create it paused (trigger still works)")
    q.add_argument("--note", default="")
    q.set_defaults(fn=cmd_create)


def register(parsers: Parsers) -> None:
    """Add `capstan schedule ...`."""
    p = parsers.add("schedule", cmd_ls)
    actions = p.add_subparsers(dest="schedule_action", required=True, parser_class=IntermixedParser)
    _add_create(actions)
    q = actions.add_parser("ls", help="schedules that start Capstan runs")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_ls)
    q = actions.add_parser("describe", help="next runs, recent runs and how each ended")
    q.add_argument("name")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_describe)
    for name, fn, text in (
        ("pause", cmd_pause, "stop starting runs until unpause"),
        ("unpause", cmd_unpause, "start runs again"),
    ):
        q = actions.add_parser(name, help=text)
        q.add_argument("name")
        q.add_argument("--note", default="")
        q.set_defaults(fn=fn)
    q = actions.add_parser("trigger", help="start a run now (the overlap policy applies)")
    q.add_argument("name")
    q.add_argument("--overlap", choices=list(OVERLAP), default=None, help="override it once")
    q.set_defaults(fn=cmd_trigger)
    q = actions.add_parser("delete", help="delete the schedule (its runs go on)")
    q.add_argument("name")
    q.set_defaults(fn=cmd_delete)
