"""Delegation in the pure core: which `delegate(agent, task)` calls are valid, what each child
is given, and what its end means for the parent.

A child is the same workflow with its own spec: the definition the parent's spec embeds for
that agent, its task, a deterministic id under the parent's (`parent/agent-STEP.INDEX`, which is
also its run id, so its requests are addressed by that path), one level deeper, and budgets
carved out of what the parent has left: each budget the parent has is split evenly across the
turn's delegations (after the turn's own tool calls are set aside), and a child's own budget
only ever narrows that. What a child spends is charged to the parent when its end is folded
in, so a child can never spend more than was carved, nor the tree more than the root's budget.
A child that fails, trips a breaker or runs out of budget is an observation, never a crash.

Pure: no IO, clock or Temporal; `capstan.core.loop` calls it, `workflows.agent` performs the
`Delegation`s it plans.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from capstan.core import budgets
from capstan.core.children import DELEGATE_TOOL, MAX_CHILDREN, ChildEnded, ChildRun, Delegation
from capstan.core.messages import ToolCall, Usage
from capstan.core.spec import Budgets, RunSpec, TerminalReason
from capstan.core.state import RunState, Turn
from capstan.core.steering import BudgetName
from capstan.core.tooling import ToolFailed, ToolOutcome, ToolSucceeded

__all__ = [
    "carve",
    "charge",
    "check_turn",
    "child_spec",
    "observation",
    "offered",
    "plan",
    "remember",
]

_BUDGET_FIELDS: tuple[tuple[BudgetName, str], ...] = (
    ("tool_calls", "max_tool_calls"),
    ("input_tokens", "max_input_tokens"),
    ("output_tokens", "max_output_tokens"),
    ("cost_usd", "max_cost_usd"),
)


def offered(spec: RunSpec) -> tuple[str, ...]:
    """The agents this run may delegate to (none at the depth limit), in a stable order."""
    return tuple(sorted(spec.delegates)) if spec.depth < spec.max_depth else ()


def parse(spec: RunSpec, call: ToolCall) -> tuple[str, str] | str:
    """`(agent, task)` of a delegate call, or the problem with its arguments."""
    if not isinstance(call.arguments, str):
        return "the task is too long to delegate: give the agent a shorter task"
    try:
        args: Any = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"delegate needs {{'agent': name, 'task': text}}: not valid JSON ({exc.msg})"
    agent = args.get("agent") if isinstance(args, dict) else None
    task = args.get("task") if isinstance(args, dict) else None
    names = offered(spec)
    if not isinstance(agent, str) or agent not in names:
        return f"delegate: no agent {agent!r}; the agents are: {', '.join(names) or 'none'}"
    if not isinstance(task, str) or not task.strip():
        return "delegate needs a non-empty 'task' (the agent does not see this conversation)"
    return agent, task


def check_turn(state: RunState, turn: Turn) -> Turn:
    """Delegate calls with bad arguments are decided now (the model sees why); an approval
    asked for one of them is withdrawn, since the call cannot run whatever the decision."""
    decided = {d.call_id for d in turn.decided}
    refused: list[ToolFailed] = []
    for call in turn.calls:
        if call.name != DELEGATE_TOOL or call.id in decided:
            continue
        parsed = parse(state.spec, call)
        if isinstance(parsed, str):
            refused.append(ToolFailed(call_id=call.id, failure="invalid_arguments", error=parsed))
    if not refused:
        return turn
    gone = {r.call_id for r in refused}
    return replace(
        turn,
        decided=(*turn.decided, *refused),
        approvals=tuple(a for a in turn.approvals if a.call_id not in gone),
    )


def plan(state: RunState, calls: tuple[ToolCall, ...]) -> tuple[Delegation, ...]:
    """The children to start for the turn's approved calls (`calls`: every call that runs)."""
    delegated = [c for c in calls if c.name == DELEGATE_TOOL]
    tools = len(calls) - len(delegated)
    planned: list[Delegation] = []
    for index, call in enumerate(delegated):
        agent, task = _approved(state, call)
        workflow_id = f"{state.run_id}/{agent}-{state.step}.{index}"
        spec = child_spec(state, agent, task, workflow_id, shares=len(delegated), tools=tools)
        planned.append(
            Delegation(
                call_id=call.id, agent=agent, workflow_id=workflow_id, step=state.step, spec=spec
            )
        )
    return tuple(planned)


