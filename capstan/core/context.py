"""The context window and the model chain in the pure core: estimating the next request,
deciding on compaction, and what a failed model call means (compact, fall back, or end).

The estimate starts from the tokens the provider reported for the last call (input + output:
the conversation as it now stands) and adds the messages not yet sent, counted from their refs'
token estimates (capped by the tool result budget) or from their length, scaled by the
calibration the last call measured (reported / estimated). No IO: the tokens of stored content
were counted by the activity that stored it. A model failure that ends the run comes back as an
`Ending` verdict; the loop records it (`capstan.core.transitions`).

Hysteresis: a compaction must leave the next request at or under `RELIEF` of `compact_at`, or the
ladder climbs at once (a prune that frees too little is followed by a summary in the same
step). Without it a prune that ends just under the threshold runs again at the next step, and
the next, rewriting the conversation every step. The climb is skipped when a summary could not
get there either: when the pinned messages and the kept turns alone (`kept_tokens`, reported by
the compaction) exceed the target, the window is too small for `keep_turns` and pruning each
step is the cheaper way to stay inside it. Runs recorded before this rule
(`ContextState.hysteresis` off, see `Patch.COMPACTION`) keep their old decisions on replay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from capstan.core.activity_io import CompactInput, CompactResult
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.core.model_errors import CONTEXT_OVERFLOW, FALLBACK_ON
from capstan.core.spec import TerminalReason
from capstan.core.state import MAX_DIAGNOSTICS, Ending, RunState

__all__ = [
    "RELIEF",
    "Plan",
    "compact_request",
    "estimate_request",
    "fill",
    "on_compacted",
    "on_compaction_failed",
    "on_model_failed",
    "plan",
    "with_diagnostic",
]

Plan = Literal["warn", "prune", "summarize", "reject"]

#: After a compaction the next request must fit in this share of `compact_at` (0.7 of the
#: default 0.70: 49% of the usable window), so the window fills for many steps before the next.
RELIEF = 0.7


def _message_tokens(m: Message, cap: int) -> int:
    raw = m.content.tokens if isinstance(m.content, BlobRef) else (len(m.content) + 3) // 4
    return min(raw, cap) + 4


def estimate_request(state: RunState) -> int:
    """Tokens the next model request is expected to take."""
    cap = state.spec.context.tool_result_max_tokens
    pending = sum(_message_tokens(m, cap) for m in state.conversation.pending)
    return state.context.tokens + int(pending * state.context.calibration)


def fill(state: RunState) -> float:
    """The next request's share of the usable window (0.0 when the model is unknown)."""
    model = state.model
    return 0.0 if model is None else estimate_request(state) / model.usable_window


def _stage_now(state: RunState) -> int:
    """How far up the compaction ladder this step already went."""
    window = state.context
    return window.compaction_stage if window.compacted_step == state.step else 0


def plan(state: RunState) -> Plan | None:
    """What the window needs before the next model call, if anything.

    Within one step the ladder only climbs: prune (stage 1), then summarise (stage 2) when the
    prune left the request over `RELIEF` of `compact_at` (or over `emergency_at`); a request
    still over `reject_at` after both is not made.
    """
    if state.model is None:
        return None
    compactable = state.conversation.head is not None
    if state.context.compaction_due == "summarize" and compactable:
        return "summarize"
    policy = state.spec.context
    level = fill(state)
    stage = _stage_now(state)
    if level >= policy.reject_at and (stage >= 2 or not compactable):
        return "reject"
    if not compactable:
        return None
    if level >= policy.emergency_at and stage < 2:
        return "summarize"
    if stage == 1 and _short_of_relief(state, level):
        return "summarize"
    if level >= policy.warn_at and not state.context.warned and stage < 1:
        return "warn"
    if level >= policy.compact_at and stage < 1:
        return "prune"
    return None


