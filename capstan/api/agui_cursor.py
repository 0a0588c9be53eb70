"""Where an AG-UI client is in a run's events, and how a response picks up from there.

A run's durable events form a list that only grows (`agui_events`); a client's place in it is a
position (how many it has) plus, while a reply streams in, how much of that reply's text it has.
Two ways to learn it, so a reconnect neither loses nor repeats anything:

- **Event ids.** Every durable event goes out with the SSE id `TAG.N` (`N` events delivered;
  `TAG` names the Capstan run, so an id of an earlier run of the thread is not mistaken for
  one of this run's); streamed reply text with `TAG.N.C` (and `C` characters of the open reply).
  `Last-Event-ID` sends it back. Ids fit the 20 bytes the server takes for that header.
- **The client's messages.** An AG-UI client sends the whole conversation it holds with every
  request (`@ag-ui/client` applies each event to its messages as it arrives). The position is
  after the last event those messages show (a message, its text, a tool call, its arguments, a
  result); the open reply's text the client holds is compared with the reply itself.

A response that starts in the middle first re-opens what is open at its position (the step, the
reply, a tool call: AG-UI checks that each run's events nest) with the ids the client already
has, so nothing is added twice to its messages; one that ends waiting for a person closes them
the same way. These events carry no id: the position is unchanged.

Pure: events and messages in, positions and events out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    Message,
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

__all__ = [
    "RETRIED_REPLY_SEPARATOR",
    "Cursor",
    "Open",
    "Streamed",
    "ahead",
    "closing",
    "from_messages",
    "held_texts",
    "known_ids",
    "open_at",
    "parse_event_id",
    "render",
    "reopening",
    "streamed_at",
]

_EVENT_ID = re.compile(r"^([0-9a-f]{6})\.(\d{1,9})(?:\.(\d{1,9}))?$")
#: what a reply's text becomes when the client holds a different start of it (a model call
#: retried after part of its reply had streamed): its streamed part stays, the reply follows
RETRIED_REPLY_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Cursor:
    """`position` durable events delivered, and `chars` characters of the reply open there."""

    position: int
    chars: int = 0

    def event_id(self, tag: str) -> str:
        return f"{tag}.{self.position}" + (f".{self.chars}" if self.chars else "")


def parse_event_id(raw: str, tag: str) -> Cursor | None:
    """The cursor a `Last-Event-ID` names; None for another run's id. ValueError: not an id."""
    match = _EVENT_ID.fullmatch(raw.strip())
    if match is None:
        raise ValueError("Last-Event-ID must be an event id this server sent (TAG.N or TAG.N.C)")
    if match[1] != tag:
        return None
    return Cursor(int(match[2]), int(match[3] or 0))


@dataclass(frozen=True)
class Streamed:
    """Text of the open reply the client already holds: `chars` characters, and the text
    itself when known (then it is checked against the reply; else trusted to start it)."""

    message_id: str
    chars: int
    text: str | None = None


@dataclass
class Open:
    """What is open after some events: steps, text messages, tool calls (id, name, parent)."""

    steps: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    calls: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def open_at(events: Sequence[BaseEvent]) -> Open:
    state = Open()
    for e in events:
        if isinstance(e, StepStartedEvent):
            state.steps.append(e.step_name)
        elif isinstance(e, StepFinishedEvent) and e.step_name in state.steps:
            state.steps.remove(e.step_name)
        elif isinstance(e, TextMessageStartEvent):
            state.messages.append(e.message_id)
        elif isinstance(e, TextMessageEndEvent) and e.message_id in state.messages:
            state.messages.remove(e.message_id)
        elif isinstance(e, ToolCallStartEvent):
            state.calls[e.tool_call_id] = (e.tool_call_name, e.parent_message_id)
        elif isinstance(e, ToolCallEndEvent):
            state.calls.pop(e.tool_call_id, None)
    return state


def reopening(state: Open) -> list[BaseEvent]:
    """The events that re-open `state` at the start of a response (ids the client has)."""
    out: list[BaseEvent] = [StepStartedEvent(step_name=s) for s in state.steps]
    out += [TextMessageStartEvent(message_id=m, role="assistant") for m in state.messages]
    out += [
        ToolCallStartEvent(tool_call_id=c, tool_call_name=name, parent_message_id=parent)
        for c, (name, parent) in state.calls.items()
    ]
    return out


def closing(state: Open) -> list[BaseEvent]:
    """The events that close `state` before a response ends waiting (innermost first)."""
    out: list[BaseEvent] = [ToolCallEndEvent(tool_call_id=c) for c in reversed(state.calls)]
    out += [TextMessageEndEvent(message_id=m) for m in reversed(state.messages)]
    out += [StepFinishedEvent(step_name=s) for s in reversed(state.steps)]
    return out


