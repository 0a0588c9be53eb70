"""Turn a run's conversation chain into readable steps, on the client side.

The workflow only knows the chain head; this module resolves the chain and every ref from the
blob store (each read verified) into steps of thought, tool calls and observations.
"""

from __future__ import annotations

from pydantic import BaseModel

from capstan.core.messages import Message
from capstan.core.workflow_io import TranscriptView
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.conversation import load_conversation

__all__ = ["StepView", "ToolCallView", "build_transcript"]


class ToolCallView(BaseModel):
    """One tool call: the arguments the model asked for and, when a reviewer edited them, the
    arguments it ran with (both are kept: the audit and the reader see what changed)."""

    call_id: str
    name: str
    arguments: str
    executed_arguments: str | None = None
    observation: str | None = None


class StepView(BaseModel):
    """One ReAct iteration: what the model thought and did, and what it observed."""

    step: int
    thought: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallView] = []
    notes: list[str] = []


def build_transcript(content: ContentStore, view: TranscriptView) -> list[StepView]:
    """Every step so far, oldest first, with refs resolved."""
    messages = load_conversation(content, view.conversation, original=True) + list(view.pending)
    steps: list[StepView] = []
    calls: dict[str, ToolCallView] = {}
    for message in messages:
        _fold(content, message, steps, calls)
    by_step = {s.step: s for s in steps}
    for record in view.records:
        call = calls.get(record.request_id.rsplit("/", 1)[-1])
        if record.action == "edit" and call is not None and record.executed_arguments is not None:
            call.executed_arguments = content.resolve(record.executed_arguments)
        step = by_step.get(_step_of(record.request_id))
        if step is not None:
            who = f" by {record.identity}" if record.identity else ""
            why = f": {record.reason}" if record.reason else ""
            step.notes.append(f"[{record.action}] {record.tool} {record.request_id}{who}{why}")
    return steps


def _step_of(request_id: str) -> int:
    """Request ids are `run_id/step/call_id`."""
    parts = request_id.rsplit("/", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1


def _fold(
    content: ContentStore, m: Message, steps: list[StepView], calls: dict[str, ToolCallView]
) -> None:
    if m.role == "assistant":
        step = StepView(
            step=m.step,
            thought=content.resolve(m.content),
            reasoning=content.resolve(m.reasoning) if m.reasoning is not None else None,
        )
        for c in m.tool_calls:
            view = ToolCallView(call_id=c.id, name=c.name, arguments=content.resolve(c.arguments))
            calls[c.id] = view
            step.tool_calls.append(view)
        steps.append(step)
    elif m.role == "tool" and m.tool_call_id in calls:
        calls[m.tool_call_id].observation = content.resolve(m.content)
    elif m.origin in ("nudge", "live") and steps:
        steps[-1].notes.append(f"[{m.origin}] {content.resolve(m.content)}")
