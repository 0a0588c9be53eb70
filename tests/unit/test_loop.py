"""The pure loop driven by scripted outcomes: no Temporal, no IO."""

from __future__ import annotations

import pytest

from capstan.core import loop
from capstan.core.activity_io import ModelReply
from capstan.core.effects import (
    CallModel,
    CancelRequested,
    ContinueAsNew,
    Finish,
    LoadTools,
    ModelFailed,
    ModelReplied,
    RunTools,
    ToolsFinished,
    ToolsLoaded,
)
from capstan.core.messages import ToolCall
from capstan.core.spec import FinishMode, RunSpec, TerminalReason
from capstan.core.tooling import ToolFailed, ToolSucceeded
from tests.unit.scripted import Driver, call, catalog, reply, started

SPEC = RunSpec(task="do it", max_steps=5)


def test_finish_tool_completes_with_answer() -> None:
    d = Driver([reply("", call("list_dir")), reply("", call("finish", answer="42"))])
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert result.output == "42"
    assert result.steps == 2
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 1
    d.assert_complete()


def test_first_effect_loads_tools_then_calls_model_with_task() -> None:
    d = Driver([reply("", call("finish", answer="x"))])
    d.run(SPEC)
    assert isinstance(d.effects[0], LoadTools)
    first = d.model_inputs[0].request
    assert [m.origin for m in first.new_messages] == ["system", "task"]
    assert first.conversation is None and first.step == 1


def test_text_mode_completes_on_text_reply() -> None:
    d = Driver([reply("the answer")])
    result, _ = d.run(SPEC.model_copy(update={"finish_mode": FinishMode.TEXT}))
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert result.output == "the answer"


def test_tool_mode_nudges_text_reply_then_accepts_finish() -> None:
    d = Driver([reply("thinking aloud"), reply("", call("finish", answer="ok"))])
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    nudge = d.model_inputs[1].request.new_messages
    assert [m.origin for m in nudge] == ["nudge"]
    assert "finish" in str(nudge[0].content)


def test_tool_mode_nudges_are_bounded() -> None:
    d = Driver([reply("a"), reply("b"), reply("c")])
    result, _ = d.run(SPEC.model_copy(update={"max_nudges": 2}))
    assert result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert result.error is not None and "finish_not_called" in result.error
    d.assert_complete()


def test_progress_resets_the_nudge_count() -> None:
    script = [
        reply("a"),
        reply("", call("list_dir")),
        reply("b"),
        reply("", call("finish", answer="y")),
    ]
    result, _ = Driver(script).run(SPEC.model_copy(update={"max_nudges": 1}))
    assert result.terminal_reason is TerminalReason.COMPLETED


def test_max_steps_ends_the_run() -> None:
    d = Driver([reply("", call("list_dir", call_id=f"c{i}")) for i in range(3)])
    result, _ = d.run(SPEC.model_copy(update={"max_steps": 3}))
    assert result.terminal_reason is TerminalReason.MAX_STEPS
    assert result.steps == 3
    d.assert_complete()


def test_model_failure_ends_with_model_error() -> None:
    result, _ = Driver([ModelFailed(error="HTTP 401: bad key", error_type="ModelAuthError")]).run(
        SPEC
    )
    assert result.terminal_reason is TerminalReason.MODEL_ERROR
    assert result.error == "HTTP 401: bad key"


def test_tool_error_becomes_observation() -> None:
    state = started(SPEC)
    state = loop.apply(state, model_replied(reply("", call("read_file", path="x"))))
    effect = loop.next_effect(state)
    assert isinstance(effect, RunTools)
    failed = ToolFailed(call_id="c1", failure="error", error="FileNotFoundError: x")
    state = loop.apply(state, ToolsFinished(results=(failed,)))
    (msg,) = state.conversation.pending
    assert msg.role == "tool" and msg.tool_call_id == "c1"
    assert msg.content == "Error (error): FileNotFoundError: x"


