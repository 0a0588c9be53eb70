"""Turn quality, circuit breakers, finish guards and budgets in the pure loop."""

from __future__ import annotations

from datetime import timedelta

import pytest

from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.models import ModelChain, ModelInfo, Prices
from capstan.core.spec import Budgets, FinishMode, GuardPolicy, RunSpec, TerminalReason
from capstan.core.steering import BudgetGrant
from tests.unit.scripted import Driver, call, reply

SPEC = RunSpec(task="t", max_steps=30)


def with_reasoning(text: str, reasoning: str):
    r = reply(text)
    return r.model_copy(update={"message": r.message.model_copy(update={"reasoning": reasoning})})


def truncated(*calls: ToolCall):
    return reply("", *calls).model_copy(update={"stop_reason": "length"})


def nudges(d: Driver) -> list[str]:
    return [
        str(m.content)
        for c in d.model_inputs
        for m in c.request.new_messages
        if m.origin == "nudge"
    ]


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (reply(""), "empty"),
        (with_reasoning("", "hmm, let me think"), "only reasoned"),
        (reply('{"name": "list_dir", "arguments": {}}'), "wrote a tool call as text"),
        (reply("<tool_call>list_dir</tool_call>"), "wrote a tool call as text"),
    ],
)
def test_turn_problems_get_a_nudge(bad, needle: str) -> None:
    d = Driver([bad, reply("", call("finish", answer="ok"))])
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert needle in nudges(d)[0]


def test_turn_problems_are_bounded_and_named() -> None:
    d = Driver([reply(""), reply(""), reply("")])
    result, _ = d.run(SPEC.model_copy(update={"max_nudges": 2}))
    assert result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert result.error is not None and result.error.startswith("empty_reply")


def test_text_mode_does_not_complete_on_an_empty_or_printed_call_reply() -> None:
    spec = SPEC.model_copy(update={"finish_mode": FinishMode.TEXT})
    d = Driver([reply('{"tool": "read_file", "path": "a"}'), reply("real answer")])
    result, _ = d.run(spec)
    assert result.output == "real answer"


def test_json_that_names_no_tool_is_a_plain_answer() -> None:
    spec = SPEC.model_copy(update={"finish_mode": FinishMode.TEXT})
    result, _ = Driver([reply('{"answer": 42}')]).run(spec)
    assert result.output == '{"answer": 42}'


def test_identical_calls_nudge_at_3_abort_at_5() -> None:
    d = Driver([reply("", call("list_dir", call_id=f"c{i}")) for i in range(5)])
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert result.error is not None and result.error.startswith("identical_call")
    assert sum("same call with the same arguments" in n for n in nudges(d)) == 1
    assert result.steps == 5


def test_truncated_tool_calls_are_not_run_and_abort_at_3() -> None:
    d = Driver([truncated(call("write_file", path="a", content="x" * 10)) for _ in range(3)])
    result, _ = d.run(SPEC.model_copy(update={"auto_approve": True}))
    assert all(not e.calls for e in d.tool_inputs)
    assert result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert result.error is not None and result.error.startswith("truncated_tool_calls")
    obs = d.model_inputs[1].request.new_messages[0]
    assert "cut off at the output limit" in str(obs.content)


def test_argument_errors_on_one_tool_abort_at_3() -> None:
    script = [reply("", call("read_file", call_id=f"c{i}", wrong=i)) for i in range(3)]
    result, _ = Driver(script).run(SPEC)
    assert result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert result.error is not None and result.error.startswith("argument_errors")


def test_fruitless_calls_nudge_at_5_abort_at_8() -> None:
    script = [reply("", call("list_dir", call_id=f"c{i}", path=f"d{i}")) for i in range(8)]
    d = Driver(script, tool=lambda name, args: "")
    result, _ = d.run(SPEC)
    assert result.error is not None and result.error.startswith("fruitless_calls")
    assert sum("returned (almost) nothing" in n for n in nudges(d)) == 1


def test_similar_results_nudge_at_8_abort_at_12() -> None:
    script = [reply("", call("list_dir", call_id=f"c{i}", path=f"d{i}")) for i in range(12)]
    d = Driver(script, tool=lambda name, args: "x" * (200 + len(args)))
    result, _ = d.run(SPEC)
    assert result.error is not None and result.error.startswith("similar_results")
    assert sum("going in circles" in n for n in nudges(d)) == 1


def test_breaker_thresholds_are_configurable() -> None:
    spec = SPEC.model_copy(update={"guards": GuardPolicy(identical_call_abort=2)})
    result, _ = Driver([reply("", call("list_dir", call_id=f"c{i}")) for i in range(2)]).run(spec)
    assert result.error is not None and result.error.startswith("identical_call")


def test_finish_guard_refuses_once_with_its_reason() -> None:
    spec = SPEC.model_copy(update={"guards": GuardPolicy(finish_refusal="run the tests first")})
    d = Driver([reply("", call("finish", answer="a")), reply("", call("finish", answer="b"))])
    result, _ = d.run(spec)
    assert result.output == "b"
    obs = d.model_inputs[1].request.new_messages[0]
    assert "run the tests first" in str(obs.content)


