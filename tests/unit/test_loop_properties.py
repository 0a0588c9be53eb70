"""Property tests: whatever the model does, a run ends exactly once and in bounded steps."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from capstan import loop
from capstan.effects import (
    CallModel,
    ContinueAsNew,
    Finish,
    LoadTools,
    ModelFailed,
    ModelReplied,
    Outcome,
    RunTools,
    ToolsFinished,
    ToolsLoaded,
)
from capstan.messages import ToolCall
from capstan.spec import FinishMode, RunSpec
from capstan.tooling import ToolFailed, ToolSucceeded
from tests.unit.scripted import catalog, reply

names = st.sampled_from(["finish", "read_file", "list_dir", "bogus", "write_file"])
arguments = st.one_of(
    st.just("{}"),
    st.just('{"answer": "done"}'),
    st.text(max_size=20),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2).map(json.dumps),
)
calls = st.lists(st.tuples(names, arguments), max_size=4).map(
    lambda cs: tuple(ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(cs))
)
turns = st.one_of(
    st.builds(lambda t, cs: reply(t, *cs), st.text(max_size=10), calls),
    st.builds(lambda e: ModelFailed(error=e), st.text(max_size=10)),
)


@settings(max_examples=300, deadline=None)
@given(
    script=st.lists(turns, min_size=1, max_size=40),
    max_steps=st.integers(1, 12),
    max_nudges=st.integers(0, 3),
    mode=st.sampled_from(list(FinishMode)),
    tool_fails=st.booleans(),
    every=st.integers(1, 5),
)
def test_every_run_ends_once_within_bounds(
    script: list[object],
    max_steps: int,
    max_nudges: int,
    mode: FinishMode,
    tool_fails: bool,
    every: int,
) -> None:
    spec = RunSpec(
        task="t",
        max_steps=max_steps,
        max_nudges=max_nudges,
        finish_mode=mode,
        continue_as_new_every=every,
    )
    state = loop.initial_state(spec, "r")
    model_calls = replies = 0
    finished = None
    for _ in range(10 * (max_steps + 2)):
        effect = loop.next_effect(state)
        if isinstance(effect, Finish):
            finished = effect.result
            break
        if isinstance(effect, ContinueAsNew):
            state = loop.carry_over(state)
            continue
        outcome: Outcome
        if isinstance(effect, LoadTools):
            outcome = ToolsLoaded(catalog=catalog())
        elif isinstance(effect, CallModel):
            turn = script[model_calls % len(script)]
            model_calls += 1
            if isinstance(turn, ModelFailed):
                outcome = turn
            else:
                replies += 1
                outcome = ModelReplied(reply=turn)  # type: ignore[arg-type]
        else:
            assert isinstance(effect, RunTools)
            assert all(c.name in catalog().names and c.name != "finish" for c in effect.calls)
            outcome = ToolsFinished(
                results=tuple(
                    ToolFailed(call_id=c.call_id, failure="error", error="x")
                    if tool_fails
                    else ToolSucceeded(call_id=c.call_id, output="ok")
                    for c in effect.calls
                )
            )
        state = loop.apply(state, outcome)
    assert finished is not None, "the loop did not end"
    assert model_calls <= max_steps
    assert finished.steps == replies
    assert finished.error != ""  # every non-completed end says why
    # after the end, the loop only ever says the same Finish again
    again = loop.next_effect(state)
    assert isinstance(again, Finish) and again.result == finished
