"""The durable part of an AG-UI stream: a Capstan run's history as AG-UI events, in order.

What a run did is in its Temporal history; this module reads the decoded entries of one
continue-as-new chain (one Capstan run) and says it in AG-UI's words:

    call_model scheduled     TOOL_CALL_RESULT for calls answered in its input (a denial, an
                             answer to a question), STEP_FINISHED of the step before,
                             STEP_STARTED `step N`, TEXT_MESSAGE_START of the reply
    call_model completed     TEXT_MESSAGE_CONTENT (the whole reply), TEXT_MESSAGE_END, then per
                             tool call TOOL_CALL_START / TOOL_CALL_ARGS / TOOL_CALL_END
    call_model failed        TEXT_MESSAGE_END (the next call of the step opens a new message)
    run_tool completed       TOOL_CALL_RESULT (the tool's output, or its error)
    the run ended            TOOL_CALL_RESULT for calls it left unanswered (the `finish` that
                             ended it), STEP_FINISHED, the answer as a text message

Each event sits at the history event that caused it, so the list only grows at its end as the
run goes on: an event's index is a position that never changes, across continue-as-new and
worker or server restarts, which is what a resumed stream counts on (`agui_cursor`). Ids are
derived from the chain's key and the history, so every stream of the run names a message alike.

Requests a person must settle are tracked here too (announced in the memo, settled by a
decision or an answer) but are not events: an AG-UI run ends on them (`agui_stream`). The
RUN_* events belong to one HTTP response and are never produced here.

Pure: entries in, events out; the text behind blob refs comes through the `resolve` callable
the caller passes (it reads the blob store).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ag_ui.core import (
    BaseEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from capstan.audit.history import Entry
from capstan.core.activity_names import ActivityName
from capstan.core.content import Text
from capstan.core.spec import RunResult
from capstan.core.steering import ApprovalRequest, Question
from capstan.core.workflow_io import OpenRequests

__all__ = [
    "RESULT_MAX_CHARS",
    "Ending",
    "Fold",
    "OpenRequest",
    "Resolve",
    "chain_key",
    "derive",
    "step_name",
    "tool_call_id",
]

Resolve = Callable[[Text], str]
OpenRequest = ApprovalRequest | Question
#: a tool result shown in the chat keeps this much (the transcript keeps it whole)
RESULT_MAX_CHARS = 16_000

Kind = Literal["model_called", "model_answered", "model_failed", "tool_done", "requests", "input"]


def chain_key(first_execution: str) -> str:
    """The short, stable name of one Capstan run (its chain's first execution) in AG-UI ids."""
    return hashlib.sha256(first_execution.encode()).hexdigest()[:12]


def step_name(step: int) -> str:
    return f"step {step}"


def tool_call_id(key: str, step: int, call_id: str) -> str:
    """The AG-UI id of the model's call `call_id` of `step` (unique in the thread)."""
    return f"{key}:c{step}.{call_id}"


@dataclass(frozen=True)
class Ending:
    """How the run ended, for the response's last event."""

    reason: str
    error: str | None = None
    answer: str | None = None
    output_format: str = "text"


@dataclass
class Fold:
    """What the derivation carries from one execution of the chain to the next."""

    step: int | None = None  # the step open now
    message: str | None = None  # the reply being written (a model call in flight)
    in_flight: int | None = None  # the step of that model call
    calls: dict[str, tuple[str, str]] = field(default_factory=dict)  # raw id: (AG-UI id, name)
    last_text: str = ""
    requests: dict[str, OpenRequest] = field(default_factory=dict)  # waiting for a person
    ending: Ending | None = None


def _capped(text: str) -> str:
    if len(text) <= RESULT_MAX_CHARS:
        return text
    more = len(text) - RESULT_MAX_CHARS
    return f"{text[:RESULT_MAX_CHARS]}\n… ({more} more characters in the run's transcript)"


def _occurrences(entries: list[Entry]) -> list[tuple[int, int, Kind, Entry]]:
    """The entries that say something, each at the history event it happened at."""
    out: list[tuple[int, int, Kind, Entry]] = []
    for n, e in enumerate(entries):
        if e.kind == "activity" and e.name == ActivityName.CALL_MODEL:
            out.append((e.event_id, n, "model_called", e))
            if e.finished_event_id:
                done: Kind = "model_answered" if hasattr(e.result, "message") else "model_failed"
                out.append((e.finished_event_id, n, done, e))
        elif e.kind == "activity" and e.name == ActivityName.RUN_TOOL and e.finished_event_id:
            out.append((e.finished_event_id, n, "tool_done", e))
        elif e.kind == "open_requests" and isinstance(e.data, OpenRequests):
            out.append((e.event_id, n, "requests", e))
        elif e.kind in ("signal", "update", "run_ended"):
            out.append((e.event_id, n, "input", e))
    out.sort(key=lambda o: (o[0], o[1]))
    return out


class _Deriver:
    """One execution's events, folded on from the state the chain's earlier ones left."""

    def __init__(self, key: str, index: int, fold: Fold, resolve: Resolve) -> None:
        self.key, self.index, self.fold, self.resolve = key, index, fold, resolve
        self.out: list[BaseEvent] = []

    def result(self, raw: str, content: str) -> None:
        agui_id, _ = self.fold.calls.pop(raw)
        self.out.append(
            ToolCallResultEvent(
                message_id=f"{agui_id}.result",
                tool_call_id=agui_id,
                content=content,
                role="tool",
            )
        )

    def model_called(self, e: Entry) -> None:
        for m in e.data.new_messages:
            if m.role == "tool" and m.tool_call_id in self.fold.calls:
                self.result(m.tool_call_id, _capped(self.resolve(m.content)))
        step: int = e.data.step
        if self.fold.step is not None and self.fold.step != step:
            self.out.append(StepFinishedEvent(step_name=step_name(self.fold.step)))
        if self.fold.step != step:
            self.out.append(StepStartedEvent(step_name=step_name(step)))
        message = f"{self.key}:m{self.index}.{e.event_id}"
        self.out.append(TextMessageStartEvent(message_id=message, role="assistant"))
        self.fold.step, self.fold.message, self.fold.in_flight = step, message, step

    def model_answered(self, e: Entry) -> None:
        message, reply = self.fold.message, e.result.message
        if message is None:
            return
        text = self.resolve(reply.content)
        if text:
            self.out.append(TextMessageContentEvent(message_id=message, delta=text))
        self.out.append(TextMessageEndEvent(message_id=message))
        self.fold.message, self.fold.in_flight, self.fold.last_text = None, None, text
        for c in reply.tool_calls:
            agui_id = tool_call_id(self.key, e.data.step, c.id)
            self.fold.calls[c.id] = (agui_id, c.name)
            self.out.append(
                ToolCallStartEvent(
                    tool_call_id=agui_id, tool_call_name=c.name, parent_message_id=message
                )
            )
            arguments = self.resolve(c.arguments)
            if arguments:
                self.out.append(ToolCallArgsEvent(tool_call_id=agui_id, delta=arguments))
            self.out.append(ToolCallEndEvent(tool_call_id=agui_id))

    def model_failed(self, e: Entry) -> None:
        if self.fold.message is not None:
            self.out.append(TextMessageEndEvent(message_id=self.fold.message))
        self.fold.message, self.fold.in_flight = None, None

    def tool_done(self, e: Entry) -> None:
        if e.data.call_id not in self.fold.calls:
            return
        outcome = e.result
        if getattr(outcome, "kind", None) == "succeeded":
            text = self.resolve(outcome.output)
        else:
            text = str(getattr(outcome, "error", None) or e.error or "the tool failed")
        self.result(e.data.call_id, _capped(text))

    def requests(self, e: Entry) -> None:
        announced: OpenRequests = e.data
        listed: list[OpenRequest] = [*announced.approvals, *announced.questions]
        self.fold.requests = {r.request_id: r for r in listed}

    def input(self, e: Entry) -> None:
        if e.kind == "run_ended":
            self.ended(e)
            return
        settled = getattr(e.data, "request_id", None)
        if getattr(e.data, "kind", None) in ("decision", "answer") and isinstance(settled, str):
            self.fold.requests.pop(settled, None)

    def ended(self, e: Entry) -> None:
        result = e.data if isinstance(e.data, RunResult) else None
        closed = (e.error or "ended").removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_").lower()
        reason = result.terminal_reason.value if result else closed
        for raw, (_, name) in list(self.fold.calls.items()):
            self.result(
                raw,
                f"The run ended ({reason}) with this call."
                if name == "finish"
                else f"Not run: the run ended ({reason}) before this call ran.",
            )
        self.model_failed(e)
        if self.fold.step is not None:
            self.out.append(StepFinishedEvent(step_name=step_name(self.fold.step)))
            self.fold.step = None
        answer = self.resolve(result.output) if result and result.output is not None else None
        if answer and answer.strip() != self.fold.last_text.strip():
            message = f"{self.key}:answer"
            self.out.append(TextMessageStartEvent(message_id=message, role="assistant"))
            self.out.append(TextMessageContentEvent(message_id=message, delta=answer))
            self.out.append(TextMessageEndEvent(message_id=message))
        error = result.error if result else None
        output_format = result.output_format if result else "text"
        self.fold.requests = {}
        self.fold.ending = Ending(reason, error, answer, output_format)

    def run(self, entries: list[Entry]) -> list[BaseEvent]:
        for _, _, kind, entry in _occurrences(entries):
            getattr(self, kind)(entry)
        return self.out


def derive(
    key: str,
    runs: Sequence[list[Entry]],
    resolve: Resolve,
    *,
    start: int = 0,
    fold: Fold | None = None,
) -> tuple[list[BaseEvent], Fold]:
    """The events of the executions `runs` (the chain's executions from index `start` on),
    folded on from `fold` (what the earlier executions left; a new one for the first), and
    the state they leave. `fold` is not changed."""
    state = copy.deepcopy(fold) if fold is not None else Fold()
    events: list[BaseEvent] = []
    for n, entries in enumerate(runs):
        events += _Deriver(key, start + n, state, resolve).run(entries)
    return events, state
