"""`capstan` steering commands: approve, deny, pause, resume, cancel, send, answer, grant, pending.

Each sends a signal by default, so it works while no worker runs and says so; `--checked` sends
the validated update instead and reports a rejection (it needs a worker).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Literal

from capstan.cli_support import EXIT_OK, CliError, Command, print_json
from capstan.cli_support import client_for as _client
from capstan.config import Settings
from capstan.steering import Ack

__all__ = ["register_steering"]

Adder = Callable[[str, Command, str], argparse.ArgumentParser]


def _said(ack: Ack | None, sent: str, applied: str) -> None:
    """One line on what a steering command did: sent as a signal, or applied / duplicate."""
    if ack is None:
        print(f"{sent} (signal accepted by the server; applied at the run's next step boundary)")
    else:
        print(applied if ack.applied else f"{applied}: ignored, {ack.detail}")


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.cancel(args.run_id, args.reason, checked=args.checked)
    _said(ack, f"cancel sent to {args.run_id}", f"{args.run_id} will end at its next boundary")
    return EXIT_OK


async def cmd_approve(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    action: Literal["edit", "always", "approve"] = (
        "edit" if args.edit else "always" if args.always else "approve"
    )
    ack = await client.decide(
        args.run_id,
        action,
        args.request_id,
        args_hash=args.hash,
        arguments=args.edit,
        reason=args.reason,
        checked=args.checked,
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
        checked=args.checked,
    )
    _said(ack, f"deny for {args.request_id} sent", f"{args.request_id} denied")
    return EXIT_OK


async def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.pause(args.run_id, checked=args.checked)
    _said(ack, f"pause sent to {args.run_id}", f"{args.run_id} pauses at its next boundary")
    return EXIT_OK


async def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.resume(args.run_id, checked=args.checked)
    _said(ack, f"resume sent to {args.run_id}", f"{args.run_id} resumed")
    return EXIT_OK


async def cmd_send(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.send_message(args.run_id, args.text, args.id, checked=args.checked)
    _said(ack, f"message sent to {args.run_id}", "message queued for the next step")
    return EXIT_OK


async def cmd_answer(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.answer(args.run_id, args.request_id, args.text, checked=args.checked)
    _said(ack, f"answer to {args.request_id} sent", f"answer to {args.request_id} applied")
    return EXIT_OK


async def cmd_grant(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.grant_steps(args.run_id, args.steps, checked=args.checked)
    _said(ack, f"grant of {args.steps} steps sent", f"{args.steps} more steps granted")
    return EXIT_OK


async def cmd_grant_budget(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    ack = await client.grant_budget(args.run_id, args.budget, args.amount, checked=args.checked)
    what = f"{args.amount:g} more {args.budget}"
    _said(ack, f"grant of {what} sent", f"{what} granted")
    return EXIT_OK


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    client = await _client(settings)
    run_ids = [args.run_id] if args.run_id else await client.running_runs()
    views = []
    for run_id in run_ids:
        try:
            views.append(await asyncio.wait_for(client.pending(run_id), 10))
        except Exception as exc:
            if args.run_id:
                raise CliError(f"no worker answered for {run_id}: {exc}") from exc
    if args.json:
        print_json([v.model_dump(mode="json") for v in views])
        return EXIT_OK
    content = client.content()
    for v in views:
        for r in v.approvals:
            print(f"{v.run_id}  approval  {r.request_id}  {r.tool}({content.resolve(r.arguments)})")
            print(f"    hash {r.args_hash}  expires {r.expires_at.isoformat()}  ({r.reason})")
        for q in v.questions:
            options = f"  options: {', '.join(q.options)}" if q.options else ""
            print(f"{v.run_id}  question  {q.request_id}  {q.question}{options}")
        if v.awaiting_steps:
            print(f"{v.run_id}  steps     at its step limit: `capstan grant {v.run_id} N`")
        if v.paused:
            print(f"{v.run_id}  paused    `capstan resume {v.run_id}`")
    if not any(v.approvals or v.questions or v.awaiting_steps or v.paused for v in views):
        print("nothing is waiting")
    return EXIT_OK


def register_steering(add: Adder) -> None:
    """Add the steering sub-commands to the `capstan` parser."""

    def steering(name: str, fn: Command, text: str) -> argparse.ArgumentParser:
        p = add(name, fn, text)
        p.add_argument("run_id")
        p.add_argument(
            "--checked",
            action="store_true",
            help="use the validated update (needs a worker): a rejection is reported",
        )
        return p

    p = steering("cancel", cmd_cancel, "end a run at its next step boundary")
    p.add_argument("--reason", default="")
    p = steering("approve", cmd_approve, "approve (or edit, or always approve) a tool call")
    p.add_argument("request_id", nargs="?", default=None)
    p.add_argument("--edit", default=None, metavar="JSON", help="run with these arguments")
    p.add_argument("--always", action="store_true", help="approve this tool for the whole run")
    p.add_argument("--hash", default=None, help="the arguments hash shown by `pending`")
    p.add_argument("--reason", default="")
    p = steering("deny", cmd_deny, "deny a tool call; the reason is what the model sees")
    p.add_argument("request_id")
    p.add_argument("--reason", required=True)
    p.add_argument("--hash", default=None, help="the arguments hash shown by `pending`")
    steering("pause", cmd_pause, "pause at the next step boundary")
    steering("resume", cmd_resume, "resume a paused run")
    p = steering("send", cmd_send, "send a message the model reads at its next step")
    p.add_argument("text")
    p.add_argument("--id", default=None, help="message id (resending the same id is a no-op)")
    p = steering("answer", cmd_answer, "answer a question the agent asked")
    p.add_argument("request_id")
    p.add_argument("text")
    p = steering("grant", cmd_grant, "give a run at its step limit N more steps (0 ends it)")
    p.add_argument("steps", type=int)
    p = steering("grant-budget", cmd_grant_budget, "raise a spent budget of a waiting run")
    p.add_argument(
        "budget",
        choices=["tool_calls", "input_tokens", "output_tokens", "cost_usd", "wall_seconds"],
    )
    p.add_argument("amount", type=float)
    p = add("pending", cmd_pending, "what runs wait for: approvals, questions, steps, resume")
    p.add_argument("run_id", nargs="?", default=None)
    p.add_argument("--json", action="store_true")
