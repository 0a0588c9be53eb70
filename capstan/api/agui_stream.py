"""One AG-UI response: RUN_STARTED, the run's events from where the client is, then the end.

The run's history is followed with long polls (`HistoryFollower`), its events derived as it
grows (`agui_events`, each execution of the chain once it is closed), and sent from the
client's position (`agui_cursor`). While a model call is in flight its reply streams in from
the activity's heartbeats as TEXT_MESSAGE_CONTENT: ephemeral text that the durable reply
completes (only what the client does not have yet is sent).

The response ends with the run, or when the run waits for a person:

    completed                  RUN_FINISHED, outcome success, result: the answer (a typed
                               result's JSON value, else its text)
    cancelled                  RUN_FINISHED, outcome cancelled
    any other ending           RUN_ERROR, code: the terminal reason
    an approval or a question  RUN_FINISHED, outcome interrupt (`agui_input.interrupt_for`)
    Temporal unreachable, a    RUN_ERROR with a one-line message; the run goes on, and the
      key or blob missing      same request again picks up where this one stopped

A run's own requests count once its history announces them and the run still lists them (so a
stream catching up on an old request never stops on it); a delegated child's are looked for
whenever the history is quiet for a poll. Waiting for anything else (a pause, a step grant)
keeps the response open with keep-alive comments.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    Interrupt,
    Message,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
)
from ag_ui.encoder import EventEncoder
from temporalio.service import RPCError

from capstan.api.agui_cursor import (
    Cursor,
    Streamed,
    ahead,
    closing,
    from_messages,
    held_texts,
    open_at,
    render,
    reopening,
    streamed_at,
)
from capstan.api.agui_events import Ending, Fold, OpenRequest, Resolve, chain_key, derive
from capstan.api.agui_input import interrupt_for
from capstan.audit.follow import HistoryFollower
from capstan.client.runs import CapstanClient
from capstan.core.errors import StoreError
from capstan.runtime.codec import CodecError
from capstan.runtime.temporal_connection import TemporalConnectError

__all__ = ["AguiChain", "Attach", "agui_stream", "sse"]

log = logging.getLogger("capstan.api")
_ENCODER = EventEncoder()
#: a RUN_ERROR message keeps this much of a run's error
_ERROR_CHARS = 500


def sse(event: BaseEvent, event_id: str | None = None) -> str:
    """One SSE message: the event as AG-UI's encoder writes it, with an id when it has one."""
    text = _ENCODER.encode(event)
    return f"id: {event_id}\n{text}" if event_id else text


def _line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _ERROR_CHARS else flat[: _ERROR_CHARS - 1] + "…"


@dataclass(frozen=True)
class Attach:
    """What one response follows, and for whom."""

    workflow_id: str  # the thread's workflow id
    first_execution: str  # the first execution of the Capstan run followed
    thread_id: str  # AG-UI's
    run_id: str  # AG-UI's
    messages: tuple[Message, ...]  # what the client holds
    cursor: Cursor | None = None  # from Last-Event-ID, when it names this run
    fresh: bool = False  # the request started this run: everything is new to the client
    decided: frozenset[str] = frozenset()  # requests this request settled
    poll_seconds: float = 15.0
    live_seconds: float = 0.5

    @property
    def key(self) -> str:
        return chain_key(self.first_execution)

    @property
    def tag(self) -> str:
        return self.key[:6]


class AguiChain:
    """`derive` over a growing chain, each closed execution derived once."""

    def __init__(self, follower: HistoryFollower, key: str, resolve: Resolve) -> None:
        self.follower, self.key, self.resolve = follower, key, resolve
        self._closed: list[BaseEvent] = []
        self._folded = 0
        self._after_closed = Fold()
        self.fold = Fold()  # the state after every event so far

    def events(self) -> list[BaseEvent]:
        """Every event of the chain so far (blocking: blob reads)."""
        runs = self.follower.entries()
        while self._folded < len(runs) - 1:
            done, self._after_closed = derive(
                self.key, runs[self._folded : self._folded + 1], self.resolve,
                start=self._folded, fold=self._after_closed,
            )  # fmt: skip
            self._closed += done
            self._folded += 1
        current, self.fold = derive(
            self.key, runs[self._folded :], self.resolve, start=self._folded,
            fold=self._after_closed,
        )  # fmt: skip
        return self._closed + current