def _short_of_relief(state: RunState, level: float) -> bool:
    """A prune left the request over the hysteresis target, and a summary could reach it."""
    window, model = state.context, state.model
    target = state.spec.context.compact_at * RELIEF
    if not window.hysteresis or level <= target or model is None:
        return False
    if window.kept_tokens <= 0:  # not reported: assume a summary helps
        return True
    pending = estimate_request(state) - window.tokens
    floor = int(window.kept_tokens * window.calibration) + pending
    return floor / model.usable_window < target


def compact_request(state: RunState, strategy: Plan) -> CompactInput:
    head = state.conversation.head
    assert head is not None and strategy != "reject"
    reason = "context overflow" if state.context.compaction_due else f"fill {fill(state):.2f}"
    return CompactInput(
        run_id=state.run_id,
        step=state.step,
        profile=state.profile,
        conversation=head,
        strategy=strategy,
        keep_turns=state.spec.context.keep_turns,
        reason=reason,
    )


def on_model_failed(state: RunState, error: str, error_type: str) -> RunState | Ending:
    """Overflow: compact once, then give up. Unavailable model: the next in the chain. Else,
    or when the model could not even be described, the verdict is the run's end."""
    if state.phase == "starting":
        return Ending(reason=TerminalReason.MODEL_ERROR, error=error)
    window = state.context
    if error_type == CONTEXT_OVERFLOW:
        if window.overflow_step != state.step and state.conversation.head is not None:
            due = replace(window, overflow_step=state.step, compaction_due="summarize")
            return replace(state, context=due)
        return Ending(reason=TerminalReason.PROMPT_TOO_LONG, error=error)
    chain = window.model_chain.models if window.model_chain else ()
    if error_type in FALLBACK_ON and window.model_index + 1 < len(chain):
        old, new = chain[window.model_index], chain[window.model_index + 1]
        switch = f"switched model {old.profile} -> {new.profile} at step {state.step + 1}: {error}"
        switched = replace(
            window,
            model_index=window.model_index + 1,
            model_switches=(*window.model_switches, switch),
        )
        return with_diagnostic(replace(state, context=switched), switch)
    return Ending(reason=TerminalReason.MODEL_ERROR, error=error)


def on_compacted(state: RunState, result: CompactResult) -> RunState:
    stage = {"warn": 0, "prune": 1, "summarize": 2}[result.strategy]
    window = state.context
    if result.strategy == "warn":
        nudge = (
            (Message(role="user", content=result.nudge, origin="nudge", step=state.step),)
            if result.nudge
            else ()
        )
        pending = state.conversation.pending + nudge
        return replace(
            state,
            context=replace(window, warned=True),
            conversation=replace(state.conversation, pending=pending),
        )
    changed = result.conversation is not None
    note = (
        f"compacted the context ({result.strategy}): ~{result.tokens_before} -> "
        f"~{result.tokens_after} tokens at step {state.step}"
        if changed
        else f"nothing to {result.strategy} at step {state.step}"
    )
    compacted = replace(
        window,
        tokens=int(result.tokens_after * window.calibration),
        compacted_step=state.step,
        compaction_stage=max(stage, _stage_now(state)),
        compaction_due=None,
        compactions=window.compactions + (1 if changed else 0),
        kept_tokens=result.kept_tokens,
    )
    head = result.conversation or state.conversation.head
    conversation = replace(state.conversation, head=head)
    return with_diagnostic(replace(state, context=compacted, conversation=conversation), note)


def on_compaction_failed(state: RunState, error: str) -> RunState:
    """No further compaction this step; the plan then proceeds or rejects on the fill alone."""
    given_up = replace(
        state.context, compacted_step=state.step, compaction_stage=2, compaction_due=None
    )
    return with_diagnostic(replace(state, context=given_up), f"compaction failed: {error}")


def with_diagnostic(state: RunState, note: str) -> RunState:
    """Note something for `status` and the transcript (bounded)."""
    return replace(state, diagnostics=(*state.diagnostics, note)[-MAX_DIAGNOSTICS:])