def _approved(state: RunState, call: ToolCall) -> tuple[str, str]:
    """The call's agent and task as approved: a reviewer's edit when it still names an agent
    and a task, else the call as the model made it (which `check_turn` found valid)."""
    edited = state.turn.approved_args.get(call.id)
    if edited is not None:
        parsed = parse(state.spec, ToolCall(id=call.id, name=call.name, arguments=edited))
        if not isinstance(parsed, str):
            return parsed
    parsed = parse(state.spec, call)
    assert not isinstance(parsed, str), "check_turn decided the invalid delegate calls"
    return parsed


def child_spec(
    state: RunState, agent: str, task: str, workflow_id: str, *, shares: int, tools: int
) -> RunSpec:
    """The child's whole spec: its definition, its task and id, one level deeper, its steps
    limited by the parent's, and budgets carved from what the parent has left."""
    definition = state.spec.delegates[agent]
    depth = state.spec.depth + 1
    update: dict[str, Any] = {
        "task": task,
        "run_id": workflow_id,
        "agent": agent,
        "depth": depth,
        "max_depth": state.spec.max_depth,
        "delegates": definition.delegates if depth < state.spec.max_depth else {},
        "max_steps": min(definition.max_steps, state.spec.max_steps),
        "budgets": carve(state, definition.budgets, shares, tools),
        "workspace": state.spec.workspace,  # the parent's tenant's (thread's) workspace
    }
    # validated (a renamed field fails here, not silently as an unchecked copy would)
    assert set(update) <= set(RunSpec.model_fields), "a RunSpec field was renamed"
    return RunSpec.model_validate({**dict(definition), **update})


def carve(state: RunState, own: Budgets, shares: int, tools: int) -> Budgets:
    """A child's budgets: for each budget the parent has, an even share of what is left once
    the parent has set aside its own part (this turn's `tools` ordinary calls, its `shares`
    delegate calls and one call more for tool calls; its next model call for tokens and
    cost, so it can read the children's ends and answer), narrowed by the child's own; wall
    time is not split (children run side by side). A child never waits for a grant: what it
    may spend was decided here."""
    kept = budgets.reserve(state)
    kept["tool_calls"] = tools + shares + 1
    caps: dict[str, float | None] = {}
    for name, field in _BUDGET_FIELDS:
        mine: float | None = getattr(own, field)
        cap = budgets.limit(state, name)
        if cap is None:
            caps[field] = mine
            continue
        left = cap - budgets.used(state, name) - kept.get(name, 0.0)
        share = max(left, 0.0) / max(shares, 1)
        if name != "cost_usd":
            share = math.floor(share)
        caps[field] = share if mine is None else min(mine, share)
    wall = budgets.left(state, "wall_seconds")
    if wall is not None and own.max_wall_seconds is not None:
        wall = min(wall, own.max_wall_seconds)
    return Budgets(
        max_tool_calls=_whole(caps["max_tool_calls"]),
        max_input_tokens=_whole(caps["max_input_tokens"]),
        max_output_tokens=_whole(caps["max_output_tokens"]),
        max_cost_usd=caps["max_cost_usd"],
        max_wall_seconds=wall if wall is not None else own.max_wall_seconds,
        wait_for_grant=False,
    )


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def observation(ended: ChildEnded) -> ToolOutcome:
    """What the parent's model sees for a child: its answer, or how and why it ended."""
    result = ended.result
    if result is None:
        error = f"the {ended.agent} agent ({ended.workflow_id}) did not run: {ended.error}"
        return ToolFailed(call_id=ended.call_id, failure="error", error=error)
    if result.terminal_reason is TerminalReason.COMPLETED:
        return ToolSucceeded(call_id=ended.call_id, output=result.output or "")
    why = f": {result.error}" if result.error else ""
    error = (
        f"the {ended.agent} agent ({ended.workflow_id}) ended "
        f"{result.terminal_reason.value} after {result.steps} steps{why}"
    )
    return ToolFailed(call_id=ended.call_id, failure="error", error=error)


def charge(children: tuple[ChildEnded, ...]) -> Usage:
    """What the children cost the parent: each delegate call, plus all its child spent."""
    total = Usage(tool_calls=len(children))
    for ended in children:
        if ended.result is not None:
            total = total + ended.result.usage
    return total


def remember(state: RunState, started: tuple[ChildRun, ...]) -> tuple[ChildRun, ...]:
    """The children the run lists (its memo), the most recent `MAX_CHILDREN`."""
    known = {c.workflow_id for c in state.children}
    new = tuple(c for c in started if c.workflow_id not in known)
    return (*state.children, *new)[-MAX_CHILDREN:]