class _Live:
    """Streamed text of one reply, from heartbeats: only while it is one attempt's, read
    whole (a heartbeat carries the last characters only) and unbroken."""

    def __init__(self, message: str, held: int = 0) -> None:
        self.message, self.chars, self.text = message, held, ""
        self.attempt: int | None = None
        self.stopped = held > 0  # resumed mid-reply: the reply itself brings the rest

    def take(self, progress: dict[str, Any] | None, step: int) -> str | None:
        if self.stopped or not progress or progress.get("step") != step:
            return None
        attempt, total = int(progress.get("attempt", 1)), int(progress.get("chars", 0))
        tail = str(progress.get("tail", ""))
        if self.attempt is None:
            self.attempt = attempt
        elif attempt != self.attempt:
            self.stopped = True  # a retried call: what streamed stays, the reply follows it
            return None
        new = total - self.chars
        if new <= 0:
            return None
        if new > len(tail):
            self.stopped = True  # more than a heartbeat holds went by: the reply brings it
            return None
        self.chars, self.text = total, self.text + tail[-new:]
        return tail[-new:]


class _Follow:
    """The events of one response after RUN_STARTED."""

    def __init__(self, client: CapstanClient, plan: Attach) -> None:
        self.client, self.plan = client, plan
        self.follower = HistoryFollower(client.client, plan.workflow_id, plan.first_execution)
        store = client.content()
        self.chain = AguiChain(self.follower, plan.key, store.resolve)
        self.sent: int | None = None
        self.streamed: Streamed | None = None
        self.live: _Live | None = None
        self.grew = False

    def start_point(
        self, events: list[BaseEvent], final: bool
    ) -> tuple[int, Streamed | None] | None:
        """Where the client is, or None while the events read so far fall short of what it
        has (a chain is read an execution, a page, at a time): `final` once all is read."""
        if self.plan.fresh:
            return 0, None
        cursor, messages = self.plan.cursor, self.plan.messages
        if cursor is not None and cursor.position > len(events) and not final:
            return None
        if cursor is not None and cursor.position <= len(events):
            delivered = events[: cursor.position]
            return cursor.position, streamed_at(delivered, held_texts(messages), cursor.chars)
        if ahead(events, messages, self.plan.key) and not final:
            return None
        return from_messages(events, messages)

    async def messages(self) -> AsyncIterator[str]:
        events: list[BaseEvent] = []
        while True:
            async for text in self.poll():
                yield text
            if self.grew or self.sent is None:
                events = await asyncio.to_thread(self.chain.events)
            if self.sent is None:
                opening = self.begin(events, final=not self.grew or self.follower.closed)
                if opening is None:
                    continue  # reading on to where the client is
                for text in opening:
                    yield text
            for text in self.catch_up(events):
                yield text
            if self.follower.closed:
                yield sse(self.ending(self.chain.fold.ending))
                return
            interrupts = await self.interrupts(idle=not self.grew)
            if interrupts:
                for event in closing(open_at(events[: self.sent])):
                    yield sse(event)
                outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
                yield sse(self.finished(outcome=outcome))
                return
            if not self.grew:
                yield ": keep-alive\n\n"

    async def poll(self) -> AsyncIterator[str]:
        """One long poll of the history (`grew`: it brought events), and meanwhile the reply
        in flight as it streams."""
        poll = asyncio.ensure_future(self.follower.poll(self.plan.poll_seconds))
        try:
            if self.sent is not None and self.chain.fold.message is not None:
                async for text in self.live_texts(poll):
                    yield text
            self.grew = await poll
        finally:
            if not poll.done():
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError, RPCError):
                    await poll

    def begin(self, events: list[BaseEvent], final: bool) -> list[str] | None:
        """Where the client is settled, the events that re-open what is open there; None
        while that cannot be told yet."""
        start = self.start_point(events, final)
        if start is None:
            return None
        self.sent, self.streamed = start
        return [sse(e) for e in reopening(open_at(events[: self.sent]))]

    def catch_up(self, events: list[BaseEvent]) -> Iterable[str]:
        """The events the client does not have yet."""
        for n in range(self.sent if self.sent is not None else len(events), len(events)):
            event = events[n]
            for shown in render(event, self.streamed):
                yield sse(shown, Cursor(n + 1).event_id(self.plan.tag))
            if (
                isinstance(event, TextMessageContentEvent | TextMessageEndEvent)
                and self.streamed
                and event.message_id == self.streamed.message_id
            ):
                self.streamed = None  # the reply has come: nothing more of it streams
            self.sent = n + 1

    async def live_texts(self, poll: asyncio.Future[bool]) -> AsyncIterator[str]:
        """The reply in flight as it streams, until the history poll answers."""
        message, step = self.chain.fold.message, self.chain.fold.in_flight
        if message is None or step is None or self.sent is None:
            return
        if self.live is None or self.live.message != message:
            held = self.streamed
            self.live = _Live(message, held.chars if held and held.message_id == message else 0)
        while not poll.done():
            done, _ = await asyncio.wait({poll}, timeout=self.plan.live_seconds)
            if done:
                return
            delta = self.live.take(await self.heartbeat(), step)
            if delta:
                self.streamed = Streamed(message, self.live.chars, self.live.text)
                event = TextMessageContentEvent(message_id=message, delta=delta)
                yield sse(event, Cursor(self.sent, self.live.chars).event_id(self.plan.tag))

    async def heartbeat(self) -> dict[str, Any] | None:
        with contextlib.suppress(RPCError, TypeError, ValueError):
            return await self.client.live_text(self.plan.workflow_id)
        return None

    async def interrupts(self, *, idle: bool) -> list[Interrupt]:
        """What the run waits for a person to settle, once the client has seen it asked: its
        own requests as its history announces them; when the history is quiet, every request
        it lists (a delegated child's never shows in this run's history)."""
        wid, decided = self.plan.workflow_id, self.plan.decided
        announced = set(self.chain.fold.requests) - decided
        if (not announced and not idle) or self.chain.fold.message is not None:
            return []
        view = await self.client.pending(wid)
        waiting: list[OpenRequest] = [*view.approvals, *view.questions]
        chosen = [
            r
            for r in waiting
            if r.request_id in announced or (idle and r.request_id not in decided)
        ]
        key, resolve = self.plan.key, self.chain.resolve
        return await asyncio.to_thread(
            lambda: [interrupt_for(r, wid, key, resolve) for r in chosen]
        )

    def finished(self, **fields: Any) -> RunFinishedEvent:
        return RunFinishedEvent(thread_id=self.plan.thread_id, run_id=self.plan.run_id, **fields)

    def ending(self, ending: Ending | None) -> BaseEvent:
        if ending is None:
            return RunErrorEvent(message="the run ended outside Capstan", code="ended")
        if ending.reason == "completed":
            result: Any = ending.answer
            if ending.answer is not None and ending.output_format == "json":
                with contextlib.suppress(ValueError):
                    result = json.loads(ending.answer)
            return self.finished(outcome=RunFinishedSuccessOutcome(), result=result)
        if ending.reason == "cancelled":
            return self.finished(outcome=RunFinishedCancelledOutcome())
        detail = f": {ending.error}" if ending.error else ""
        return RunErrorEvent(
            message=_line(f"the run ended ({ending.reason}){detail}"), code=ending.reason
        )


