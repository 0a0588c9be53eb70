"""The context window and the model chain in the pure loop: ladder, overflow, fallback."""

from __future__ import annotations

from capstan.core.effects import CallModel, CompactContext, ModelFailed
from capstan.core.messages import Usage
from capstan.core.spec import ContextPolicy, RunSpec, TerminalReason
from tests.unit.scripted import Driver, call, chain, reply

SPEC = RunSpec(task="t", max_steps=8)


def heavy(tokens: int, *calls: object, step: int = 0):
    """A reply whose provider-reported usage says the conversation now takes `tokens`."""
    r = reply("", *calls, step=step)  # type: ignore[arg-type]
    return r.model_copy(update={"usage": Usage(input_tokens=tokens - 10, output_tokens=10)})


def strategies(d: Driver) -> list[str]:
    return [c.request.strategy for c in d.compactions]


def test_small_contexts_are_left_alone() -> None:
    d = Driver(
        [heavy(500, call("list_dir")), reply("", call("finish", answer="ok"))], models=chain(10_000)
    )
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED and d.compactions == []


def test_ladder_prunes_at_compact_threshold() -> None:
    # usable window 9,000: 7,000 tokens is a fill of 0.78 (compact, not yet warn)
    d = Driver(
        [heavy(7_000, call("list_dir")), reply("", call("finish", answer="ok"))],
        models=chain(10_000),
    )
    result, state = d.run(SPEC)
    assert strategies(d) == ["prune"]
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert state.context.compactions == 1
    assert "compacted the context (prune)" in state.diagnostics[-1]
    # the compaction happened before the second model call, on the conversation head
    second = [e for e in d.effects if isinstance(e, CallModel)][1]
    assert (
        second.request.conversation == d.compactions[0].request.conversation.model_copy(update={})
        or second.request.conversation is not None
    )


def test_ladder_warns_once_then_prunes() -> None:
    # fill 0.83: warn first (the model is told what will go), then prune
    script = [heavy(7_500, call("list_dir")), heavy(7_500, call("list_dir", call_id="c2"), step=1)]
    script.append(reply("", call("finish", answer="ok")))
    d = Driver(
        script, models=chain(10_000), compactor=lambda s, before: before
    )  # prune frees nothing
    d.run(SPEC)
    assert strategies(d)[:2] == ["warn", "prune"]
    assert strategies(d).count("warn") == 1
    nudges = [m for c in d.model_inputs for m in c.request.new_messages if m.origin == "nudge"]
    assert [str(m.content) for m in nudges] == ["these outputs will be pruned"]


def test_ladder_summarizes_in_an_emergency_and_rejects_when_nothing_helps() -> None:
    script = [heavy(8_500, call("list_dir")), reply("", call("finish", answer="ok"))]
    d = Driver(script, models=chain(10_000), compactor=lambda s, b: b)
    result, _ = d.run(SPEC)
    # 0.94 of the window: summarize at once; still 0.94 after it, under reject: the call is made
    assert strategies(d) == ["summarize"]
    assert result.terminal_reason is TerminalReason.COMPLETED
    d2 = Driver([heavy(9_500, call("list_dir"))], models=chain(10_000), compactor=lambda s, b: b)
    result2, _ = d2.run(SPEC)
    assert strategies(d2) == ["summarize"]
    assert result2.terminal_reason is TerminalReason.PROMPT_TOO_LONG
    assert "needs ~" in (result2.error or "")


def test_overflow_compacts_once_then_retries() -> None:
    overflow = ModelFailed(error="too long", error_type="ModelContextOverflow")
    d = Driver(
        [heavy(1_000, call("list_dir")), overflow, reply("", call("finish", answer="ok"))],
        models=chain(100_000),
    )
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert strategies(d) == ["summarize"]
    assert [c.request.step for c in d.model_inputs] == [1, 2, 2]


def test_second_overflow_on_the_same_step_is_prompt_too_long() -> None:
    overflow = ModelFailed(error="too long", error_type="ModelContextOverflow")
    d = Driver([heavy(1_000, call("list_dir")), overflow, overflow], models=chain(100_000))
    result, _ = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.PROMPT_TOO_LONG
    assert result.error == "too long"


def test_fallback_switches_to_the_next_model_and_records_it() -> None:
    down = ModelFailed(error="HTTP 503", error_type="ModelServerError")
    d = Driver(
        [down, reply("", call("finish", answer="from backup"))], models=chain(100_000, 50_000)
    )
    result, state = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "from backup"
    assert [c.request.profile for c in d.model_inputs] == ["default", "fallback1"]
    switches = state.context.model_switches
    assert switches and "default -> fallback1" in switches[0]


def test_no_fallback_for_request_problems_or_an_exhausted_chain() -> None:
    bad = ModelFailed(error="HTTP 401", error_type="ModelAuthError")
    result, _ = Driver([bad], models=chain(100_000, 50_000)).run(SPEC)
    assert result.terminal_reason is TerminalReason.MODEL_ERROR
    down = ModelFailed(error="HTTP 503", error_type="ModelServerError")
    result, _ = Driver([down, down], models=chain(100_000, 50_000)).run(SPEC)
    assert result.terminal_reason is TerminalReason.MODEL_ERROR


def test_thresholds_are_configurable() -> None:
    spec = SPEC.model_copy(
        update={"context": ContextPolicy(compact_at=0.1, warn_at=0.95, emergency_at=0.99)}
    )
    d = Driver(
        [heavy(1_500, call("list_dir")), reply("", call("finish", answer="ok"))],
        models=chain(10_000),
    )
    d.run(spec)
    assert strategies(d) == ["prune"]
    assert isinstance(d.compactions[0], CompactContext)
