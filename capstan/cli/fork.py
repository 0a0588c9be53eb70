"""`capstan fork RUN --at-step N`: a new run from RUN's recorded conversation after step N.

The logic is in `capstan.client.forks`; the new run is started as `capstan run` starts one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from capstan.cli.commands import EXIT_OK, Parsers
from capstan.cli.support import client_for as _client
from capstan.cli.support import print_json
from capstan.client.agents import load_overrides
from capstan.client.forks import fork
from capstan.runtime.config import Settings

__all__ = ["register"]


def _step(text: str) -> int:
    """A step number, 0 or more (checked before anything connects)."""
    try:
        step = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number") from None
    if step < 0:
        raise argparse.ArgumentTypeError(f"{step}: a step is 0 (before the first call) or more")
    return step


def _system(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: cannot be read ({exc})") from None


async def cmd_fork(args: argparse.Namespace, settings: Settings) -> int:
    overrides = load_overrides(Path(args.spec)) if args.spec else {}
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    client = await _client(settings)
    run_id = await fork(
        client,
        args.run_id,
        args.at_step,
        model=args.model,
        system=args.system,
        overrides=overrides,
    )
    print_json({"run_id": run_id, "forked_from": args.run_id}) if args.json else print(run_id)
    return EXIT_OK


def register(parsers: Parsers) -> None:
    """Add `fork`."""
    p = parsers.add("fork", cmd_fork)
    p.add_argument("run_id")
    p.add_argument(
        "--at-step",
        type=_step,
        required=True,
        metavar="N",
        help="go on after the run's Nth model call (0: from its task)",
    )
    p.add_argument("--model", default=None, help="another model profile for the fork")
    p.add_argument(
        "--system", type=_system, default=None, metavar="FILE", help="another system prompt"
    )
    p.add_argument(
        "--spec", default=None, metavar="FILE", help="RunSpec fields to change (TOML or JSON)"
    )
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--json", action="store_true")
