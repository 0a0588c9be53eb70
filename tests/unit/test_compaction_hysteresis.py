"""Compaction hysteresis in the pure loop: a compaction leaves room, or the ladder climbs."""

from __future__ import annotations

from dataclasses import replace

from capstan.core import context, loop
from capstan.core.activity_io import CompactResult, ModelReply
from capstan.core.context import RELIEF
from capstan.core.messages import ToolCall, Usage
from capstan.core.spec import RunSpec, TerminalReason
from capstan.core.state import Conversation, RunState
from tests.unit.scripted import Driver, Script, call, chain, fake_ref, reply

SPEC = RunSpec(task="t", max_steps=8)
USABLE = 9_000  # chain(10_000) keeps 1,000 for the reply


def heavy(tokens: int, *calls: ToolCall, step: int = 0) -> ModelReply:
    r = reply("", *calls, step=step)
    return r.model_copy(update={"usage": Usage(input_tokens=tokens - 10, output_tokens=10)})


def strategies(d: Driver) -> list[str]:
    return [c.request.strategy for c in d.compactions]


def script(tokens: int) -> Script:
    # 0.72 of the usable window: over compact_at (0.70), under warn_at (0.80)
    return [heavy(tokens, call("list_dir")), reply("", call("finish", answer="ok"))]


def test_a_prune_that_frees_too_little_is_followed_by_a_summary_in_the_same_step() -> None:
    d = Driver(script(6_500), models=chain(10_000), compactor=lambda s, b: b - 300)
    result, state = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert strategies(d) == ["prune", "summarize"]
    assert {c.request.step for c in d.compactions} == {1}  # both before the second call
    assert state.context.compactions == 2


def test_a_prune_that_makes_room_is_enough() -> None:
    # 6,500 -> 3,000 tokens: 0.33 of the window, under RELIEF * compact_at (0.49)
    d = Driver(script(6_500), models=chain(10_000), compactor=lambda s, b: 3_000)
    d.run(SPEC)
    assert strategies(d) == ["prune"]
    assert RELIEF * SPEC.context.compact_at > 3_000 / USABLE


def test_just_under_the_threshold_is_not_enough() -> None:
    # the prune ends under compact_at but within the margin: without hysteresis it would
    # run again at the next step, and the next
    left = int(USABLE * SPEC.context.compact_at) - 100
    d = Driver(script(6_500), models=chain(10_000), compactor=lambda s, b: left)
    d.run(SPEC)
    assert strategies(d) == ["prune", "summarize"]


def test_runs_recorded_before_hysteresis_keep_their_decisions() -> None:
    d = Driver(script(6_500), models=chain(10_000), compactor=lambda s, b: b - 300)
    state = loop.initial_state(SPEC, "run-1")
    legacy = replace(state, context=replace(state.context, hysteresis=False))
    d.run(SPEC, legacy)
    assert strategies(d) == ["prune"]


def test_a_compaction_that_changed_nothing_is_noted_not_counted() -> None:
    state = loop.initial_state(SPEC, "run-1")
    same = CompactResult(strategy="prune", conversation=None, tokens_before=50, tokens_after=50)
    after = context.on_compacted(state, same)
    assert after.context.compactions == 0 and after.context.compaction_stage == 1
    assert after.diagnostics[-1] == "nothing to prune at step 0"


def _pruned(tokens: int, kept: int) -> RunState:
    """A state right after a prune this step that left `tokens`, `kept` of them unremovable."""
    state = loop.initial_state(SPEC, "run-1")
    window = replace(
        state.context,
        model_chain=chain(10_000),
        tokens=tokens,
        compacted_step=state.step,
        compaction_stage=1,
        kept_tokens=kept,
    )
    return replace(state, context=window, conversation=Conversation(head=fake_ref("head")))


def test_no_summary_when_the_kept_turns_alone_are_over_the_target() -> None:
    # 0.6 of the window after the prune; the last turns alone take 0.55: a summary cannot help,
    # so the run goes on (and prunes again when it must) instead of summarising every step
    assert context.plan(_pruned(5_400, 4_950)) is None
    assert context.plan(_pruned(5_400, 1_000)) == "summarize"
    assert context.plan(_pruned(5_400, 0)) == "summarize"  # not reported: assume it helps
