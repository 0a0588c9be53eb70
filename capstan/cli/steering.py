"""`capstan` steering commands: one per input in the steering registry, plus `pending`.

The commands for pause, resume, cancel, send, answer, grant and grant-budget are built from the
input types' fields (`capstan.core.steering`); approve and deny are written by hand because they
look up the hash the reviewer was shown.

Each sends a signal by default, so it works while no worker runs and says so; `--checked` sends
the validated update instead and reports a rejection (it needs a worker).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK, CliError, Command, expires_in, print_json
from capstan.cli.support import client_for as _client
from capstan.client.runs import CapstanError, tree_roots
from capstan.core.steering import STEERING_TYPES, Ack, PendingView, SteeringBase
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.config import Settings

__all__ = ["input_from_args", "register"]


def _said(ack: Ack | None, sent: str, applied: str) -> None:
    """One line on what a steering command did: sent as a signal, or applied / duplicate."""
    if ack is None:
        print(f"{sent} (signal accepted by the server; applied at the run's next step boundary)")
    else:
        print(applied if ack.applied else f"{applied}: ignored, {ack.detail}")


def _edited_arguments(text: str | None) -> str | None:
    """`--edit` must be a JSON object: say so here, not after the run ignored it."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"approve --edit: not valid JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(value, dict):
        raise CliError("approve --edit: the arguments must be a JSON object")
    return text


async def cmd_approve(args: argparse.Namespace, settings: Settings) -> int:
    arguments = _edited_arguments(args.edit)
    client = await _client(settings)
    action: Literal["edit", "always", "approve"] = (
        "edit" if args.edit else "always" if args.always else "approve"
    )
    # with a worker up, decide through the validated update so a rejection is seen now
    ack = await client.decide(
        args.run_id,
        action,
        args.request_id,
        args_hash=args.hash,
        arguments=arguments,
        reason=args.reason,
        checked=args.checked or await client.workers_polling(),
    )
    what = f"{action} for {args.request_id or 'the open request'} of {args.run_id}"
    _said(ack, f"{what} sent", f"{what} applied")
    return EXIT_OK


async def cmd_deny(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.decide(
        args.run_id,
        "deny",
        args.request_id,
        args_hash=args.hash,
        reason=args.reason,
        checked=args.checked or await client.workers_polling(),
    )
    what = args.request_id or "the open request"
    _said(ack, f"deny for {what} of {args.run_id} sent", f"{what} of {args.run_id} denied")
    return EXIT_OK


def _send_input(kind: type[SteeringBase]) -> Command:
    """The command that sends one input type, built from its fields."""
    wire = kind.wire

    async def command(args: argparse.Namespace, settings: Settings) -> int:
        item = input_from_args(kind, args)
        client = await _client(settings)
        ack = await client.steer(args.run_id, item, checked=args.checked)
        _said(ack, f"{wire.commands[0]} sent to {args.run_id}", f"{wire.commands[0]} applied")
        return EXIT_OK

    return command


def input_from_args(kind: type[SteeringBase], args: argparse.Namespace) -> SteeringBase:
    """The input a generated command sends, validated; a bad value is one clear line."""
    fields = {name: getattr(args, name) for name in _cli_fields(kind)}
    try:
        return kind.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CliError(f"{kind.wire.commands[0]}: {where}: {first['msg']}") from None


def _cli_fields(kind: type[SteeringBase]) -> list[str]:
    """The fields a user sets on the command line (kind and identity are filled in)."""
    return [name for name in kind.model_fields if name not in ("kind", "identity")]


def _add_field(p: argparse.ArgumentParser, kind: type[SteeringBase], name: str) -> None:
    info = kind.model_fields[name]
    annotation = info.annotation
    choices = get_args(annotation) if get_origin(annotation) is Literal else None
    convert: Callable[[str], Any] = (
        int if annotation is int else float if annotation is float else str
    )
    text = info.description
    if name in kind.wire.positional:
        p.add_argument(name, type=convert, choices=choices, help=text if name != "id" else None)
    elif name == "id":
        p.add_argument("--id", default=None, help="input id (resending the same id is a no-op)")
    else:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=convert, default=None)


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    run_ids = [args.run_id] if args.run_id else tree_roots(await client.running_runs())
    views = []
    for run_id in run_ids:
        try:
            views.append(await asyncio.wait_for(client.pending(run_id), 10))
        except CapstanError:
            if args.run_id:
                raise
        except Exception as exc:  # one run of many that could not be read: say so, go on
            if args.run_id:
                raise CliError(f"could not read what {run_id} waits for: {exc}") from exc
            print(f"{run_id}  (could not be read: {type(exc).__name__})")
    if args.json:
        print_json([v.model_dump(mode="json") for v in views])
        return EXIT_OK
    _print_pending(views, client.content())
    return EXIT_OK


def _print_pending(views: list[PendingView], content: ContentStore) -> None:
    for v in views:
        for r in v.approvals:
            print(f"{v.run_id}  approval  {r.request_id}  {r.tool}({content.resolve(r.arguments)})")
            print(f"    hash {r.args_hash}  {expires_in(r.expires_at)}  ({r.reason})")
        for q in v.questions:
            options = f"  options: {', '.join(q.options)}" if q.options else ""
            print(f"{v.run_id}  question  {q.request_id}  {q.question}{options}")
            print(f"    {expires_in(q.expires_at)}")
        if v.awaiting_steps:
            print(f"{v.run_id}  steps     at its step limit: `capstan grant {v.run_id} N`")
        if v.paused:
            print(f"{v.run_id}  paused    `capstan resume {v.run_id}`")
    if not any(v.approvals or v.questions or v.awaiting_steps or v.paused for v in views):
        print("nothing is waiting")


def register(parsers: Parsers) -> None:
    """Add the steering sub-commands to the `capstan` parser."""

    def steering(name: str, fn: Command) -> argparse.ArgumentParser:
        p = parsers.add(name, fn)
        p.add_argument("run_id")
        p.add_argument(
            "--checked",
            action="store_true",
            help="use the validated update (needs a worker): a rejection is reported",
        )
        return p

    for kind in STEERING_TYPES:
        if kind.wire.custom_cli:
            continue
        (name,) = kind.wire.commands
        p = steering(name, _send_input(kind))
        for field in _cli_fields(kind):
            _add_field(p, kind, field)
    # decisions need the hash the reviewer was shown: written by hand
    p = steering("approve", cmd_approve)
    p.add_argument("request_id", nargs="?", default=None)
    p.add_argument("--edit", default=None, metavar="JSON", help="run with these arguments")
    p.add_argument("--always", action="store_true", help="approve this tool for the whole run")
    p.add_argument("--hash", default=None, help="the arguments hash shown by `pending`")
    p.add_argument("--reason", default="")
    p = steering("deny", cmd_deny)
    p.add_argument("request_id", nargs="?", default=None)
    p.add_argument("--reason", required=True)
    p.add_argument("--hash", default=None, help="the arguments hash shown by `pending`")
    p = parsers.add("pending", cmd_pending)
    p.add_argument("run_id", nargs="?", default=None)
    p.add_argument("--json", action="store_true")
