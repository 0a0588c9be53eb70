"""Where an AG-UI client is in a run's events (capstan.api.agui_cursor): from an event id, from
the messages it holds; what a resumed response re-opens and sends of a reply it partly has."""

from __future__ import annotations

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from capstan.api.agui_cursor import (
    RETRIED_REPLY_SEPARATOR,
    Cursor,
    Streamed,
    ahead,
    closing,
    from_messages,
    open_at,
    parse_event_id,
    render,
    reopening,
    streamed_at,
)

K = "abcdef123456"
REPLY = "Two files: a.txt and b.txt."
EVENTS: list[BaseEvent] = [
    StepStartedEvent(step_name="step 1"),  # 0
    TextMessageStartEvent(message_id=f"{K}:m1", role="assistant"),  # 1
    TextMessageContentEvent(message_id=f"{K}:m1", delta=REPLY),  # 2
    TextMessageEndEvent(message_id=f"{K}:m1"),  # 3
    ToolCallStartEvent(tool_call_id=f"{K}:c1", tool_call_name="ls", parent_message_id=f"{K}:m1"),
    ToolCallArgsEvent(tool_call_id=f"{K}:c1", delta='{"path": "."}'),  # 5
    ToolCallEndEvent(tool_call_id=f"{K}:c1"),  # 6
    ToolCallResultEvent(message_id=f"{K}:r1", tool_call_id=f"{K}:c1", content="a.txt"),  # 7
    StepFinishedEvent(step_name="step 1"),  # 8
    StepStartedEvent(step_name="step 2"),  # 9
    TextMessageStartEvent(message_id=f"{K}:m2", role="assistant"),  # 10
]


def assistant(text: str, *calls: tuple[str, str]) -> AssistantMessage:
    tool_calls = [ToolCall(id=i, function=FunctionCall(name="ls", arguments=a)) for i, a in calls]
    return AssistantMessage(id=f"{K}:m1", content=text, tool_calls=tool_calls or None)


def test_event_ids_round_trip_and_name_their_run() -> None:
    assert Cursor(17).event_id("abcdef") == "abcdef.17"
    assert Cursor(17, 40).event_id("abcdef") == "abcdef.17.40"
    assert parse_event_id("abcdef.17.40", "abcdef") == Cursor(17, 40)
    assert parse_event_id(" abcdef.3 ", "abcdef") == Cursor(3)
    assert parse_event_id("012345.3", "abcdef") is None  # an earlier run of the thread
    for bad in ("17", "abcdef.", "abcdef.1.2.3", "ABCDEF.1", "abcdef.-1", "x" * 20):
        with pytest.raises(ValueError, match="Last-Event-ID"):
            parse_event_id(bad, "abcdef")
    assert len(Cursor(999_999, 999_999).event_id("abcdef")) <= 20  # the header's limit


@pytest.mark.parametrize(
    ("messages", "position", "streamed"),
    [
        ([], 0, None),
        ([UserMessage(id="u", content="list")], 0, None),
        # the reply started and some of it streamed in: after its start, with that text
        ([assistant("Two files")], 2, Streamed(f"{K}:m1", 9, "Two files")),
        ([assistant(REPLY)], 4, None),  # the whole reply, so its end too
        ([assistant(REPLY, (f"{K}:c1", '{"pa'))], 5, None),  # a call, half its arguments
        ([assistant(REPLY, (f"{K}:c1", '{"path": "."}'))], 7, None),
        (
            [
                assistant(REPLY, (f"{K}:c1", '{"path": "."}')),
                ToolMessage(id=f"{K}:r1", tool_call_id=f"{K}:c1", content="a.txt"),
                AssistantMessage(id=f"{K}:m2"),
            ],
            11,
            None,
        ),
    ],
)
def test_the_position_the_clients_messages_show(
    messages: list[AssistantMessage], position: int, streamed: Streamed | None
) -> None:
    assert from_messages(EVENTS, messages) == (position, streamed)


def test_a_client_ahead_of_what_was_read() -> None:
    held = [assistant(REPLY), AssistantMessage(id=f"{K}:m9")]
    assert ahead(EVENTS, held, K)  # m9 is not read yet: read on before resuming
    assert not ahead(EVENTS, [assistant(REPLY), AssistantMessage(id="other:m9")], K)
    calls = [assistant(REPLY, (f"{K}:c9", "{}"))]
    assert ahead(EVENTS, calls, K)


def test_a_reply_is_sent_less_what_the_client_has() -> None:
    content = EVENTS[2]
    assert render(content, None) == [content]
    assert render(EVENTS[3], Streamed(f"{K}:m1", 9)) == [EVENTS[3]]
    rest = render(content, Streamed(f"{K}:m1", 9, "Two files"))
    assert [e.model_dump()["delta"] for e in rest] == [REPLY[9:]]
    trusted = render(content, Streamed(f"{K}:m1", 9))  # an event id's count alone
    assert [e.model_dump()["delta"] for e in trusted] == [REPLY[9:]]
    assert render(content, Streamed(f"{K}:m1", len(REPLY), REPLY)) == []
    # another start streamed (a retried call): it stays, the reply follows whole
    other = render(content, Streamed(f"{K}:m1", 5, "Three"))
    assert [e.model_dump()["delta"] for e in other] == [RETRIED_REPLY_SEPARATOR + REPLY]
    message = assistant("Three" + RETRIED_REPLY_SEPARATOR + REPLY)
    assert from_messages(EVENTS[:4], [message]) == (4, None)  # and it counts as had


def test_reopening_and_closing_nest() -> None:
    for n in range(len(EVENTS) + 1):
        state = open_at(EVENTS[:n])
        again = open_at([*EVENTS[:n], *closing(state)])
        assert again.steps == [] and again.messages == [] and again.calls == {}
        assert open_at(reopening(state)) == state
    assert [e.type.value for e in reopening(open_at(EVENTS[:5]))] == [
        "STEP_STARTED",
        "TOOL_CALL_START",
    ]
    assert [e.type.value for e in closing(open_at(EVENTS[:5]))] == [
        "TOOL_CALL_END",
        "STEP_FINISHED",
    ]


def test_an_event_ids_count_or_the_clients_text() -> None:
    assert streamed_at(EVENTS[:2], {}, 7) == Streamed(f"{K}:m1", 7)
    assert streamed_at(EVENTS[:2], {f"{K}:m1": "Two"}, 7) == Streamed(f"{K}:m1", 3, "Two")
    assert streamed_at(EVENTS[:2], {}) is None
    assert streamed_at(EVENTS[:4], {}, 7) is None  # no reply open there
