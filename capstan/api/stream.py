"""A run's live stream over Server-Sent Events: the durable step events, numbered, then the end.

    retry: 2000

    id: 7
    event: run_event
    data: {"seq": 7, "kind": "model_replied", "step": 2, ...}

    event: text
    data: {"step": 3, "attempt": 1, "text": "Let me"}

    event: end
    data: {"run_id": "run-1", "terminal_reason": "completed", "next": 31,
           "output_format": "json", "output": {"total_cents": 1250}}

Each step event carries its stable sequence number (from `capstan.audit.events`) as its SSE id,
so a client that reconnects with `Last-Event-ID: N` gets event N+1 onwards: nothing lost, nothing
repeated, across continue-as-new and worker restarts. Streamed model text (`text`) and the `end`
event carry no id: they are ephemeral and leave the resume point where it was. The `end` of a
run that returned a result carries its answer as data (`output`: a typed result's JSON value,
`output_format: json`, or the answer's text), as `GET /api/runs/{id}` shows it.

The stream follows the history with long polls (`HistoryFollower`): each answer holds only new
history events. `ChainEvents` derives events for the current run of the chain only, and each
closed run once, so an event costs the same at step 1,000 as at step 1 (the current run is
bounded by continue-as-new). Model text is read from heartbeats only while a model call is in
flight, so an idle stream (a run waiting days for approval) costs one long poll per interval.

Bookkeeping events stay out unless asked for (`?include=continued_as_new`): a run continues as
new before each wait for a person (short replays when the decision wakes it), which says
nothing about the run to its reader. Their numbers stay reserved: the ids of the other events
are the same with or without them, so `Last-Event-ID` works either way. A stream that cannot
decrypt the run (this server lacks its codec key) ends with an `error` event naming the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Query
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from capstan.audit.events import RunEvent, derive_events
from capstan.audit.follow import HistoryFollower
from capstan.audit.history import Entry
from capstan.client.runs import CapstanClient, CapstanError
from capstan.client.watch import watch_live
from capstan.core.spec import RunResult
from capstan.runtime.codec import CodecError

__all__ = ["ChainEvents", "IncludeQuery", "StreamExtra", "run_stream", "sse"]


class StreamExtra(StrEnum):
    """Events a run's stream carries only when the client asks for them."""

    #: the run continued as new (before each wait for a person, and when history grows long)
    CONTINUED_AS_NEW = "continued_as_new"


IncludeQuery = Annotated[
    list[StreamExtra] | None,
    Query(
        description="Bookkeeping events to include as well (repeat for several): "
        "`continued_as_new` marks each continue-as-new of the run (one before every wait for "
        "a person); left out by default. Event ids are the same either way."
    ),
]

_MODEL_KINDS = frozenset({"step_started", "model_replied", "model_failed", "run_ended"})


async def _answer(client: CapstanClient, run_id: str, execution: str) -> dict[str, Any]:
    """The answer of the execution that closed the chain, for the `end` event (never a later
    run's: a thread's next run has the same id). Nothing for a run that left no result (it was
    terminated) or whose answer this server cannot read: the events said how it ended."""
    handle = client.client.get_workflow_handle(run_id, run_id=execution, result_type=RunResult)
    try:
        result = await asyncio.wait_for(handle.result(follow_runs=False), 10)
        return {"output_format": result.output_format, "output": client.output_data(result)}
    except (WorkflowFailureError, RPCError, TimeoutError, CapstanError, ValueError):
        return {}


