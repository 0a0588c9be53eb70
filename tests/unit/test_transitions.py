"""The loop owns every transition: a run's end is recorded in its state, in one place."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
from mypy import api as mypy_api

from capstan.core import loop, transitions
from capstan.core.effects import (
    AwaitInput,
    Boundary,
    CancelRequested,
    Finish,
    ModelFailed,
    ModelReplied,
    Steered,
)
from capstan.core.messages import Usage
from capstan.core.spec import Budgets, RunSpec, TerminalReason
from capstan.core.state import Ending, Turn
from capstan.core.steering import CancelRequest, StepGrant
from tests.unit.scripted import T0, Driver, call, chain, reply, started

SPEC = RunSpec(task="t", max_steps=3)
CORE = Path(loop.__file__).parent


def test_max_steps_end_is_in_the_status() -> None:
    d = Driver([reply("", call("list_dir", call_id=f"c{i}", path=str(i))) for i in range(3)])
    result, state = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.MAX_STEPS
    view = state.status()
    assert view.phase == "finished" and view.terminal_reason is TerminalReason.MAX_STEPS
    assert view.error == "stopped after 3 steps" and view.waiting_for == []
    assert loop.status(state) == view


def test_cancel_signal_end_is_in_the_status_after_the_next_boundary() -> None:
    state = loop.apply(started(SPEC), Steered(input=CancelRequest(id="x", reason="enough")))
    assert state.status().phase == "thinking"  # a request: the boundary settles it
    state = loop.apply(state, Boundary(now=T0))
    view = state.status()
    assert view.phase == "finished" and view.terminal_reason is TerminalReason.CANCELLED
    assert view.error == "enough"
    effect = loop.next_effect(state)
    assert isinstance(effect, Finish) and effect.result.error == "enough"


def test_temporal_cancellation_ends_at_once_with_an_earlier_signal_reason() -> None:
    state = loop.apply(started(SPEC), Steered(input=CancelRequest(id="x", reason="first")))
    state = loop.apply(state, CancelRequested(reason="cancellation requested through Temporal"))
    assert state.status().terminal_reason is TerminalReason.CANCELLED
    assert state.status().error == "first"
    assert loop.apply(state, CancelRequested()) == state  # ends once


def test_budget_end_is_in_the_status() -> None:
    priced = reply("", call("list_dir")).model_copy(
        update={"usage": Usage(input_tokens=1000, output_tokens=100)}
    )
    d = Driver([priced, priced])
    result, state = d.run(SPEC.model_copy(update={"budgets": Budgets(max_input_tokens=1500)}))
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    view = state.status()
    assert view.phase == "finished" and view.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert view.error is not None and view.error.startswith("budget input_tokens exhausted")


def test_wall_time_end_while_waiting_for_approval_closes_the_requests() -> None:
    d = Driver(
        [reply("", call("write_file", path="a", content="b"))],
        human=lambda state: [timedelta(hours=3)],
    )
    _, state = d.run(SPEC.model_copy(update={"budgets": Budgets(max_wall_seconds=3600)}))
    assert state.status().terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert state.status().waiting_for == [] and state.pending_view().approvals == []


def test_prompt_too_long_end_is_in_the_status() -> None:
    big = reply("", call("list_dir")).model_copy(
        update={"usage": Usage(input_tokens=9_490, output_tokens=10)}
    )
    d = Driver([big], models=chain(10_000), compactor=lambda strategy, before: before)
    result, state = d.run(SPEC)
    assert result.terminal_reason is TerminalReason.PROMPT_TOO_LONG
    assert state.status().phase == "finished"
    assert state.status().terminal_reason is TerminalReason.PROMPT_TOO_LONG


def test_zero_step_grant_ends_the_run_at_once() -> None:
    spec = SPEC.model_copy(update={"max_steps": 1, "wait_for_steps_grant": True})
    state = loop.apply(started(spec), ModelReplied(reply=reply("thinking")))
    state = loop.apply(state, Boundary(now=T0))
    assert isinstance(loop.next_effect(state), AwaitInput)
    state = loop.apply(state, Steered(input=StepGrant(id="g", steps=0)))
    assert state.status().terminal_reason is TerminalReason.MAX_STEPS


def test_model_error_end_is_in_the_status() -> None:
    _, state = Driver([ModelFailed(error="HTTP 401", error_type="ModelAuthError")]).run(SPEC)
    assert state.status().phase == "finished"
    assert state.status().terminal_reason is TerminalReason.MODEL_ERROR


def test_deciding_without_the_boundary_fold_is_an_interpreter_bug() -> None:
    state = loop.apply(started(SPEC), Steered(input=CancelRequest(id="x")))
    with pytest.raises(loop.IllegalTransitionError, match="fold Boundary"):
        loop.next_effect(state)
    assert loop.status(state).phase == "thinking"  # the query never raises


def test_moves_outside_the_table_raise() -> None:
    state = started(SPEC)
    with pytest.raises(transitions.IllegalTransitionError):
        transitions.observe(state)  # thinking -> thinking
    acting = transitions.act(state, Turn())
    with pytest.raises(transitions.IllegalTransitionError):
        transitions.act(acting, Turn())
    ended = transitions.end(acting, Ending(reason=TerminalReason.FAILED, error="x"))
    for move in (transitions.think, transitions.observe):
        with pytest.raises(transitions.IllegalTransitionError):
            move(ended)
    with pytest.raises(transitions.IllegalTransitionError):
        transitions.end(ended, Ending(reason=TerminalReason.COMPLETED))


SNIPPET = """
from dataclasses import replace
from capstan.core.state import RunState

