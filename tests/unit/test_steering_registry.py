"""The steering registry is the one place an input type is declared: every derived place (the
workflow's handlers, history decoding, the event stream, the CLI) must know every type in it.

Each test walks `STEERING_TYPES`, so a new input type that a derived place does not handle fails
here, not silently in `watch` or an audit.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter

from capstan.audit.events import derive_events
from capstan.audit.history import decode_history
from capstan.cli.main import build_parser
from capstan.cli.steering import input_from_args
from capstan.core.steering import (
    STEER,
    STEERING_TYPES,
    Answer,
    BudgetGrant,
    Decision,
    LiveMessage,
    SteeringBase,
    SteeringInput,
    StepGrant,
    by_signal,
    decode_input,
)
from capstan.workflows.agent import AgentWorkflow, input_of

#: One valid example of every input type; the test below fails when a type has none.
EXAMPLES: dict[type[SteeringBase], SteeringBase] = {
    Decision: Decision(request_id="r/1/c", args_hash="h", action="approve", id="d1"),
    Answer: Answer(request_id="r/1/q", text="yes", id="a1"),
    StepGrant: StepGrant(steps=3, id="s1"),
    BudgetGrant: BudgetGrant(budget="tool_calls", amount=2, id="b1"),
    LiveMessage: LiveMessage(text="hello", id="m1"),
}


def example(kind: type[SteeringBase]) -> SteeringBase:
    return EXAMPLES.get(kind) or kind(id=f"{kind.__name__}-1")


def test_wire_names_are_unique() -> None:
    kinds = [t.model_fields["kind"].default for t in STEERING_TYPES]
    signals = [t.wire.signal for t in STEERING_TYPES]
    events = [t.wire.event for t in STEERING_TYPES]
    commands = [c for t in STEERING_TYPES for c in t.wire.commands]
    for names in (kinds, signals, events, commands):
        assert len(names) == len(set(names)), names
    assert STEER not in signals


@pytest.mark.parametrize("kind", STEERING_TYPES, ids=lambda t: t.__name__)
def test_every_type_round_trips_through_the_union(kind: type[SteeringBase]) -> None:
    item = example(kind)
    assert decode_input(item.model_dump(mode="json")) == item
    assert by_signal(kind.wire.signal) is kind
    assert by_signal(kind.wire.legacy_update) is kind


def test_the_workflow_takes_every_type_on_one_signal_and_one_update() -> None:
    """Both handlers are dynamic (raw payloads, decoded by `input_of`): the SDK never decodes a
    steering payload itself, so no shape it cannot decode is dropped or misread."""
    defn = workflow._Definition.from_class(AgentWorkflow)
    assert defn is not None
    assert set(defn.signals) == {None} and set(defn.updates) == {None}
    (union, *_) = typing.get_args(SteeringInput)
    assert set(typing.get_args(union)) == set(STEERING_TYPES)
    converter = pydantic_data_converter.payload_converter
    for kind in STEERING_TYPES:
        item = example(kind)
        for name in (STEER, kind.wire.signal, kind.wire.legacy_update):
            raw = [RawValue(p) for p in converter.to_payloads([item])]
            assert input_of(name, raw, converter) == (item, "")


@pytest.mark.parametrize(
    ("name", "payloads", "problem"),
    [
        (STEER, [], "0 arguments"),
        (STEER, [{}, {}], "2 arguments"),
        (STEER, [{}], "needs a 'kind' field"),
        (STEER, [{"kind": "pause", "foo": 1}], "unknown field 'foo'"),
        (STEER, [None], "valid dictionary"),
        ("pause", [{"reasn": "x"}], "did you mean 'reason'"),
        ("launch_missiles", [{}], "unknown 'launch_missiles' ignored"),
    ],
)
def test_malformed_inputs_are_described(name: str, payloads: list[object], problem: str) -> None:
    converter = pydantic_data_converter.payload_converter
    raw = [RawValue(p) for p in converter.to_payloads(payloads)] if payloads else []
    item, said = input_of(name, raw, converter)
    assert item is None and problem in said, said
    assert "\n" not in said and len(said) < 400


def _signal_event(event_id: int, name: str, item: SteeringBase) -> HistoryEvent:
    event = HistoryEvent(
        event_id=event_id,
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        event_time=Timestamp(seconds=1_700_000_000 + event_id),
    )
    attrs = event.workflow_execution_signaled_event_attributes
    attrs.signal_name = name
    attrs.identity = "tester"
    attrs.input.payloads.extend(pydantic_data_converter.payload_converter.to_payloads([item]))
    return event


@pytest.mark.parametrize("kind", STEERING_TYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("via", ["steer", "legacy"])
def test_history_and_events_know_every_type(kind: type[SteeringBase], via: str) -> None:
    item = example(kind)
    name = STEER if via == "steer" else kind.wire.signal
    history = WorkflowHistory("run-1", History(events=[_signal_event(1, name, item)]).events)
    (entry,) = decode_history(history)
    assert entry.data == item
    assert entry.name == kind.wire.signal  # one name per type, whatever the client sent
    (event,) = derive_events([[entry]])
    assert event.kind == kind.wire.event


@pytest.mark.parametrize("kind", STEERING_TYPES, ids=lambda t: t.__name__)
def test_the_cli_has_a_command_for_every_type(kind: type[SteeringBase]) -> None:
    parser = build_parser(every=True)
    sub = next(a for a in parser._actions if a.dest == "command")
    choices: dict[str, Any] = sub.choices  # type: ignore[assignment]
    for command in kind.wire.commands:
        assert command in choices, f"no `capstan {command}` for {kind.__name__}"
    if kind.wire.custom_cli:
        return
    item = example(kind)
    (command,) = kind.wire.commands
    argv = [command, "run-1"]
    for field in kind.wire.positional:
        argv.append(str(getattr(item, field)))
    for field in kind.model_fields:
        if field not in (*kind.wire.positional, "kind", "identity") and getattr(item, field):
            argv += [f"--{field.replace('_', '-')}", str(getattr(item, field))]
    assert input_from_args(kind, parser.parse_args(argv)) == item
    # as `capstan` itself parses it: only this command's parser built in full
    assert input_from_args(kind, build_parser(command).parse_args(argv)) == item


def test_a_bad_cli_value_is_one_line() -> None:
    from capstan.cli.support import CliError

    args = build_parser("grant").parse_args(["grant", "run-1", "-3"])
    with pytest.raises(CliError, match="grant: steps: "):
        input_from_args(StepGrant, args)
