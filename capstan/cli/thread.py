"""`capstan thread ls|show|send` and `capstan send --thread ID TEXT`.

`send` is generated from the steering registry (`capstan.cli.steering`) with a run id and the
text as positionals; `register` puts a parser in its place that also takes `--thread`
(then the one positional is the text) and hands everything else to the generated command.

The CLI is the `default` tenant: its threads are `thread-<id>`, a thread id never holds `:`
(an API tenant's thread cannot be named from here), and a workflow at that id started for
another tenant is refused, never sent to (`capstan.client.threads`).
"""

from __future__ import annotations

import argparse

from capstan.cli.commands import Parsers
from capstan.cli.intermixed import IntermixedParser
from capstan.cli.support import EXIT_OK, CliError, Command, print_json
from capstan.cli.support import client_for as _client
from capstan.client.runs import CapstanClient
from capstan.client.threads import Sent, Threads, thread_workflow_id
from capstan.core.spec import RunSpec
from capstan.runtime.config import Settings

__all__ = ["register", "start_thread_run"]


async def start_thread_run(client: CapstanClient, thread: str, spec: RunSpec) -> str:
    """`capstan run --thread`: the spec's task goes to the thread (signal-with-start)."""
    sent = await Threads(client).send(thread, spec.task, spec)
    return sent.run_id


def _said(sent: Sent) -> str:
    how = "started" if sent.started else "delivered to running run"
    return f"{sent.run_id}\t{how}\t{sent.execution or '-'}"


async def cmd_thread_send(args: argparse.Namespace, settings: Settings) -> int:
    threads = Threads(await _client(settings))
    sent = await threads.send(args.thread, args.text, message_id=args.id)
    print_json(sent.model_dump(mode="json")) if args.json else print(_said(sent))
    return EXIT_OK


async def cmd_thread_ls(args: argparse.Namespace, settings: Settings) -> int:
    threads = Threads(await _client(settings))
    rows = await threads.list_threads(args.limit)
    if args.json:
        print_json([r.model_dump(mode="json") for r in rows])
        return EXIT_OK
    for r in rows:
        print(f"{r.thread}\t{r.terminal_reason or r.status}\t{r.started}")
    return EXIT_OK


async def cmd_thread_show(args: argparse.Namespace, settings: Settings) -> int:
    threads = Threads(await _client(settings))
    runs = await threads.runs(args.thread)
    if args.json:
        print_json([r.model_dump(mode="json") for r in runs])
        return EXIT_OK
    count = f"{len(runs)} run" + ("" if len(runs) == 1 else "s")
    print(f"thread {args.thread}: {count} (workflow id {thread_workflow_id(args.thread)})")
    for n, r in enumerate(runs, 1):
        print(f"{n:>3}  {r.execution}  {r.terminal_reason or r.status}  {r.started}")
    return EXIT_OK


def _send_with_thread(generated: Command) -> Command:
    """`send RUN_ID TEXT` as generated, or `send --thread ID TEXT`."""

    async def command(args: argparse.Namespace, settings: Settings) -> int:
        if args.thread is not None:
            if args.text is not None:
                raise CliError("send --thread ID: give the text only (no run id)")
            if args.checked:
                raise CliError("send --thread: --checked is not available (signal-with-start)")
            args.text, args.json = args.run_id, False  # the one positional is the text
            return await cmd_thread_send(args, settings)
        if args.text is None:
            raise CliError("send: give a run id and the text (or --thread ID and the text)")
        return await generated(args, settings)

    return command


def _replace_send(parsers: Parsers) -> None:
    old = parsers.built("send")
    if old is None:
        return
    generated: Command = old.get_default("fn")
    p = IntermixedParser(prog=old.prog, description=old.description)
    p.add_argument("run_id", metavar="RUN_ID", help="the run (with --thread: the text)")
    p.add_argument("text", nargs="?", default=None, help="the message")
    p.add_argument("--thread", default=None, help="send to this thread instead (no run id)")
    p.add_argument("--id", default=None, help="input id (resending the same id is a no-op)")
    p.add_argument("--checked", action="store_true", help="use the validated update")
    p.set_defaults(fn=_send_with_thread(generated))
    parsers.replace("send", p)


def register(parsers: Parsers) -> None:
    """Add `capstan thread ...` and `send --thread` (after `capstan.cli.steering`'s)."""
    _replace_send(parsers)
    p = parsers.add("thread", cmd_thread_ls)
    actions = p.add_subparsers(dest="thread_action", required=True)
    q = actions.add_parser("ls", help="threads, newest first, with their latest run")
    q.add_argument("--limit", type=int, default=50)
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_thread_ls)
    q = actions.add_parser("show", help="the runs of a thread, oldest first")
    q.add_argument("thread")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_thread_show)
    q = actions.add_parser("send", help="deliver to the running run or start the next one")
    q.add_argument("thread")
    q.add_argument("text")
    q.add_argument("--id", default=None, help="message id (same id twice: delivered once)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_thread_send)
