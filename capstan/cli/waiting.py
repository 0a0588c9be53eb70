"""What `capstan run --wait` says while the run waits for a person.

A run that asks for an approval or a question can wait for days; a terminal that only says
"waiting for its result" hides that it waits for *you*. While `--wait` waits, each request the
run opens is printed once to stderr with the command that decides it. Reads only: the client's
`pending` (a query, or the memo when no worker runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from typing import TextIO

from capstan.client.runs import CapstanClient
from capstan.core.steering import PendingView
from capstan.runtime.blobstore import ContentStore

__all__ = ["announce_waits", "request_lines"]

#: how often the open requests are read while waiting
POLL_SECONDS = 1.0


def request_lines(view: PendingView, content: ContentStore, seen: set[str]) -> list[str]:
    """Lines for each request of `view` not in `seen` (which is updated), with its command."""
    run = shlex.quote(view.run_id)
    lines: list[str] = []
    for r in view.approvals:
        if r.request_id in seen:
            continue
        seen.add(r.request_id)
        request = shlex.quote(r.request_id)
        arguments = content.resolve(r.arguments)
        shown = arguments if len(arguments) <= 200 else arguments[:199] + "…"
        lines += [
            f"run {view.run_id} waits for approval: {r.tool}({shown}) ({r.reason})",
            f"    approve: capstan approve {run} {request} --hash {r.args_hash}",
            f"    deny:    capstan deny {run} {request} --reason '...'",
        ]
    for q in view.questions:
        if q.request_id in seen:
            continue
        seen.add(q.request_id)
        options = f" (options: {', '.join(q.options)})" if q.options else ""
        lines += [
            f"run {view.run_id} asks: {q.question}{options}",
            f"    answer:  capstan answer {run} {shlex.quote(q.request_id)} '...'",
        ]
    return lines


async def announce_waits(client: CapstanClient, run_id: str, out: TextIO = sys.stderr) -> None:
    """Print each request the run opens, once, until cancelled (the result arrived)."""
    seen: set[str] = set()
    content = client.content()
    while True:
        with contextlib.suppress(Exception):  # a missed read is read again next time
            for line in request_lines(await client.pending(run_id), content, seen):
                print(line, file=out, flush=True)
        await asyncio.sleep(POLL_SECONDS)
