"""Typed results in the pure core (issue 29): `finish` takes the output schema, an answer is
checked against it with each failing place named as a JSON path, refusals are bounded, and
whatever the schema accepts is stored as the same JSON value."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from pydantic import ValidationError

from capstan.core.models import ModelChain, ModelInfo
from capstan.core.output import (
    MAX_ANSWER_CHARS,
    answer_json,
    check_answer,
    finish_parameters,
    strict_subset,
)
from capstan.core.schemas import check
from capstan.core.spec import (
    MAX_OUTPUT_SCHEMA_BYTES,
    Budgets,
    FinishMode,
    GuardPolicy,
    RunSpec,
    TerminalReason,
)
from tests.unit.scripted import Driver, call, reply

INVOICE = {
    "type": "object",
    "properties": {
        "number": {"type": "string", "pattern": "^INV-[0-9]+$"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1},
    },
    "required": ["number", "items"],
    "additionalProperties": False,
    "$defs": {
        "item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["sku", "quantity"],
        }
    },
}
GOOD = {"number": "INV-1", "items": [{"sku": "a", "quantity": 2}]}
BAD = {"number": "1", "items": [{"sku": "a", "quantity": "two"}], "extra": True}


def typed(**fields: Any) -> RunSpec:
    return RunSpec(**{"task": "invoice", "max_steps": 6, "output_schema": INVOICE, **fields})


def test_finish_takes_the_schema_with_its_definitions_at_the_top() -> None:
    parameters = finish_parameters(INVOICE)
    assert parameters["properties"]["answer"]["required"] == ["number", "items"]
    assert "$defs" not in parameters["properties"]["answer"]
    assert parameters["$defs"] == INVOICE["$defs"]
    assert check(parameters, {"answer": GOOD}).errors == ()
    assert check(parameters, {"answer": BAD}).errors != ()


def test_each_failing_place_is_a_json_path() -> None:
    checked = check_answer(INVOICE, json.dumps({"answer": BAD}))
    assert checked.answer == answer_json(BAD)
    joined = " | ".join(checked.errors)
    assert "$.number:" in joined and "$.items[0].quantity:" in joined
    assert "'extra' unexpected" in joined


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [("{not json", "not valid JSON"), ('{"text": 1}', "field `answer`"), ("[1]", "`answer`")],
)
def test_unreadable_arguments_are_an_error_too(arguments: str, problem: str) -> None:
    checked = check_answer(INVOICE, arguments)
    assert checked.answer is None and problem in checked.errors[0]


def test_an_answer_sent_as_a_json_string_is_taken_when_the_string_is_it() -> None:
    checked = check_answer(INVOICE, json.dumps({"answer": json.dumps(GOOD)}))
    assert checked.errors == () and json.loads(checked.answer or "") == GOOD


def test_the_loop_refuses_by_path_then_completes_with_json() -> None:
    d = Driver([reply("", call("finish", answer=BAD)), reply("", call("finish", answer=GOOD))])
    result, state = d.run(typed())
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert result.output_format == "json" and json.loads(str(result.output)) == GOOD
    refusal = d.model_inputs[1].request.new_messages[-1]
    assert refusal.role == "tool" and "$.items[0].quantity" in str(refusal.content)
    assert "2 more attempts" in str(refusal.content)
    assert state.guards.invalid_outputs == 1


def test_refusals_are_bounded_then_the_run_ends_output_invalid() -> None:
    d = Driver([reply("", call("finish", answer=BAD))] * 2)
    result, _ = d.run(typed(guards=GuardPolicy(output_attempts=2)))
    assert result.terminal_reason is TerminalReason.OUTPUT_INVALID
    assert result.output_format == "text" and json.loads(str(result.output)) == BAD
    assert result.error is not None and "2 answers" in result.error and "$.number" in result.error
    assert result.usage.model_calls == 2


def test_the_finish_hook_still_sees_a_valid_answer_once() -> None:
    d = Driver(
        [reply("", call("finish", answer=GOOD))] * 2,
        finish_guard=lambda answer: "check the totals" if not d.checked else None,
    )
    result, _ = d.run(typed())
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert d.checked == [answer_json(GOOD)]  # refused once, then not asked again


def test_a_text_run_never_asks_the_worker() -> None:
    d = Driver([reply("", call("finish", answer="plain"))])
    result, _ = d.run(RunSpec(task="t"))
    assert result.output == "plain" and result.output_format == "text"


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "no-such-type"}, "output_schema"),
        ({"$ref": "https://example.com/s.json"}, "output_schema"),
        ({"enum": list(range(MAX_OUTPUT_SCHEMA_BYTES))}, "bytes of JSON"),
    ],
)
def test_a_schema_that_cannot_be_used_is_refused_at_start(
    schema: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        RunSpec(task="t", output_schema=schema)


#: schemas of the shapes a typed result takes (objects of scalars, arrays and enums)
_SCALARS = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer", "minimum": -5, "maximum": 10**12},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"enum": ["a", "b", 3]},
        {"type": "string", "pattern": "^[a-z]{1,8}$"},
    ]
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.builds(lambda s: {"type": "array", "items": s, "maxItems": 4}, inner),
        st.dictionaries(st.from_regex(r"\A[a-z]{1,6}\Z"), inner, min_size=1, max_size=4).map(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            }
        ),
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), _VALUES)
def test_what_the_schema_accepts_is_accepted_and_stored_as_given(
    data: st.DataObject, schema: dict[str, Any]
) -> None:
    RunSpec(task="t", output_schema=schema)  # every generated schema is usable
    instance = data.draw(from_schema(schema))
    checked = check_answer(schema, json.dumps({"answer": instance}))
    assert checked.errors == (), checked.errors
    assert checked.answer is not None and json.loads(checked.answer) == instance
    assert checked.answer == answer_json(instance)  # byte for byte: nothing reordered


def test_a_typed_run_answers_through_finish() -> None:
    with pytest.raises(ValidationError, match="output_schema needs finish_mode 'tool'"):
        RunSpec(task="t", output_schema=INVOICE, finish_mode=FinishMode.TEXT)


def test_strict_mode_only_for_schemas_it_enforces_exactly() -> None:
    closed: dict[str, Any] = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/t"}},
        },
        "required": ["n", "tags"],
        "additionalProperties": False,
        "$defs": {"t": {"type": "string", "enum": ["a", "b"]}},
    }
    assert strict_subset(finish_parameters(closed))
    open_object = {**closed, "additionalProperties": True}
    optional = {**closed, "required": ["n"]}
    unsupported = {
        **closed,
        "properties": {**closed["properties"], "n": {"type": "integer", "not": {}}},
    }
    for schema in (open_object, optional, unsupported, INVOICE):
        assert not strict_subset(finish_parameters(schema))


def test_the_local_models_choice_schema_keeps_the_references() -> None:
    """The bundled model is constrained to the offered calls' schema: a typed finish's
    `#/$defs/...` references must resolve from that schema's root."""
    from capstan.activities.providers.openai_chat import tool_choice_schema
    from capstan.core.tooling import ToolSpec

    finish = ToolSpec(name="finish", description="", parameters=finish_parameters(INVOICE))
    other = ToolSpec(name="list_dir", description="", parameters={"type": "object"})
    schema = tool_choice_schema([other, finish])
    call_ = {"name": "finish", "arguments": {"answer": GOOD}}
    assert check(schema, call_).errors == ()
    wrong = {"name": "finish", "arguments": {"answer": BAD}}
    assert check(schema, wrong).errors != ()


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"child": {"$ref": "#"}}}, "must name one"),
        ({"properties": {"a": {"type": "string"}, "b": {"$ref": "#/properties/a"}}}, "must name"),
        ({"$ref": "#/$defs/missing", "$defs": {}}, "names no definition"),
        ({"$id": "https://example.com/s", "type": "object"}, "$id is not supported"),
        ({"$dynamicRef": "#meta"}, "$dynamicRef is not supported"),
    ],
)
def test_references_must_survive_the_move_under_finish(
    schema: dict[str, Any], problem: str
) -> None:
    """The schema sits under `finish`'s `answer`: only references to its own definitions
    (which move with it) still point where they did."""
    with pytest.raises(ValidationError, match=re.escape(problem)):
        RunSpec(task="t", output_schema=schema)


