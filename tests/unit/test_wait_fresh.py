"""A run about to wait for a person continues as new first once its execution has taken a step
(`capstan.core.planner.waits_fresh`), so delivering the decision to an evicted run replays a
few events. Pure: the workflow gates it with `wait-fresh-v1` (tests/integration/test_wait_fresh)."""

from __future__ import annotations

from capstan.core import loop
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CallModel,
    ContinueAsNew,
    ModelReplied,
    RunTools,
    Steered,
)
from capstan.core.limits import SIGNALS_BEFORE_CONTINUE, HistoryGauge
from capstan.core.spec import RunSpec
from capstan.core.state import RunState
from capstan.core.steering import Decision, LiveMessage, PauseRequest
from tests.unit.scripted import T0, call, reply, started

SPEC = RunSpec(task="t", max_steps=6)


def _asking(question: bool = False) -> RunState:
    """A run whose first reply (one step taken) asks for approval, or asks the user."""
    state = started(SPEC)
    if question:
        asked = call("ask_user", question="which?", options=["a", "b"])
    else:
        asked = call("write_file", path="a.txt", content="x")
    state = loop.apply(state, ModelReplied(reply=reply("", asked)))
    return loop.apply(state, Boundary(now=T0))


def _fresh(state: RunState) -> RunState:
    """The state the fresh execution starts from, at its first boundary."""
    return loop.apply(loop.carry_over(state), Boundary(now=T0))


def test_a_run_that_took_a_step_waits_for_a_decision_in_a_fresh_execution() -> None:
    for state in (_asking(), _asking(question=True)):
        assert state.segment.steps == 1
        assert isinstance(loop.next_effect(state), AwaitInput)  # the rule is off by default
        effect = loop.next_effect(state, wait_fresh=True)
        assert effect == ContinueAsNew(before_wait=True)
        # the fresh execution waits: no step taken there, so the rule cannot loop
        fresh = _fresh(state)
        assert fresh.segment.steps == 0 and fresh.turn == state.turn
        assert isinstance(loop.next_effect(fresh, wait_fresh=True), AwaitInput)


def test_inputs_while_waiting_take_no_step_and_so_never_continue_again() -> None:
    fresh = _fresh(_asking())
    for item in (
        LiveMessage(id="m1", text="hold on"),
        PauseRequest(id="p1"),
        LiveMessage(id="m2", text="ok"),
    ):
        fresh = loop.apply(fresh, Steered(input=item))
        assert isinstance(loop.next_effect(fresh, wait_fresh=True), AwaitInput)
    assert fresh.segment.steps == 0


def test_a_run_waiting_for_nothing_but_resume_or_at_its_first_step_does_not_continue() -> None:
    state = started(SPEC)
    assert isinstance(loop.next_effect(state, wait_fresh=True), CallModel)
    paused = loop.apply(state, Steered(input=PauseRequest(id="p1")))
    assert isinstance(loop.next_effect(paused, wait_fresh=True), AwaitInput)
    # a step taken, nothing to decide, paused: a pause is often short, and resumes go on here
    asking = _asking()
    (request,) = asking.turn.approvals
    decision = Decision(
        id="d1", action="approve", request_id=request.request_id, args_hash=request.args_hash
    )
    decided = loop.apply(asking, Steered(input=decision))
    paused = loop.apply(decided, Steered(input=PauseRequest(id="p2")))
    assert paused.segment.steps == 1 and not paused.turn.approvals
    assert isinstance(loop.next_effect(paused, wait_fresh=True), AwaitInput)


def test_the_history_limits_come_first_and_say_so() -> None:
    crowded = HistoryGauge(signals=SIGNALS_BEFORE_CONTINUE)
    effect = loop.next_effect(_asking(), history=crowded, wait_fresh=True)
    assert effect == ContinueAsNew(before_wait=False)


def test_once_decided_the_run_goes_on_in_the_fresh_execution() -> None:
    fresh = _fresh(_asking())
    (request,) = fresh.turn.approvals
    decision = Decision(
        id="d1", action="approve", request_id=request.request_id, args_hash=request.args_hash
    )
    decided = loop.apply(fresh, Steered(input=decision))
    effect = loop.next_effect(loop.apply(decided, Boundary(now=T0)), wait_fresh=True)
    assert isinstance(effect, RunTools) and effect.calls[0].name == "write_file"