async def agui_stream(client: CapstanClient, plan: Attach) -> AsyncIterator[str]:
    """The SSE messages of one AG-UI response (see the module's docstring)."""
    started = RunStartedEvent(
        thread_id=plan.thread_id,
        run_id=plan.run_id,
        protocol_version=PROTOCOL_VERSION,
        metadata={"capstan": {"run_id": plan.workflow_id}},
    )
    yield sse(started)
    try:
        async for message in _Follow(client, plan).messages():
            yield message
    except (RPCError, TemporalConnectError):
        problem = "the Temporal service is not reachable; send the request again to go on"
        yield sse(RunErrorEvent(message=problem, code="temporal_unavailable"))
    except CodecError as exc:  # key ids and setting names only, never key material
        yield sse(
            RunErrorEvent(
                message=_line(f"this server cannot decrypt the run: {exc}"), code="codec_key"
            )
        )
    except StoreError:  # its text names the store's root: the server log has it
        log.exception("AG-UI stream of %s could not read the content store", plan.workflow_id)
        yield sse(RunErrorEvent(message="the content store could not be read", code="store"))
    except Exception:
        log.exception("AG-UI stream of %s failed", plan.workflow_id)
        problem = "the stream failed; the server log has the details"
        yield sse(RunErrorEvent(message=problem, code="internal"))
