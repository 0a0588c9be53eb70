"""Per-run budgets in the pure core: tool calls, input and output tokens, dollars, wall time.

Before each model call its cost is estimated and reserved (the expected input plus the model's
full reply reserve); a call that would cross a budget is not made. Usage is summed from the
replies the run accepted, so retries, replays and continue-as-new never count twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from capstan.core.context import estimate_request
from capstan.core.state import RunState
from capstan.core.steering import BudgetName

__all__ = [
    "deadline",
    "exhausted",
    "left",
    "limit",
    "remaining_fraction",
    "reserve",
    "used",
]


def limit(state: RunState, name: BudgetName) -> float | None:
    """The budget's limit including grants, or None when unlimited."""
    b = state.spec.budgets
    base = {
        "tool_calls": b.max_tool_calls,
        "input_tokens": b.max_input_tokens,
        "output_tokens": b.max_output_tokens,
        "cost_usd": b.max_cost_usd,
        "wall_seconds": b.max_wall_seconds,
    }[name]
    return None if base is None else base + state.budget.extra.get(name, 0.0)


def _used(state: RunState, name: BudgetName, now: datetime | None) -> float:
    u = state.usage
    if name == "wall_seconds":
        if state.budget.started_at is None or now is None:
            return 0.0
        return (now - state.budget.started_at).total_seconds()
    return float(
        {
            "tool_calls": u.tool_calls,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cost_usd": u.cost_usd,
        }[name]
    )


def _reserve(state: RunState) -> dict[BudgetName, float]:
    """What the next model call is expected to cost, per budget."""
    model = state.model
    tokens_in = estimate_request(state)
    tokens_out = model.max_output_tokens if model else 0
    cost = 0.0
    if model is not None:
        cost = (tokens_in * model.prices.input + tokens_out * model.prices.output) / 1_000_000
    return {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": cost}


NAMES: tuple[BudgetName, ...] = (
    "wall_seconds",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
)


def exhausted(state: RunState, *, before_model_call: bool) -> tuple[BudgetName, str] | None:
    """The first budget that is spent (or would be by the next model call), with the numbers."""
    reserve = _reserve(state) if before_model_call else {}
    for name in NAMES:
        cap = limit(state, name)
        if cap is None:
            continue
        used = _used(state, name, state.now)
        needed = reserve.get(name, 0.0)
        if used >= cap or (needed and used + needed > cap):
            extra = f" and the next call needs ~{needed:g}" if needed else ""
            return name, f"budget {name} exhausted: used {used:g} of {cap:g}{extra}"
    return None


def remaining_fraction(state: RunState) -> float:
    """The smallest remaining share over the configured budgets (1.0 when none)."""
    shares = []
    for name in NAMES:
        cap = limit(state, name)
        if cap:
            shares.append(max(cap - _used(state, name, state.now), 0.0) / cap)
    return min(shares, default=1.0)


def deadline(state: RunState) -> datetime | None:
    """When the wall-time budget runs out, so waits wake up for it."""
    cap = limit(state, "wall_seconds")
    if cap is None or state.budget.started_at is None:
        return None
    return state.budget.started_at + timedelta(seconds=cap)


def used(state: RunState, name: BudgetName) -> float:
    """What the run has spent of a budget so far (wall time as of the last boundary)."""
    return _used(state, name, state.now)


def left(state: RunState, name: BudgetName) -> float | None:
    """What is left of a budget (never below zero), or None when it is unlimited."""
    cap = limit(state, name)
    return None if cap is None else max(cap - used(state, name), 0.0)


def reserve(state: RunState) -> dict[BudgetName, float]:
    """What the run's next model call is expected to cost, per budget (what a run keeps for
    itself when it carves budgets for its children)."""
    return _reserve(state)
