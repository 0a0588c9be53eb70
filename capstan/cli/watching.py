"""`capstan watch`: a run's durable event stream, its delegated children's interleaved under it.

Each run of the tree has its own history follower (long polls, all in flight at once); children
are found in their parent's memo (`capstan_children`) as they start, so a subagent's steps show
while they happen, labelled with their path below the watched run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass

from capstan.audit.events import RunEvent, derive_events
from capstan.audit.follow import HistoryFollower
from capstan.cli.commands import Parsers
from capstan.cli.support import EXIT_OK, EXIT_RUN_NOT_COMPLETED, CliError
from capstan.cli.support import client_for as _client
from capstan.client.runs import CapstanClient, CapstanError
from capstan.client.watch import watch_live
from capstan.runtime.config import Settings

__all__ = ["cmd_watch", "register"]


@dataclass
class _Watched:
    follower: HistoryFollower
    next_seq: int = 0
    children_known: int = 0
    settled: bool = False  # closed, and its children looked up after that


async def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    """Follow the durable event stream (from any offset) plus live streamed text."""
    client = await _client(settings)
    root_id: str = args.run_id
    root = await HistoryFollower.start(client.client, root_id)
    if root is None:
        raise CliError(f"no run {root_id!r}")
    tree = {root_id: _Watched(root, next_seq=args.start)}
    live: dict[tuple[int, int], int] = {}
    ended: RunEvent | None = None
    while True:
        runs = list(tree.items())
        grew = await asyncio.gather(*(w.follower.poll(wait=0.5) for _, w in runs))
        for (run_id, watched), new in zip(runs, grew, strict=True):
            if new:
                for event in _new_events(watched):
                    _show(event, run_id[len(root_id) + 1 :], args.json)
                    if run_id == root_id and event.kind == "run_ended":
                        ended = event
        if await _find_children(client, tree) or any(grew):
            continue
        if all(w.follower.closed for w in tree.values()):
            # the whole tree has ended; with --from past the end nothing was shown
            failed = ended is not None and ended.summary != "completed"
            return EXIT_RUN_NOT_COMPLETED if failed else EXIT_OK
        if not args.json and (text := await watch_live(client, root_id, live)):
            print(f"     ~ step {text.step} (attempt {text.attempt}): {text.text}", flush=True)


def _new_events(watched: _Watched) -> list[RunEvent]:
    events = derive_events(watched.follower.entries())[watched.next_seq :]
    if events:
        watched.next_seq = events[-1].seq + 1
    return events


async def _find_children(client: CapstanClient, tree: dict[str, _Watched]) -> int:
    """Start following the children the watched runs have started since the last look; how
    many were added."""
    added = 0
    for run_id, watched in list(tree.items()):
        if watched.settled:
            continue
        watched.settled = watched.follower.closed
        try:
            children = await client.children(run_id)
        except CapstanError:
            continue
        for child in children[watched.children_known :]:
            follower = await HistoryFollower.start(client.client, child.workflow_id)
            if follower is not None and child.workflow_id not in tree:
                tree[child.workflow_id] = _Watched(follower)
                added += 1
        watched.children_known = len(children)
    return added


def _show(event: RunEvent, path: str, as_json: bool) -> None:
    """One event; a child's carries its path below the watched run (`writer-1.0`)."""
    if as_json:
        data = event.model_dump(mode="json") | ({"child": path} if path else {})
        print(json.dumps(data), flush=True)
        return
    who = f" [{path}]" if path else ""
    step = f" step {event.step}" if event.step is not None else ""
    print(f"{event.seq:>4}{who} {event.kind}{step}  {event.summary}".rstrip(), flush=True)


def register(parsers: Parsers) -> None:
    """Add `watch`."""
    p = parsers.add("watch", cmd_watch)
    p.add_argument("run_id")
    p.add_argument("--from", dest="start", type=int, default=0, help="first event number")
    p.add_argument("--json", action="store_true", help="one JSON event per line")
