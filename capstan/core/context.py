"""The context window and the model chain in the pure core: estimating the next request,
deciding on compaction, and what a failed model call means (compact, fall back, or end).

The estimate starts from the tokens the provider reported for the last call (input + output:
the conversation as it now stands) and adds the messages not yet sent, counted from their refs'
token estimates (capped by the tool result budget) or from their length, scaled by the
calibration the last call measured (reported / estimated). No IO: the tokens of stored content
were counted by the activity that stored it.
"""

from __future__ import annotations

from typing import Literal

from capstan.core.activity_io import CompactInput, CompactResult
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.core.model_errors import CONTEXT_OVERFLOW, FALLBACK_ON
from capstan.core.spec import TerminalReason
from capstan.core.state import MAX_DIAGNOSTICS, RunState

__all__ = [
    "Plan",
    "compact_request",
    "estimate_request",
    "fill",
    "on_compacted",
    "on_compaction_failed",
    "on_model_failed",
    "plan",
]

Plan = Literal["warn", "prune", "summarize", "reject"]


def _message_tokens(m: Message, cap: int) -> int:
    raw = m.content.tokens if isinstance(m.content, BlobRef) else (len(m.content) + 3) // 4
    return min(raw, cap) + 4


def estimate_request(state: RunState) -> int:
    """Tokens the next model request is expected to take."""
    cap = state.spec.context.tool_result_max_tokens
    pending = sum(_message_tokens(m, cap) for m in state.pending)
    return state.context_tokens + int(pending * state.calibration)


def fill(state: RunState) -> float:
    """The next request's share of the usable window (0.0 when the model is unknown)."""
    model = state.model
    return 0.0 if model is None else estimate_request(state) / model.usable_window


def _stage_now(state: RunState) -> int:
    """How far up the compaction ladder this step already went."""
    return state.compaction_stage if state.compacted_step == state.step else 0


def plan(state: RunState) -> Plan | None:
    """What the window needs before the next model call, if anything.

    Within one step the ladder only climbs: prune (stage 1), then summarise (stage 2); a request
    still over `reject_at` after both is not made.
    """
    if not state.context_managed or state.model is None:
        return None
    if state.compaction_due == "summarize" and state.conversation is not None:
        return "summarize"
    policy = state.spec.context
    level = fill(state)
    stage = _stage_now(state)
    compactable = state.conversation is not None
    if level >= policy.reject_at and (stage >= 2 or not compactable):
        return "reject"
    if not compactable:
        return None
    if level >= policy.emergency_at and stage < 2:
        return "summarize"
    if level >= policy.warn_at and not state.warned and stage < 1:
        return "warn"
    if level >= policy.compact_at and stage < 1:
        return "prune"
    return None


def compact_request(state: RunState, strategy: Plan) -> CompactInput:
    assert state.conversation is not None and strategy != "reject"
    reason = "context overflow" if state.compaction_due else f"fill {fill(state):.2f}"
    return CompactInput(
        run_id=state.run_id,
        step=state.step,
        profile=state.profile,
        conversation=state.conversation,
        strategy=strategy,
        keep_turns=state.spec.context.keep_turns,
        reason=reason,
    )


def on_model_failed(state: RunState, error: str, error_type: str) -> RunState:
    """Overflow: compact once, then give up. Unavailable model: the next in the chain."""
    if state.phase == "starting":  # the model could not even be described
        return terminate(state, TerminalReason.MODEL_ERROR, error)
    if error_type == CONTEXT_OVERFLOW and state.context_managed:
        if state.overflow_step != state.step and state.conversation is not None:
            return state.model_copy(
                update={"overflow_step": state.step, "compaction_due": "summarize"}
            )
        return terminate(state, TerminalReason.PROMPT_TOO_LONG, error)
    chain = state.model_chain.models if state.model_chain else ()
    if error_type in FALLBACK_ON and state.model_index + 1 < len(chain):
        old, new = chain[state.model_index], chain[state.model_index + 1]
        switch = f"switched model {old.profile} -> {new.profile} at step {state.step + 1}: {error}"
        switched = state.model_copy(
            update={
                "model_index": state.model_index + 1,
                "model_switches": (*state.model_switches, switch),
            }
        )
        return with_diagnostic(switched, switch)
    return terminate(state, TerminalReason.MODEL_ERROR, error)


def on_compacted(state: RunState, result: CompactResult) -> RunState:
    stage = {"warn": 0, "prune": 1, "summarize": 2}[result.strategy]
    if result.strategy == "warn":
        nudge = (
            (Message(role="user", content=result.nudge, origin="nudge", step=state.step),)
            if result.nudge
            else ()
        )
        return state.model_copy(update={"warned": True, "pending": state.pending + nudge})
    note = (
        f"compacted the context ({result.strategy}): ~{result.tokens_before} -> "
        f"~{result.tokens_after} tokens at step {state.step}"
    )
    return with_diagnostic(
        state.model_copy(
            update={
                "conversation": result.conversation or state.conversation,
                "context_tokens": int(result.tokens_after * state.calibration),
                "compacted_step": state.step,
                "compaction_stage": max(
                    stage, state.compaction_stage if state.compacted_step == state.step else 0
                ),
                "compaction_due": None,
                "compactions": state.compactions + 1,
            }
        ),
        note,
    )


def on_compaction_failed(state: RunState, error: str) -> RunState:
    """No further compaction this step; the plan then proceeds or rejects on the fill alone."""
    given_up = {"compacted_step": state.step, "compaction_stage": 2, "compaction_due": None}
    return with_diagnostic(state.model_copy(update=given_up), f"compaction failed: {error}")


def with_diagnostic(state: RunState, note: str) -> RunState:
    return state.model_copy(update={"diagnostics": (*state.diagnostics, note)[-MAX_DIAGNOSTICS:]})


def terminate(state: RunState, reason: TerminalReason, error: str | None) -> RunState:
    return state.model_copy(update={"terminal": reason, "error": error, "phase": "finished"})