def fine(state: RunState) -> RunState:
    return replace(state, turn=replace(state.turn, decided=()))

def misspelt(state: RunState) -> RunState:
    return replace(state, turn=replace(state.turn, desided=()))

def mistyped(state: RunState) -> RunState:
    return replace(state, step="3")
"""


def test_a_misspelt_or_mistyped_update_fails_type_checking(tmp_path: Path) -> None:
    """What `model_copy(update={...})` let through: pydantic ignores an unknown key at run
    time, so the type checker is the guard."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    out, _, code = mypy_api.run(["--strict", "--no-error-summary", str(snippet)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert code == 1 and len(errors) == 2, out
    assert "snippet.py:9:" in errors[0] and '"desided"' in errors[0]
    assert "snippet.py:12:" in errors[1] and '"step"' in errors[1]


# The rule, kept by reading the source ------------------------------------------------------


def _writes(tree: ast.AST, fields: set[str]) -> list[int]:
    """Lines of `replace(...)` or `RunState(...)` calls that set one of `fields`."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _name(node.func) in {"replace", "RunState"}
        and any(k.arg in fields for k in node.keywords)
    ]


def _copies(tree: ast.AST) -> list[int]:
    """Lines of `.model_copy(...)` calls: string-keyed updates nothing checks."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _name(node.func) == "model_copy"
    ]


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_only_transitions_write_phase_and_ending(path: Path) -> None:
    if path.name == "transitions.py":
        return
    tree = ast.parse(path.read_text())
    assert _writes(tree, {"phase", "ending"}) == [], f"{path.name} writes phase or ending"


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_no_string_keyed_updates_in_the_core(path: Path) -> None:
    copies = _copies(ast.parse(path.read_text()))
    assert copies == [], f"{path.name}: use dataclasses.replace (mypy checks its fields)"


def test_the_source_checks_can_fail() -> None:
    bad = ast.parse(
        "dataclasses.replace(state, phase='finished')\n"
        "RunState(spec=spec, run_id='r', ending=None)\n"
        "RunStatus(phase=state.phase)\n"
        "x.model_copy(update={'phase': 1})"
    )
    assert _writes(bad, {"phase", "ending"}) == [1, 2]
    assert _copies(bad) == [4]