def sse(data: Any, event: str | None = None, event_id: int | None = None) -> str:
    """One SSE message (JSON data on one line)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    lines.append(f"data: {text}")
    return "\n".join(lines) + "\n\n"


class ChainEvents:
    """`derive_events` over a growing chain, without re-deriving closed runs.

    The only state an event derivation carries from one run of the chain to the next is the set
    of requests already announced (a request still open when the run continued as new is
    announced again by the next run, and must not appear twice). So a closed run is reduced to
    its announcement entries, and the current run is derived behind those: the numbers are
    exactly `derive_events` over the whole chain (the tests compare them).
    """

    def __init__(self, follower: HistoryFollower) -> None:
        self.follower = follower
        self._folded = 0  # closed runs folded so far
        self._closed_events = 0  # events in the folded runs
        self._stubs: list[list[Entry]] = []  # each folded run's announcements
        self._stub_events = 0  # the events those announcements derive to
        self.current: list[RunEvent] = []

    def new_events(self, start: int) -> list[RunEvent]:
        """Events numbered `start` or later that the chain holds now (closed runs first)."""
        runs = self.follower.entries()
        out: list[RunEvent] = []
        while self._folded < len(runs) - 1:
            events = self._derive(runs[self._folded])
            out += [e for e in events if e.seq >= start]
            self._closed_events += len(events)
            self._stubs.append([e for e in runs[self._folded] if e.kind == "open_requests"])
            self._stub_events = len(derive_events(self._stubs))
            self._folded += 1
        self.current = self._derive(runs[-1]) if runs else []
        return out + [e for e in self.current if e.seq >= start]

    def _derive(self, entries: list[Entry]) -> list[RunEvent]:
        events = derive_events([*self._stubs, entries])[self._stub_events :]
        base = self._closed_events
        return [e.model_copy(update={"seq": base + n}) for n, e in enumerate(events)]

    @property
    def model_in_flight(self) -> bool:
        """A model call of the current run started and has not answered yet."""
        for event in reversed(self.current):
            if event.kind in _MODEL_KINDS:
                return event.kind == "step_started"
        return False


async def _live_texts(
    client: CapstanClient, run_id: str, poll: asyncio.Future[bool], every: float, seen: Any
) -> AsyncIterator[str]:
    """Streamed text of the model call in flight, until the history poll answers."""
    while not poll.done():
        done, _ = await asyncio.wait({poll}, timeout=every)
        if done:
            return
        text = await watch_live(client, run_id, seen)
        if text is not None:
            yield sse({"step": text.step, "attempt": text.attempt, "text": text.text}, "text")


async def run_stream(
    client: CapstanClient,
    run_id: str,
    start: int,
    wait: float,
    live_every: float,
    *,
    include: Iterable[StreamExtra] = (),
) -> AsyncIterator[str]:
    """The SSE messages of one run from event `start` on, ending with `end`; the events of
    `StreamExtra` only when `include` names them."""
    hidden = {kind.value for kind in StreamExtra} - {StreamExtra(k).value for k in include}
    yield "retry: 2000\n\n"
    follower = await HistoryFollower.start(client.client, run_id)
    if follower is None:
        yield sse({"run_id": run_id, "terminal_reason": None, "next": start}, "end")
        return
    chain = ChainEvents(follower)
    next_seq, seen = start, dict[tuple[int, int], int]()
    while True:
        poll = asyncio.ensure_future(follower.poll(wait))
        try:
            if chain.model_in_flight:
                async for message in _live_texts(client, run_id, poll, live_every, seen):
                    yield message
            grew = await poll
        except RPCError:
            # Temporal went away: end here; the client reconnects with Last-Event-ID
            yield sse({"message": "the Temporal service is not reachable"}, "error")
            return
        except CodecError as exc:  # key ids and setting names only, never key material
            yield sse({"message": f"this server cannot decrypt the run: {exc}"}, "error")
            return
        finally:
            if not poll.done():
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError, RPCError):
                    await poll
        for event in chain.new_events(next_seq) if grew else []:
            next_seq = event.seq + 1  # a hidden event is passed over, never sent later
            if event.kind not in hidden:
                yield sse(event.model_dump(mode="json"), "run_event", event.seq)
        if follower.closed:
            ending = next((e.summary for e in chain.current if e.kind == "run_ended"), None)
            end = {"run_id": run_id, "terminal_reason": ending, "next": next_seq}
            yield sse({**end, **await _answer(client, run_id, follower.run_id)}, "end")
            return
        if not grew:
            yield ": keep-alive\n\n"
