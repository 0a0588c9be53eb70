"""The `compact_context` activity: the mechanics of a compaction the pure loop decided on.

Turns start at each assistant message, so a tool call is never separated from its result. The
system prompt and the task stay; the last `keep_turns` turns stay as they are. Of the older part:

- `warn` changes nothing and returns a nudge listing the tool outputs a prune would replace;
- `prune` replaces large old tool outputs by a stub naming their ref (still readable with
  `read_result`);
- `summarize` replaces the older turns by one summary written by the run's model.

Only what changed is written: the old chain's leading segments that the compaction leaves as they
were stay the new chain's parents (`write_compacted`), so a prune costs the newly stubbed part
and the kept turns, not a copy of the conversation. The last segment written names the chain it
was compacted from, so transcripts and audits still see everything that happened. A compaction
that changes nothing writes nothing and says so (no new head): the loop then climbs the ladder.
Earlier summaries are folded into a new one, never kept beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from temporalio import activity

from capstan.activities.heartbeat import with_heartbeat
from capstan.activities.model import ModelActivities
from capstan.activities.providers.base import RenderedMessage
from capstan.core.activity_io import CompactInput, CompactResult
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef
from capstan.core.messages import Message
from capstan.core.tooling import READ_RESULT_TOOL
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.conversation import load_chain, write_compacted

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
        # heartbeats from the start: a worker that dies mid-compaction is noticed in seconds
        return await with_heartbeat(self._compact(request), interval=0.5)

    async def _compact(self, request: CompactInput) -> CompactResult:
        chain = await asyncio.to_thread(
            load_chain, self.content, request.conversation, self.models.segments
        )
        messages = [m for s in chain for m in s.segment.messages]
        head, turns = split_turns(messages)
        keep = max(request.keep_turns, 1)
        old, recent = turns[:-keep], turns[-keep:]
        if request.strategy == "warn":
            before = await asyncio.to_thread(self._tokens, messages)
            prunable = _prunable(old)
            nudge = _warning(prunable) if prunable else None
            return CompactResult(
                strategy="warn", tokens_before=before, tokens_after=before, nudge=nudge
            )
        compacted, changed = await self._compacted_part(request, head, old)
        kept_from = len(compacted)
        compacted += [m for t in recent for m in t]
        # what no compaction can remove: a summary keeps the pinned messages and these turns
        kept = [m for m in head if m.origin != "nudge"] + [m for t in recent for m in t]

        def write() -> tuple[BlobRef | None, int, int, int]:
            new_head = write_compacted(
                self.content, chain, compacted, kept_from, step=request.step,
                cache=self.models.segments,
            )  # fmt: skip
            counts = self._tokens(messages), self._tokens(compacted), self._tokens(kept)
            return new_head, *counts

        new_head, before, after, floor = await asyncio.to_thread(write)
        if new_head is None:  # nothing to prune or summarise: the loop climbs the ladder
            return CompactResult(
                strategy=request.strategy, tokens_before=before, tokens_after=before,
                kept_tokens=floor,
            )  # fmt: skip
        return CompactResult(
            strategy=request.strategy,
            conversation=new_head,
            tokens_before=before,
            tokens_after=after,
            pruned=changed if request.strategy == "prune" else 0,
            summarized=changed if request.strategy == "summarize" else 0,
            kept_tokens=floor,
        )

    async def _compacted_part(
        self, request: CompactInput, head: list[Message], old: list[list[Message]]
    ) -> tuple[list[Message], int]:
        """The messages that replace `head` and the `old` turns, and how many changed."""
        if request.strategy == "prune":
            stubbed = {id(m) for m in _prunable(old)}
            kept = [_stub(m) if id(m) in stubbed else m for t in old for m in t]
            return head + kept, len(stubbed)
        if not old:
            return list(head), 0
        # earlier summaries sit among the pinned messages: the new summary replaces them
        summary = await self._summarize(request, head, old)
        return [*(m for m in head if m.origin != "nudge"), summary], sum(len(t) for t in old)

    async def _summarize(
        self, request: CompactInput, head: list[Message], old: list[list[Message]]
    ) -> Message:
        profile = self.models.profile(request.profile)
        budget_chars = int(profile.usable_window_chars())
        earlier = head[1:] + [m for t in old for m in t]
        text = await asyncio.to_thread(lambda: "\n".join(map(self._line, earlier))[-budget_chars:])
        prompt = [
            RenderedMessage(role="system", content=SUMMARY_PROMPT),
            RenderedMessage(role="user", content=text),
        ]
        unstreamed = profile.model_copy(update={"stream": False})
        reply = await self.models.ask(unstreamed, prompt, [], request.step)  # the scrubbed exit
        summary = f"Summary of the earlier steps:\n{reply.text}"
        return Message(
            role="user",
            content=await asyncio.to_thread(self.content.store_text, summary),
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


def _prunable(old: list[list[Message]]) -> list[Message]:
    return [m for t in old for m in t if m.role == "tool" and _is_large(m)]


def _is_large(m: Message) -> bool:
    return isinstance(m.content, BlobRef) or len(m.content) > PRUNE_ABOVE_CHARS


def _stub(m: Message) -> Message:
    if isinstance(m.content, BlobRef):
        where = f"{READ_RESULT_TOOL}(ref={m.content.sha256!r})"
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
        f"next reply; the full outputs stay readable with {READ_RESULT_TOOL}."
    )
