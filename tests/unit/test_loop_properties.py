"""Property tests: whatever the model does, a run ends exactly once and in bounded steps."""

from __future__ import annotations

import json
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.core import loop
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CallModel,
    ContinueAsNew,
    DescribeModel,
    Finish,
    LoadTools,
    ModelDescribed,
    ModelFailed,
    ModelReplied,
    Outcome,
    RunTools,
    Steered,
    ToolsFinished,
    ToolsLoaded,
)
from capstan.core.messages import ToolCall
from capstan.core.spec import Budgets, FinishMode, RunSpec
from capstan.core.state import RunState
from capstan.core.steering import Decision, LiveMessage, PauseRequest, ResumeRequest
from capstan.core.tooling import ToolFailed, ToolSucceeded
from tests.unit.scripted import T0, catalog, chain, reply

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
texts = st.one_of(
    st.text(max_size=10),
    st.just(""),
    st.just('{"name": "list_dir", "arguments": {}}'),
    st.just("<tool_call>read_file</tool_call>"),
)


def _turn(text: str, cs: tuple[ToolCall, ...], cut: bool, reasoning: str) -> object:
    r = reply(text, *cs)
    message = r.message.model_copy(update={"reasoning": reasoning or None})
    return r.model_copy(update={"message": message, "stop_reason": "length" if cut else "stop"})


turns = st.one_of(
    st.builds(_turn, texts, calls, st.booleans(), st.sampled_from(["", "thinking"])),
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
    tool_budget=st.one_of(st.none(), st.integers(0, 6)),
    human=st.lists(
        st.sampled_from(["approve", "deny", "always", "expire", "bad-hash", "pause", "message"]),
        min_size=1,
        max_size=10,
    ),
)
def test_every_run_ends_once_within_bounds(
    script: list[object],
    max_steps: int,
    max_nudges: int,
    mode: FinishMode,
    tool_fails: bool,
    every: int,
    tool_budget: int | None,
    human: list[str],
) -> None:
    spec = RunSpec(
        task="t",
        max_steps=max_steps,
        max_nudges=max_nudges,
        finish_mode=mode,
        continue_as_new_every=every,
        budgets=Budgets(max_tool_calls=tool_budget),
    )
    state = loop.initial_state(spec, "r")
    model = _Model(script)
    waits = 0
    now = T0
    finished = None
    for _ in range(40 * (max_steps + 2)):
        state = loop.apply(state, Boundary(now=now))
        effect = loop.next_effect(state)
        if isinstance(effect, AwaitInput):
            action = human[waits % len(human)]
            waits += 1
            for item in _human_inputs(state, action, waits):
                if isinstance(item, timedelta):
                    now += item
                else:
                    state = loop.apply(state, Steered(input=item))
            continue
        if isinstance(effect, Finish):
            finished = effect.result
            break
        if isinstance(effect, ContinueAsNew):
            state = loop.carry_over(state)
            continue
        outcome: Outcome
        if isinstance(effect, LoadTools):
            outcome = ToolsLoaded(catalog=catalog())
        elif isinstance(effect, DescribeModel):
            outcome = ModelDescribed(chain=chain())
        elif isinstance(effect, CallModel):
            outcome = model.reply()
        else:
            assert isinstance(effect, RunTools)
            assert not state.turn.approvals and not state.steering.paused
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
    assert model.calls <= max_steps
    assert finished.steps == model.replies
    assert finished.error != ""  # every non-completed end says why
    # after the end, the loop only ever says the same Finish again
    again = loop.next_effect(state)
    assert isinstance(again, Finish) and again.result == finished


def _human_inputs(state: RunState, action: str, n: int) -> list[object]:
    """What a (possibly careless) human does when the run waits; half a day passes each time,
    so an approval nobody gets right expires after a bounded number of waits."""
    return [*_act(state, action, n), timedelta(hours=12)]


def _act(state: RunState, action: str, n: int) -> list[object]:
    if state.steering.paused:
        return [ResumeRequest(id=f"r{n}")]
    if not state.turn.approvals:
        return [timedelta(days=2)]  # questions or anything else: let time settle it
    request = state.turn.approvals[0]
    if action == "expire":
        return [timedelta(days=2)]
    if action == "bad-hash":
        return [Decision(request_id=request.request_id, args_hash="0" * 64, action="approve")]
    if action == "pause":
        return [PauseRequest(id=f"p{n}")]
    if action == "message":
        return [LiveMessage(id=f"m{n}", text="hello")]
    return [Decision(request_id=request.request_id, args_hash=request.args_hash, action=action)]  # type: ignore[arg-type]


class _Model:
    """Plays the script in a loop and counts calls and replies."""

    def __init__(self, script: list[object]) -> None:
        self.script = script
        self.calls = self.replies = 0

    def reply(self) -> Outcome:
        turn = self.script[self.calls % len(self.script)]
        self.calls += 1
        if isinstance(turn, ModelFailed):
            return turn
        self.replies += 1
        return ModelReplied(reply=turn)  # type: ignore[arg-type]
