"""`capstan deploy status|promote|drain`: the Worker Deployment of this task queue's workers.

The logic is in `capstan.runtime.deployments`; the deployment is `--deployment` or
`CAPSTAN_DEPLOYMENT`.
"""

from __future__ import annotations

import argparse
import math

from capstan.cli.commands import EXIT_RUN_NOT_COMPLETED, Parsers
from capstan.cli.support import EXIT_OK, CliError, print_json
from capstan.cli.support import client_for as _client
from capstan.runtime.config import Settings
from capstan.runtime.deployments import describe_deployment, drained, promote

__all__ = ["register"]


def _name(args: argparse.Namespace, settings: Settings) -> str:
    name = args.deployment or settings.deployment
    if not name:
        raise CliError("capstan deploy: name the deployment (--deployment or CAPSTAN_DEPLOYMENT)")
    return str(name)


def _percentage(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage") from None
    if not (math.isfinite(value) and 0 <= value < 100):
        raise argparse.ArgumentTypeError(f"{text}: a ramp is 0 (none) up to below 100 percent")
    return value


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    name = _name(args, settings)  # before connecting: a missing name is its own line
    client = await _client(settings)
    view = await describe_deployment(client.client, name, settings.task_queue)
    if args.json:
        print_json(
            {
                "deployment": view.name,
                "current": view.current,
                "ramping": view.ramping,
                "versions": [v.__dict__ for v in view.versions],
            }
        )
        return EXIT_OK
    print(f"deployment {view.name}: current {view.current or '-'}, ramping {view.ramping or '-'}")
    for v in view.versions:
        ramp = f" ({v.ramp_percentage:g}% of new runs)" if v.status == "ramping" else ""
        print(
            f"  {v.build_id}: {v.status}{ramp}, {v.open_runs} open run(s) pinned, "
            f"{v.pollers} worker(s) polling"
        )
    return EXIT_OK


async def cmd_promote(args: argparse.Namespace, settings: Settings) -> int:
    name = _name(args, settings)  # before connecting: a missing name is its own line
    client = await _client(settings)
    await promote(client.client, name, args.build, args.ramp, identity=settings.identity)
    if args.ramp is None:
        print(f"deployment {name}: {args.build} is current; new runs start on it")
    else:
        print(f"deployment {name}: {args.build} gets {args.ramp:g}% of new runs")
    return EXIT_OK


async def cmd_drain(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when the build is drained (its workers may stop), 1 while runs are pinned to it."""
    name = _name(args, settings)  # before connecting: a missing name is its own line
    client = await _client(settings)
    version = await drained(client.client, name, args.build, settings.task_queue)
    if version.open_runs == 0:
        print(f"deployment {name}: {args.build} is drained; its workers may stop")
        return EXIT_OK
    print(
        f"deployment {name}: {args.build} still has {version.open_runs} open run(s) pinned to it "
        "(each moves to the current build when it next continues as new)"
    )
    return EXIT_RUN_NOT_COMPLETED


def register(parsers: Parsers) -> None:
    """Add `capstan deploy ...`."""
    p = parsers.add("deploy", cmd_status)
    p.add_argument("--deployment", default=None, help="default: CAPSTAN_DEPLOYMENT")
    p.add_argument("--json", action="store_true")
    actions = p.add_subparsers(dest="deploy_action")
    q = actions.add_parser("status", help="versions, current and ramping, runs and workers")
    q.add_argument("--deployment", default=argparse.SUPPRESS, help="default: CAPSTAN_DEPLOYMENT")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    q.set_defaults(fn=cmd_status)
    q = actions.add_parser("promote", help="make a build current (or ramp new runs to it)")
    q.add_argument("build")
    q.add_argument("--ramp", type=_percentage, default=None, metavar="PCT")
    q.add_argument("--deployment", default=argparse.SUPPRESS, help="default: CAPSTAN_DEPLOYMENT")
    q.set_defaults(fn=cmd_promote)
    q = actions.add_parser("drain", help="exit 0 once no open run is pinned to a build")
    q.add_argument("build")
    q.add_argument("--deployment", default=argparse.SUPPRESS, help="default: CAPSTAN_DEPLOYMENT")
    q.set_defaults(fn=cmd_drain)
