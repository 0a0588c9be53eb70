"""The `compact_context` activity: the mechanics of a compaction the pure loop decided on.

Turns start at each assistant message, so a tool call is never separated from its result. The
system prompt and the task stay; the last `keep_turns` turns stay as they are. Of the older part:

- `warn` changes nothing and returns a nudge listing the tool outputs a prune would replace;
- `prune` replaces large old tool outputs by a stub naming their ref (still readable with
  `read_result`);
- `summarize` replaces the older turns by one summary written by the run's model.

The result is a new root segment that names the chain it was compacted from, so transcripts and
audits still see everything that happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from temporalio import activity

from capstan.activities.heartbeat import with_heartbeat
from capstan.activities.model import ModelActivities, adapter_for
from capstan.activities.providers.base import RenderedMessage
from capstan.core.activity_io import CompactInput, CompactResult
from capstan.core.activity_table import ActivityName
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.conversation import append_segment, load_conversation

__all__ = ["CompactionActivities", "split_turns"]

PRUNE_ABOVE_CHARS = 400
SUMMARY_PROMPT = (
    "You compress the history of an agent's work. Summarise the conversation below: the task, "
    "what was tried, what was learned (facts, file names, numbers, decisions), what remains. "
    "Be complete but brief; write in plain prose."
)


def split_turns(messages: list[Message]) -> tuple[list[Message], list[list[Message]]]:
    """(pinned head: system and task messages, turns each starting at an assistant message)."""
    head: list[Message] = []
    turns: list[list[Message]] = []
    for m in messages:
        if m.role == "assistant":
            turns.append([m])
        elif turns:
            turns[-1].append(m)
        else:
            head.append(m)
    return head, turns


class CompactionActivities:
    def __init__(
        self,
        content: ContentStore,
        models: ModelActivities,
        http: httpx.AsyncClient,
        count_tokens: Callable[[str], int],
    ) -> None:
        self.content = content
        self.models = models
        self.http = http
        self.count_tokens = count_tokens

    def _tokens(self, messages: list[Message]) -> int:
        total = 0
        for m in messages:
            total += 4 + (
                m.content.tokens if isinstance(m.content, BlobRef) else self.count_tokens(m.content)
            )
        return total

    @activity.defn(name=ActivityName.COMPACT_CONTEXT.value)
    async def compact_context(self, request: CompactInput) -> CompactResult:
        messages = await asyncio.to_thread(load_conversation, self.content, request.conversation)
        head, turns = split_turns(messages)
        keep = max(request.keep_turns, 1)
        old, recent = turns[:-keep], turns[-keep:]
        before = await asyncio.to_thread(self._tokens, messages)
        prunable = [m for t in old for m in t if m.role == "tool" and _is_large(m)]
        if request.strategy == "warn":
            return CompactResult(
                strategy="warn",
                tokens_before=before,
                tokens_after=before,
                nudge=_warning(prunable) if prunable else None,
            )
        if request.strategy == "prune":
            stubbed = {id(m) for m in prunable}
            kept = head + [_stub(m) if id(m) in stubbed else m for t in old for m in t]
            compacted = kept + [m for t in recent for m in t]
            pruned, summarized = len(prunable), 0
        else:
            summary = await self._summarize(request, head, old) if old else None
            compacted = head + ([summary] if summary else []) + [m for t in recent for m in t]
            pruned, summarized = 0, sum(len(t) for t in old)
        new_head = await asyncio.to_thread(
            append_segment, self.content, None, request.step, compacted, request.conversation
        )
        after = await asyncio.to_thread(self._tokens, compacted)
        return CompactResult(
            strategy=request.strategy,
            conversation=new_head,
            tokens_before=before,
            tokens_after=after,
            pruned=pruned,
            summarized=summarized,
        )

    async def _summarize(
        self, request: CompactInput, head: list[Message], old: list[list[Message]]
    ) -> Message:
        profile = self.models.profile(request.profile)
        budget_chars = int(profile.usable_window_chars())
        lines = [self._line(m) for m in head[1:] + [m for t in old for m in t]]
        text = "\n".join(lines)[-budget_chars:]
        prompt = [
            RenderedMessage(role="system", content=SUMMARY_PROMPT),
            RenderedMessage(role="user", content=text),
        ]
        reply = await with_heartbeat(
            adapter_for(profile.model_copy(update={"stream": False}), self.http).complete(
                prompt, [], step=request.step
            )
        )
        return Message(
            role="user",
            content=self.content.store_text(f"Summary of the earlier steps:\n{reply.text}"),
            origin="nudge",
            step=request.step,
        )

    def _line(self, m: Message) -> str:
        text = self.content.resolve(m.content)
        if len(text) > 2000:
            text = text[:2000] + " [...]"
        calls = "; ".join(
            f"{c.name}({self.content.resolve(c.arguments)[:200]})" for c in m.tool_calls
        )
        return f"[{m.role}{' ' + m.name if m.name else ''}] {text} {calls}".strip()


def _is_large(m: Message) -> bool:
    return isinstance(m.content, BlobRef) or len(m.content) > PRUNE_ABOVE_CHARS


def _stub(m: Message) -> Message:
    if isinstance(m.content, BlobRef):
        where = f"read_result(ref={m.content.sha256!r})"
        size = f"{m.content.size} bytes"
    else:
        where = "it is no longer available"
        size = f"{len(m.content)} characters"
    text = f"[pruned to save context: {size} of output from {m.name}; {where}]"
    return m.model_copy(update={"content": text, "untrusted": False})


def _warning(prunable: list[Message]) -> str:
    items = ", ".join(f"{m.name} (step {m.step}, call {m.tool_call_id})" for m in prunable[:20])
    return (
        "The context window is filling up. These earlier tool outputs will soon be replaced by "
        f"short stubs: {items}. If something in them still matters, restate it briefly in your "
        "next reply; the full outputs stay readable with read_result."
    )