def test_unknown_tool_is_observed_without_running() -> None:
    d = Driver([reply("", call("rm_rf", path="/")), reply("", call("finish", answer="ok"))])
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    run_tools = [e for e in d.effects if isinstance(e, RunTools)]
    assert run_tools[0].calls == ()
    (obs,) = d.model_inputs[1].request.new_messages
    assert "unknown tool 'rm_rf'" in str(obs.content)


def test_parallel_calls_run_together_and_observe_in_order() -> None:
    calls = [call("read_file", call_id=f"c{i}", path=f"f{i}") for i in range(3)]
    d = Driver([reply("", *calls), reply("", call("finish", answer="ok"))])
    d.run(SPEC)
    run_tools = next(e for e in d.effects if isinstance(e, RunTools))
    assert [c.call_id for c in run_tools.calls] == ["c0", "c1", "c2"]
    assert run_tools.concurrency == 4
    assert [c.idempotency_key for c in run_tools.calls] == [f"run-1/1/c{i}" for i in range(3)]
    obs = d.model_inputs[1].request.new_messages
    assert [m.tool_call_id for m in obs] == ["c0", "c1", "c2"]


def test_finish_with_other_calls_runs_the_others_and_refuses_finish() -> None:
    d = Driver(
        [
            reply("", call("list_dir", call_id="a"), call("finish", call_id="b", answer="early")),
            reply("", call("finish", answer="late")),
        ]
    )
    result, _ = d.run(SPEC)
    assert result.output == "late"
    obs = d.model_inputs[1].request.new_messages
    assert [m.tool_call_id for m in obs] == ["a", "b"]
    assert "not accepted" in str(obs[1].content)


@pytest.mark.parametrize("args", ["{not json", '{"answer": 3}', "[]"])
def test_bad_finish_arguments_are_observed(args: str) -> None:
    bad = ToolCall(id="f", name="finish", arguments=args)
    d = Driver([reply("", bad), reply("", call("finish", answer="fine"))])
    result, _ = d.run(SPEC)
    assert result.output == "fine"
    (obs,) = d.model_inputs[1].request.new_messages
    assert "invalid_arguments" in str(obs.content)


def test_cancel_ends_run_at_next_boundary() -> None:
    state = started(SPEC)
    state = loop.apply(state, CancelRequested(reason="operator said so"))
    effect = loop.next_effect(state)
    assert isinstance(effect, Finish)
    assert effect.result.terminal_reason is TerminalReason.CANCELLED
    assert effect.result.error == "operator said so"


def test_continue_as_new_every_n_steps_keeps_the_conversation() -> None:
    script = [reply("", call("list_dir", call_id=f"c{i}", path=str(i)), step=i) for i in range(5)]
    script.append(reply("", call("finish", answer="ok")))
    spec = SPEC.model_copy(update={"max_steps": 10, "continue_as_new_every": 2})
    d = Driver(script)
    result, state = d.run(spec)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert sum(isinstance(e, ContinueAsNew) for e in d.effects) == 2
    assert state.segment.continued == 2 and result.continued == 2
    # after a continue-as-new the next call still carries the conversation head
    after = d.model_inputs[2].request
    assert after.conversation is not None and after.new_messages


def test_continue_suggested_by_history() -> None:
    state = started(SPEC)
    assert isinstance(loop.next_effect(state, continue_suggested=True), CallModel)
    state = loop.apply(state, model_replied(reply("", call("list_dir"))))
    state = loop.apply(state, ToolsFinished(results=(ToolSucceeded(call_id="c1", output="."),)))
    assert isinstance(loop.next_effect(state, continue_suggested=True), ContinueAsNew)


def test_outcome_in_wrong_phase_raises() -> None:
    state = loop.initial_state(SPEC, "r")
    with pytest.raises(loop.IllegalTransitionError):
        loop.apply(state, ToolsFinished(results=()))


def loop_tools_loaded() -> ToolsLoaded:
    return ToolsLoaded(catalog=catalog())


def model_replied(r: ModelReply) -> ModelReplied:
    return ModelReplied(reply=r)
