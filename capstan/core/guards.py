"""Turn quality and circuit breakers: what the loop does when the model's replies go wrong.

Pure. Thresholds come from `RunSpec.guards` (defaults from the best executors):

| breaker | counts | nudge | abort |
|---|---|---|---|
| `identical_call` | the same tool with the same arguments, turn after turn | 3 | 5 |
| `truncated_tool_calls` | cut-off replies (output limit) carrying tool calls, in a row | no | 3 |
| `argument_errors` | one tool's calls with arguments that fail to parse, in a row | no | 3 |
| `fruitless_calls` | tool results of 48 characters or fewer, in a row | 5 | 8 |
| `similar_results` | one tool, varied arguments, nearly the same result as the last | 8 | 12 |

"Nearly the same" is judged by content (`capstan.core.resemblance`): at least 75% of the result's
shingles shared with the last one, after the call's own argument values are cut out, and a
length within 128 of it. Results large enough to be blobs count only when identical. A batch job
over many different files of one size is not a loop; the same answer to varied questions is.

Abort ends the run `circuit_breaker` with the breaker's name. Turn quality (empty replies,
reasoning only, tool-call syntax printed as text) gets a bounded corrective nudge.
"""

from __future__ import annotations

import json
import re
from dataclasses import field, replace
from typing import Literal

from pydantic.dataclasses import dataclass

from capstan.core.content import BlobRef, Text
from capstan.core.messages import Message, ToolCall
from capstan.core.policy import canonical_arguments
from capstan.core.resemblance import NEAR_SAME, Sketch, digest_sketch, resemblance, sketch_of
from capstan.core.tooling import ToolFailed, ToolOutcome

__all__ = [
    "Breaker",
    "Streaks",
    "TurnProblem",
    "after_tools",
    "after_turn",
    "turn_problem",
]

TurnProblem = Literal["empty_reply", "reasoning_only", "printed_tool_call"]
Breaker = Literal[
    "identical_call",
    "truncated_tool_calls",
    "argument_errors",
    "fruitless_calls",
    "similar_results",
]

