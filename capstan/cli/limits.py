"""`capstan limits [show|set|reset]`: the provider limits the server enforces for the fleet.

The logic is in `capstan.client.limits`; what each source of a rate means is in
`capstan.runtime.queue_config`.
"""

from __future__ import annotations

import argparse
import math

from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK, print_json
from capstan.cli.support import client_for as _client
from capstan.client.limits import MAX_RATE, Limits, ProfileLimit
from capstan.runtime.config import Settings
from capstan.runtime.queue_config import QueueLimit

__all__ = ["register"]

_SOURCES = {
    "workers": "as its workers declare",
    "operator": "set by an operator (`capstan limits reset` gives it back to the workers)",
    "paused": "slowed after the provider pushed back (429)",
    "server": "no limit",
}


def _positive_rate(text: str) -> float:
    """A rate argument: calls a second, above 0 (checked before anything connects)."""
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of calls a second") from None
    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
        raise argparse.ArgumentTypeError(
            f"{text} calls a second: a rate is above 0, at most {MAX_RATE:g}"
        )
    return rate


def _rate(now: QueueLimit) -> str:
    return "unlimited" if now.rate is None else f"{now.rate:g}/s"


def _line(shown: ProfileLimit) -> str:
    now = shown.now
    parts = [f"profile {shown.profile}: {_rate(now)}, {_SOURCES[now.source]}"]
    if now.pushback is not None:
        restore = (
            "the workers' rate" if now.pushback.restore is None else f"{now.pushback.restore:g}/s"
        )
        parts.append(f"back to {restore} after the provider's Retry-After")
    configured = shown.configured
    if configured is not None:
        declared = configured.requests_per_second
        parts.append(f"declared {declared:g}/s" if declared else "declared no rate")
        if configured.concurrency:
            parts.append(f"{configured.concurrency} at once across the fleet")
    parts.append(f"{now.pollers} worker(s) polling {shown.queue}")
    return "; ".join(parts)


def _json(shown: ProfileLimit) -> dict[str, object]:
    now = shown.now
    return {
        "profile": shown.profile,
        "queue": shown.queue,
        "rate": now.rate,
        "source": now.source,
        "override": now.override,
        "paused_until": now.pushback.until if now.pushback else None,
        "pollers": now.pollers,
        "configured": shown.configured.model_dump() if shown.configured else None,
    }


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    limits = Limits(await _client(settings))
    shown = await limits.show(args.profiles)
    if args.json:
        print_json([_json(s) for s in shown])
    elif not shown:
        print("no profile has limits (add [limits.NAME] tables to CAPSTAN_PROFILES)")
    for s in shown if not args.json else ():
        print(_line(s))
    return EXIT_OK


async def cmd_set(args: argparse.Namespace, settings: Settings) -> int:
    now = await Limits(await _client(settings)).set(args.profile, args.rps)
    print(f"profile {args.profile}: {_rate(now)} for every worker, until `capstan limits reset`")
    return EXIT_OK


async def cmd_reset(args: argparse.Namespace, settings: Settings) -> int:
    now = await Limits(await _client(settings)).reset(args.profile)
    print(f"profile {args.profile}: {_rate(now)}, {_SOURCES[now.source]}")
    return EXIT_OK


def register(parsers: Parsers) -> None:
    """Add `capstan limits ...`."""
    p = parsers.add("limits", cmd_show)
    p.add_argument("--json", action="store_true")
    p.set_defaults(profiles=[])
    actions = p.add_subparsers(dest="limits_action")
    q = actions.add_parser("show", help="each limited profile's rate now, and why")
    q.add_argument("profiles", nargs="*", metavar="PROFILE")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    q.set_defaults(fn=cmd_show)
    q = actions.add_parser("set", help="set a profile's rate for the whole fleet (overrides)")
    q.add_argument("profile")
    q.add_argument("--rps", type=_positive_rate, required=True, help="calls a second, above 0")
    q.set_defaults(fn=cmd_set)
    q = actions.add_parser("reset", help="give a profile's rate back to its workers' setting")
    q.add_argument("profile")
    q.set_defaults(fn=cmd_reset)