def test_finish_guard_requires_tools() -> None:
    spec = SPEC.model_copy(update={"guards": GuardPolicy(finish_requires=("read_file",))})
    script = [
        reply("", call("finish", answer="too early")),
        reply("", call("read_file", path="a")),
        reply("", call("finish", answer="done")),
    ]
    d = Driver(script)
    result, _ = d.run(spec)
    assert result.output == "done"
    assert "read_file" in str(d.model_inputs[1].request.new_messages[0].content)


def test_finalize_warning_once_near_the_step_limit() -> None:
    spec = SPEC.model_copy(update={"max_steps": 4})
    d = Driver([reply("", call("list_dir", call_id=f"c{i}", path=str(i))) for i in range(4)])
    d.run(spec)
    assert sum("Wrap up now" in n for n in nudges(d)) == 1


PRICED = ModelChain(
    models=(
        ModelInfo(
            profile="default",
            provider="openai",
            model="m",
            context_window=100_000,
            max_output_tokens=1_000,
            prices=Prices(input=1.0, output=2.0),
        ),
    )
)


def priced(text_calls: int = 1):
    r = reply("", call("list_dir", call_id=f"c{text_calls}", path=str(text_calls)))
    return r.model_copy(
        update={"usage": Usage(input_tokens=1000, output_tokens=100, cost_usd=0.0012)}
    )


@pytest.mark.parametrize(
    ("budgets", "name"),
    [
        (Budgets(max_tool_calls=2), "tool_calls"),
        (Budgets(max_input_tokens=2500), "input_tokens"),
        (Budgets(max_output_tokens=1500), "output_tokens"),
        (Budgets(max_cost_usd=0.004), "cost_usd"),
    ],
)
def test_budgets_end_the_run_naming_the_budget(budgets: Budgets, name: str) -> None:
    d = Driver([priced(i) for i in range(10)], models=PRICED)
    result, _ = d.run(SPEC.model_copy(update={"budgets": budgets}))
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert result.error is not None and result.error.startswith(f"budget {name} exhausted")
    assert len(d.model_inputs) < 10


def test_a_call_that_would_cross_the_budget_is_not_made() -> None:
    # 1,000 output tokens are reserved for each call: after one reply (100 used) a second call
    # would need 1,100 of the 1,050 allowed, so it is not made
    d = Driver([priced(i) for i in range(5)], models=PRICED)
    d.run(SPEC.model_copy(update={"budgets": Budgets(max_output_tokens=1050)}))
    assert len(d.model_inputs) == 1


def test_wall_time_budget_uses_workflow_time() -> None:
    def slow_human(state):
        return [timedelta(minutes=10)]

    d = Driver([reply("", call("write_file", path="a", content="b"))], human=slow_human)
    result, _ = d.run(SPEC.model_copy(update={"budgets": Budgets(max_wall_seconds=120)}))
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert "wall_seconds" in (result.error or "")


def test_waiting_for_a_budget_grant() -> None:
    grants = iter([[BudgetGrant(id="g1", budget="tool_calls", amount=2)]])
    d = Driver(
        [priced(1), priced(2), reply("", call("finish", answer="ok"))],
        models=PRICED,
        human=lambda s: next(grants),
    )
    spec = SPEC.model_copy(update={"budgets": Budgets(max_tool_calls=1, wait_for_grant=True)})
    result, state = d.run(spec)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert state.budget.extra == {"tool_calls": 2.0}


def test_usage_and_cost_sum_over_accepted_replies_only() -> None:
    d = Driver([priced(1), priced(2), reply("", call("finish", answer="ok"))], models=PRICED)
    result, _ = d.run(SPEC)
    assert result.usage.cost_usd == pytest.approx(0.0024)
    assert result.usage.input_tokens == 2010


def test_large_text_reply_with_tool_syntax_uses_its_preview() -> None:
    ref = BlobRef(sha256="a" * 64, size=5000, preview='{"name": "list_dir"}')
    msg = Message(role="assistant", content=ref)
    from capstan.core.guards import turn_problem

    assert turn_problem(msg, ("list_dir",)) == "printed_tool_call"


def test_calls_beyond_the_tool_call_budget_are_not_run() -> None:
    many = reply("", *(call("list_dir", call_id=f"c{i}", path=str(i)) for i in range(4)))
    d = Driver([many], models=PRICED)
    result, _ = d.run(SPEC.model_copy(update={"budgets": Budgets(max_tool_calls=2)}))
    assert [c.call_id for c in d.tool_inputs[0].calls] == ["c0", "c1"]
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert result.usage.tool_calls == 2


def test_worker_finish_hook_refuses_once_then_accepts() -> None:
    guard = lambda answer: None if "42" in answer else "the answer must cite the log"  # noqa: E731
    d = Driver(
        [
            reply("", call("finish", answer="no idea")),
            reply("", call("finish", answer="still no idea")),
        ],
        finish_guard=guard,
    )
    result, _ = d.run(SPEC)
    assert d.checked == ["no idea"]  # asked once; the second finish is accepted as is
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "still no idea"
    obs = d.model_inputs[1].request.new_messages[0]
    assert "the answer must cite the log" in str(obs.content)


def test_worker_finish_hook_accepts_a_good_answer_at_once() -> None:
    d = Driver([reply("", call("finish", answer="42 an hour"))], finish_guard=lambda a: None)
    result, _ = d.run(SPEC)
    assert result.output == "42 an hour" and d.checked == ["42 an hour"]