def test_more_attempts_than_the_argument_breaker_allows_are_honoured() -> None:
    answers = [{**BAD, "number": str(i)} for i in range(5)]  # not the same call: that breaks
    d = Driver([reply("", call("finish", answer=a)) for a in answers])
    result, _ = d.run(typed(max_steps=8, guards=GuardPolicy(output_attempts=5)))
    assert result.terminal_reason is TerminalReason.OUTPUT_INVALID, result.error
    assert result.usage.model_calls == 5


def test_a_valid_answer_that_spends_the_budget_still_completes() -> None:
    small = ModelInfo(
        profile="default", provider="openai", model="m", context_window=100_000, max_output_tokens=2
    )
    d = Driver([reply("", call("finish", answer=GOOD))], models=ModelChain(models=(small,)))
    # the call may spend 2 of 3 output tokens; the reply spends 5
    result, _ = d.run(typed(budgets=Budgets(max_output_tokens=3)))
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert result.output_format == "json"


def test_checking_costs_what_the_data_costs_and_stays_bounded() -> None:
    many = list(range(10_000))
    assert check({"type": "array", "uniqueItems": True}, many).errors == ()  # linear
    assert check({"type": "array", "uniqueItems": True}, [1, 1.0]).errors != ()
    assert check({"type": "array", "uniqueItems": True}, [1, True]).errors == ()
    big_enum = {"type": "array", "items": {"enum": list(range(9_000))}}
    assert check(big_enum, list(range(6_000))).refused is not None  # 54M comparisons: refused
    (error,) = check({"type": "integer"}, "x" * 1_000_000).errors
    assert len(error) < 400  # jsonschema repeats the value; the message is cut


def test_an_answer_too_deep_or_too_large_is_an_error_not_a_crash() -> None:
    deep = '{"answer": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert check_answer({"type": "array"}, deep).errors == ("the answer nests too deeply",)
    huge = json.dumps({"answer": "x" * (MAX_ANSWER_CHARS + 1)})
    assert "too large" in check_answer({"type": "string"}, huge).errors[0]


def test_strict_mode_needs_every_object_closed() -> None:
    for schema in (
        {"type": "object"},
        {"type": "object", "additionalProperties": {"type": "integer"}},
    ):
        assert not strict_subset(finish_parameters(schema))
