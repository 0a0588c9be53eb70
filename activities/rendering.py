"""Provider-neutral messages -> `RenderedMessage`s: refs resolved, observations budgeted,
untrusted output fenced, reviewer notes attached. Shared by every provider adapter."""

from __future__ import annotations

from capstan.activities.budget import ResultBudget, apply_budget
from capstan.activities.fence import FENCE_TAG, fence_untrusted
from capstan.activities.providers.base import RenderedCall, RenderedMessage
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import ContentStore

__all__ = ["FENCE_TAG", "fence_untrusted", "render"]


def render(
    content: ContentStore, history: list[Message], budget: ResultBudget
) -> list[RenderedMessage]:
    out: list[RenderedMessage] = []
    for m in history:
        text = content.resolve(m.content)
        if m.role == "tool":
            ref = m.content.sha256 if isinstance(m.content, BlobRef) else None
            text = apply_budget(text, ref, budget)
            if m.untrusted:
                text = fence_untrusted(text, m.name or "tool", m.tool_call_id or "")
            if m.note:
                text = f"[{m.note}]\n{text}"
        calls = tuple(
            RenderedCall(id=c.id, name=c.name, arguments=content.resolve(c.arguments))
            for c in m.tool_calls
        )
        out.append(
            RenderedMessage(
                role=m.role,
                content=text,
                tool_calls=calls,
                tool_call_id=m.tool_call_id,
                name=m.name,
                is_error=m.role == "tool" and text.startswith("Error ("),
                reasoning=content.resolve(m.reasoning) if m.reasoning is not None else None,
                reasoning_signature=m.reasoning_signature,
            )
        )
    return out