def render(event: BaseEvent, streamed: Streamed | None) -> list[BaseEvent]:
    """`event` as sent to a client holding `streamed` of the reply it belongs to: a reply's
    text less what the client has (all of it after a different start, see
    `RETRIED_REPLY_SEPARATOR`); any other event as it is."""
    if (
        not isinstance(event, TextMessageContentEvent)
        or streamed is None
        or streamed.message_id != event.message_id
        or streamed.chars == 0
    ):
        return [event]
    full = event.delta
    same = (
        full.startswith(streamed.text) if streamed.text is not None else len(full) >= streamed.chars
    )
    delta = full[streamed.chars :] if same else RETRIED_REPLY_SEPARATOR + full
    return [event.model_copy(update={"delta": delta})] if delta else []


def held_texts(messages: Sequence[Message]) -> dict[str, str]:
    """The text of each of a client's messages, by id ("" for one without text)."""
    texts: dict[str, str] = {}
    for m in messages:
        content = getattr(m, "content", None)
        texts[m.id] = content if isinstance(content, str) else ""
    return texts


class _Holdings:
    """What a client's messages show of the events."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.texts = held_texts(messages)
        self.arguments: dict[str, str] = {}
        for m in messages:
            if isinstance(m, AssistantMessage):
                for call in m.tool_calls or []:
                    self.arguments[call.id] = call.function.arguments

    def text_done(self, message_id: str, full: str) -> bool:
        held = self.texts.get(message_id)
        return held is not None and (held == full or held.endswith(RETRIED_REPLY_SEPARATOR + full))

    def shows(self, e: BaseEvent, contents: dict[str, str]) -> bool:
        if isinstance(e, TextMessageStartEvent):
            return e.message_id in self.texts
        if isinstance(e, TextMessageContentEvent):
            return self.text_done(e.message_id, e.delta)
        if isinstance(e, TextMessageEndEvent):
            held = self.texts.get(e.message_id)
            return held is not None and self.text_done(e.message_id, contents.get(e.message_id, ""))
        if isinstance(e, ToolCallStartEvent):
            return e.tool_call_id in self.arguments
        if isinstance(e, ToolCallArgsEvent):
            return self.arguments.get(e.tool_call_id) == e.delta
        if isinstance(e, ToolCallEndEvent):
            return e.tool_call_id in self.arguments and self.arguments[e.tool_call_id] == (
                contents.get(e.tool_call_id, "")
            )
        if isinstance(e, ToolCallResultEvent):
            return e.message_id in self.texts
        return False  # steps leave nothing in the messages


def known_ids(events: Sequence[BaseEvent]) -> set[str]:
    """Every message and tool call id the events name."""
    ids: set[str] = set()
    for e in events:
        for name in ("message_id", "tool_call_id"):
            value = getattr(e, name, None)
            if isinstance(value, str):
                ids.add(value)
    return ids


def ahead(events: Sequence[BaseEvent], messages: Sequence[Message], key: str) -> bool:
    """Whether the client holds ids of the run `key` (see `agui_events.chain_key`) that the
    events do not name yet: it has seen more of the run than was read so far."""
    held = {m.id for m in messages}
    for m in messages:
        if isinstance(m, AssistantMessage):
            held.update(call.id for call in m.tool_calls or [])
    mine = {i for i in held if i.startswith(f"{key}:")}
    return bool(mine - known_ids(events))


def from_messages(
    events: Sequence[BaseEvent], messages: Sequence[Message]
) -> tuple[int, Streamed | None]:
    """The position after the last event `messages` show, and what they hold of the reply
    open there."""
    held = _Holdings(messages)
    contents: dict[str, str] = {}
    position = 0
    for n, e in enumerate(events):
        if isinstance(e, TextMessageContentEvent):
            contents[e.message_id] = e.delta
        elif isinstance(e, ToolCallArgsEvent):
            contents[e.tool_call_id] = e.delta
        if held.shows(e, contents):
            position = n + 1
    return position, streamed_at(events[:position], held.texts)


def streamed_at(
    delivered: Sequence[BaseEvent], texts: dict[str, str], chars: int = 0
) -> Streamed | None:
    """What the client holds of the reply open after `delivered`: its text from `texts` (the
    client's messages) when they have it, else `chars` characters (an event id's count)."""
    state = open_at(delivered)
    if not state.messages:
        return None
    message = state.messages[-1]
    text = texts.get(message)
    if text:
        return Streamed(message, len(text), text)
    return Streamed(message, chars) if chars else None