_TOOL_TAGS = re.compile(
    r"<tool_call>|<function[=\s>]|<\|tool_call\|>|\[TOOL_CALLS\]|<\|python_tag\|>|```tool",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Streaks:
    """Streak counters, carried across continue-as-new."""

    last_calls: tuple[str, ...] = ()
    identical: int = 0
    truncated: int = 0
    argument_errors: dict[str, int] = field(default_factory=dict)
    fruitless: int = 0
    # tool -> (last args, last length, streak)
    similar: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    nudged: tuple[str, ...] = ()
    succeeded: tuple[str, ...] = ()
    # tool -> the content sketch of its last result (absent in state carried from before it)
    sketches: dict[str, Sketch] = field(default_factory=dict)


def _text_of(text: Text | None) -> str:
    if text is None:
        return ""
    return text.preview if isinstance(text, BlobRef) else text


def _printed_call(text: str, tools: tuple[str, ...]) -> bool:
    if _TOOL_TAGS.search(text):
        return True
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return False
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return False
    if not isinstance(value, dict):
        return False
    name = value.get("name") or value.get("tool") or value.get("function")
    if isinstance(name, dict):
        name = name.get("name")
    return isinstance(name, str) and name in tools


def turn_problem(message: Message, tools: tuple[str, ...]) -> TurnProblem | None:
    """What is wrong with a reply that has no structured tool call, if anything."""
    text = _text_of(message.content).strip()
    if not text:
        return "reasoning_only" if _text_of(message.reasoning).strip() else "empty_reply"
    if _printed_call(text, tools):
        return "printed_tool_call"
    return None


def _signature(call: ToolCall) -> str:
    return f"{call.name}\n{canonical_arguments(call.arguments)}"


def after_turn(
    guard: Streaks, calls: tuple[ToolCall, ...], truncated: bool
) -> tuple[Streaks, int, int]:
    """Fold one turn's calls: (state, identical streak, truncated streak)."""
    signatures = tuple(_signature(c) for c in calls)
    repeated = bool(signatures) and any(s in guard.last_calls for s in signatures)
    identical = guard.identical + 1 if repeated else (1 if signatures else 0)
    truncated_run = guard.truncated + 1 if truncated and calls else 0
    nudged = guard.nudged if repeated else tuple(n for n in guard.nudged if n != "identical_call")
    updated = replace(
        guard, last_calls=signatures, identical=identical, truncated=truncated_run, nudged=nudged
    )
    return updated, identical, truncated_run


def _length(outcome: ToolOutcome) -> int:
    if isinstance(outcome, ToolFailed):
        return len(outcome.error)
    return outcome.output.size if isinstance(outcome.output, BlobRef) else len(outcome.output)


def _argument_values(arguments: Text) -> list[str]:
    """Every string value in a call's JSON arguments (what a result may echo back)."""
    if isinstance(arguments, BlobRef):
        return []
    try:
        pending: list[object] = [json.loads(arguments or "{}")]
    except json.JSONDecodeError:
        return [arguments]
    values: list[str] = []
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            values.append(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return values


def _sketch(call: ToolCall, outcome: ToolOutcome) -> Sketch:
    if isinstance(outcome, ToolFailed):
        return sketch_of(f"{outcome.failure}: {outcome.error}", _argument_values(call.arguments))
    if isinstance(outcome.output, BlobRef):
        return digest_sketch(outcome.output.sha256)
    return sketch_of(outcome.output, _argument_values(call.arguments))


def _similar_streak(
    last: tuple[str, int, int] | None,
    last_sketch: Sketch | None,
    current: tuple[str, int, Sketch],
    window: int,
) -> int:
    """The similar-results streak of one tool after a result (`current`: its canonical
    arguments, length and sketch): it grows while varied arguments give nearly the same result."""
    args, size, sketch = current
    if last is None or last_sketch is None or last[0] == args or abs(last[1] - size) > window:
        return 1
    return last[2] + 1 if resemblance(last_sketch, sketch) >= NEAR_SAME else 1


def after_tools(
    guard: Streaks,
    calls: tuple[ToolCall, ...],
    outcomes: dict[str, ToolOutcome],
    fruitless_chars: int,
    similar_window: int,
) -> tuple[Streaks, dict[str, int]]:
    """Fold one turn's results: (state, the current streak of each breaker)."""
    fruitless = guard.fruitless
    errors = dict(guard.argument_errors)
    similar = dict(guard.similar)
    sketches = dict(guard.sketches)
    succeeded = list(guard.succeeded)
    for call in calls:
        outcome = outcomes.get(call.id)
        if outcome is None:
            continue
        if not isinstance(outcome, ToolFailed) and call.name not in succeeded:
            succeeded.append(call.name)
        size = _length(outcome)
        fruitless = fruitless + 1 if size <= fruitless_chars else 0
        bad_arguments = isinstance(outcome, ToolFailed) and outcome.failure == "invalid_arguments"
        errors[call.name] = errors.get(call.name, 0) + 1 if bad_arguments else 0
        args, sketch = canonical_arguments(call.arguments), _sketch(call, outcome)
        streak = _similar_streak(
            similar.get(call.name), sketches.get(call.name), (args, size, sketch), similar_window
        )
        similar[call.name] = (args, size, streak)
        sketches[call.name] = sketch
    streaks = {
        "fruitless_calls": fruitless,
        "argument_errors": max(errors.values(), default=0),
        "similar_results": max((v[2] for v in similar.values()), default=0),
    }
    nudged = tuple(n for n in guard.nudged if streaks.get(n, 1) > 0)
    updated = replace(
        guard,
        fruitless=fruitless,
        argument_errors=errors,
        similar=similar,
        sketches=sketches,
        nudged=nudged,
        succeeded=tuple(succeeded),
    )
    return updated, streaks
