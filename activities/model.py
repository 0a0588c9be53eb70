"""The model activities: `describe_model` (profile -> limits, prices, fallbacks) and `call_model`.

`call_model` has a constant-size input and output: the conversation arrives as a chain head plus
the new messages; the reply leaves as the new head plus the assistant message with large parts
as refs. While a reply streams in, its text so far rides on the activity's heartbeats, where
`capstan watch` reads it; the durable record is only the final reply.

Its own cost does not grow with the conversation: decoded segments and rendered conversations
are cached by head (both immutable), so a call renders only the messages since the last one and
primes the cache for the head it writes. The blocking work before the provider call and after
it runs in place when it is small and the store is on local disk (the conversation's rendering
cached, the step's messages inline and small: `capstan.activities.inline`), otherwise in one
worker-thread hop each.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
from opentelemetry.trace import SpanKind
from temporalio import activity
from temporalio.exceptions import ApplicationError

from capstan.activities.heartbeat import with_heartbeat
from capstan.activities.inline import small_messages
from capstan.activities.model_queues import Governor
from capstan.activities.providers.anthropic import AnthropicMessages
from capstan.activities.providers.base import ChatAdapter, ProviderReply, RenderedMessage
from capstan.activities.providers.local_choices import narrow_for_call
from capstan.activities.providers.openai_chat import OpenAIChat
from capstan.activities.providers.profiles import (
    Profile,
    ProfileError,
    ProfileTable,
    load_profiles,
    model_chain,
    resolve_profile,
)
from capstan.activities.providers.secrets import Scrubber, worker_keys
from capstan.activities.providers.wire_cache import wire_cache
from capstan.activities.rendering import RenderCache, RenderedView, render, render_view
from capstan.activities.result_budget import ResultBudget
from capstan.core.activity_io import CallModelInput, DescribeModelInput, ModelReply
from capstan.core.activity_names import ActivityName
from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.model_errors import ModelErrorKind
from capstan.core.models import ModelChain, Prices
from capstan.core.tenants import workspace_subdir
from capstan.core.tooling import ToolSpec
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.config import ModelSettings
from capstan.runtime.conversation import SegmentCache, append_segment
from capstan.runtime.telemetry import Instruments

__all__ = ["ModelActivities", "StreamProgress", "adapter_for", "cost_of"]

TAIL_CHARS = 400


def adapter_for(profile: Profile, http: httpx.AsyncClient) -> ChatAdapter:
    if profile.provider == "anthropic":
        return AnthropicMessages(profile, http)
    return OpenAIChat(profile, http)  # OpenAI and every compatible server, the local one too


def cost_of(usage: Usage, prices: Prices) -> float:
    """USD for one call. Cached input is billed at the cache prices, the rest at the input price."""
    fresh = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
    total = (
        fresh * prices.input
        + usage.cache_read_tokens * prices.cache_read
        + usage.cache_write_tokens * prices.cache_write
        + usage.output_tokens * prices.output
    )
    return round(total / 1_000_000, 6)


@dataclass
class StreamProgress:
    """What watchers see of a reply while it streams: sent as heartbeat details."""

    run_id: str
    step: int
    attempt: int
    chars: int = 0
    tail: list[str] = field(default_factory=list)

    def add(self, delta: str) -> None:
        self.chars += len(delta)
        self.tail.append(delta)
        joined = "".join(self.tail)
        if len(joined) > TAIL_CHARS:
            self.tail = [joined[-TAIL_CHARS:]]

    def snapshot(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "step": self.step,
            "attempt": self.attempt,
            "chars": self.chars,
            "tail": "".join(self.tail),
        }


@dataclass(frozen=True)
class Prompt:
    """A model request ready to send: the rendered conversation, tools and limits."""

    profile: Profile
    budget: ResultBudget
    tools: list[ToolSpec]
    view: RenderedView  # the conversation with the new messages, rendered


class ModelActivities:
    """Holds the HTTP client, the content store and the profiles; built once per worker."""

    def __init__(
        self,
        content: ContentStore,
        env: Mapping[str, str],
        http: httpx.AsyncClient,
        count_tokens: Callable[[str], int] | None = None,
        telemetry: Instruments | None = None,
        *,
        workspace: Path | None = None,
        local_choices: Literal["paths", "lines", "off"] = "paths",
        limited: Collection[str] = (),
    ) -> None:
        self.telemetry = telemetry or Instruments()
        # the profiles whose calls this worker serves on queues of their own (`[limits.NAME]`,
        # `capstan.activities.model_queues`): fixed at start, as the queues it polls are
        self.limited = frozenset(limited)
        #: told of a provider's pushback (429) on one of those profiles, with its Retry-After,
        #: to slow the whole fleet (`capstan.activities.model_queues.Governor`)
        self.on_pushback: Callable[[str, float | None], None] | None = None
        # the `local` provider's argument choices list it (activities/providers/local_choices)
        self.workspace = workspace
        self.local_choices = local_choices
        self.content = content
        self.env = env
        self.http = http
        self.count_tokens = count_tokens or (lambda s: (len(s) + 3) // 4)
        # every non-secret model setting, parsed once: a bad value stops the worker at start
        # (ConfigError); `env` itself is kept only for the API keys profiles name
        self.settings = ModelSettings.from_env(env)
        # content-addressed, so valid for the worker's life; shared with compaction
        self.segments = SegmentCache()
        self.rendered = RenderCache()
        self._tool_specs: dict[str, list[ToolSpec]] = {}
        self._profiles: tuple[object, dict[str, ProfileTable]] | None = None

    def release_idle(self, idle: float) -> bool:
        """Drop the decoded segments, rendered conversations and encoded messages unused for
        `idle` seconds: a run parked for a person holds ~8 KB in them until it moves, and then
        reads, renders and encodes them again (bench/README.md, issue 28). True when any were
        dropped (`capstan.host.memory.release_when_idle`)."""
        caches = (self.segments, self.rendered, wire_cache)  # every one, not up to the first
        return any([cache.release(idle) for cache in caches])

    def paced(self, governor: Governor) -> None:
        """Report pushback on the limited profiles to `governor` (`ModelQueues` calls this
        when it starts serving their queues)."""
        self.on_pushback = governor.pushback

    def _budget_spent(self, profile: str, reply: ProviderReply) -> None:
        """The provider says its tokens-per-minute budget has less left than this call took:
        slow the fleet until it resets, before the next calls run into a 429."""
        left, reset = reply.tokens_remaining, reply.tokens_reset
        if left is None or reset is None or self.on_pushback is None or profile not in self.limited:
            return
        if left < max(reply.usage.input_tokens + reply.usage.output_tokens, 1):
            self.on_pushback(profile, reset)

    def _pushed_back(self, profile: str, exc: ApplicationError) -> None:
        """Tell the fleet's governor that the provider of a limited profile pushed back."""
        if exc.type != ModelErrorKind.RATE_LIMITED or self.on_pushback is None:
            return
        if profile in self.limited:
            delay = exc.next_retry_delay.total_seconds() if exc.next_retry_delay else None
            self.on_pushback(profile, delay)

    def _table(self) -> dict[str, ProfileTable]:
        # checked on each call (one stat), so an edited profiles file applies without a restart
        path = self.settings.profiles_file
        stamp = _file_stamp(path)
        cached = self._profiles
        if cached is not None and stamp is not None and cached[0] == stamp:
            return cached[1]
        table = load_profiles(path)
        self._profiles = (stamp, table)
        return table

    def profile(self, name: str) -> Profile:
        try:
            return resolve_profile(name, self.env, self._table(), self.settings)
        except ProfileError as exc:
            raise ApplicationError(
                str(exc), type=ModelErrorKind.CONFIG_ERROR, non_retryable=True
            ) from None

    def scrubber(self) -> Scrubber:
        """Redacts every key this worker holds: each key variable any profile names."""
        try:
            tables = list(self._table().values())
        except ProfileError:  # an unreadable profiles file: the default variables still count
            tables = []
        return Scrubber(worker_keys(self.env, tables))

    async def ask(
        self,
        profile: Profile,
        messages: list[RenderedMessage],
        tools: list[ToolSpec],
        step: int,
        progress: StreamProgress | None = None,
    ) -> ProviderReply:
        """One provider call: the only way provider text enters a model activity (`call_model`
        and `compact_context`), and the one exit it leaves by. Errors leave scrubbed of every
        key the worker holds (`Scrubber.exit`), and so do the heartbeat details that carry
        `progress` (the streamed text so far) to watchers."""
        scrubber = self.scrubber()
        with scrubber.exit():
            adapter = adapter_for(profile, self.http)
            if progress is None:
                return await adapter.complete(messages, tools, step=step)
            return await with_heartbeat(
                adapter.complete(messages, tools, step=step, on_delta=progress.add),
                interval=0.5,
                details=lambda: scrubber.value(progress.snapshot()),
            )

    @activity.defn(name=ActivityName.DESCRIBE_MODEL.value)
    async def describe_model(self, request: DescribeModelInput) -> ModelChain:
        try:
            return model_chain(
                request.profile, self.env, self._table(), self.settings, self.limited
            )
        except ProfileError as exc:
            raise ApplicationError(
                str(exc), type=ModelErrorKind.CONFIG_ERROR, non_retryable=True
            ) from None

    @activity.defn(name=ActivityName.CALL_MODEL.value)
    async def call_model(self, request: CallModelInput) -> ModelReply:
        profile, budget = self._limits(request)
        if self._prepares_in_place(request, profile, budget):
            prompt = self._prepare(request, profile, budget)
        else:
            prompt = await with_heartbeat(
                asyncio.to_thread(self._prepare, request, profile, budget), interval=0.5
            )
        tools = prompt.tools
        rendered = list(prompt.view.messages)
        estimate = prompt.view.tokens
        attempt = activity.info().attempt if activity.in_activity() else 1
        progress = StreamProgress(request.run_id, request.step, attempt)
        started = time.monotonic()
        with self.telemetry.tracer.start_as_current_span(
            f"chat {profile.model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.system": profile.provider,
                "gen_ai.provider.name": profile.provider,
                "gen_ai.request.model": profile.model,
                "gen_ai.request.max_tokens": profile.max_output_tokens,
                "capstan.run_id": request.run_id,
                "capstan.step": request.step,
                "capstan.attempt": attempt,
            },
        ) as span:
            try:
                reply = await self.ask(profile, rendered, tools, request.step, progress)
            except ApplicationError as exc:
                self._pushed_back(profile.name, exc)
                raise
            self._budget_spent(profile.name, reply)
            span.set_attributes(
                {
                    "gen_ai.response.model": reply.model,
                    "gen_ai.response.finish_reasons": [reply.stop_reason],
                    "gen_ai.usage.input_tokens": reply.usage.input_tokens,
                    "gen_ai.usage.output_tokens": reply.usage.output_tokens,
                }
            )
        latency_ms = int((time.monotonic() - started) * 1000)
        usage = reply.usage.model_copy(update={"cost_usd": cost_of(reply.usage, profile.prices)})
        self._record_metrics(profile, usage, latency_ms)
        activity.logger.info(
            "model replied",
            extra={"run_id": request.run_id, "step": request.step, "attempt": attempt},
        ) if activity.in_activity() else None
        if self.content.on_local_disk and small_messages(request.new_messages, _reply_chars(reply)):
            assistant, head = self._record(request, prompt, reply)
        else:
            assistant, head = await with_heartbeat(
                asyncio.to_thread(self._record, request, prompt, reply), interval=0.5
            )
        return ModelReply(
            message=assistant,
            conversation=head,
            usage=usage,
            stop_reason=reply.stop_reason,
            model=reply.model,
            latency_ms=latency_ms,
            profile=profile.name,
            estimated_input_tokens=estimate,
            repaired_calls=sum(1 for c in reply.tool_calls if c.repaired),
        )

    def _record_metrics(self, profile: Profile, usage: Usage, latency_ms: int) -> None:
        labels = {"provider": profile.provider, "model": profile.model}
        self.telemetry.tokens.add(usage.input_tokens, {**labels, "type": "input"})
        self.telemetry.tokens.add(usage.output_tokens, {**labels, "type": "output"})
        self.telemetry.cost.add(usage.cost_usd, labels)
        self.telemetry.model_latency.record(latency_ms, labels)

    def _assistant(self, reply: ProviderReply, step: int) -> Message:
        store = self.content
        return Message(
            role="assistant",
            content=store.store_text(reply.text),
            tool_calls=tuple(
                ToolCall(id=c.id, name=c.name, arguments=store.store_text(c.arguments))
                for c in reply.tool_calls
            ),
            reasoning=store.store_text(reply.reasoning) if reply.reasoning else None,
            reasoning_signature=reply.reasoning_signature,
            origin="model",
            step=step,
        )

    def _limits(self, request: CallModelInput) -> tuple[Profile, ResultBudget]:
        """The call's profile, and the budget its tool results are rendered within."""
        profile = self.profile(request.profile)
        return profile, ResultBudget(
            max_lines=request.tool_result_max_lines,
            max_bytes=request.tool_result_max_bytes,
            max_tokens=min(
                request.tool_result_max_tokens,
                int(profile.context_window * request.tool_result_window_share),
            ),
            max_chars=request.observation_max_chars,
        )

    def _prepares_in_place(
        self, request: CallModelInput, profile: Profile, budget: ResultBudget
    ) -> bool:
        """Whether `_prepare` is small work on local disk: the conversation so far rendered in
        the cache, the tools read, the new messages inline and small, no workspace to read."""
        head = request.conversation
        return (
            self.content.on_local_disk
            and self._narrowed_to(profile) is None
            and request.tools.sha256 in self._tool_specs
            and (head is None or self.rendered.get(head.sha256, budget) is not None)
            and small_messages(request.new_messages)
        )

    def _narrowed_to(self, profile: Profile) -> Path | None:
        """The workspace whose files this profile's tools are narrowed to on each call (the
        bundled model's argument choices), or None."""
        if profile.provider != "local" or self.local_choices == "off":
            return None
        return self.workspace

    def _prepare(self, request: CallModelInput, profile: Profile, budget: ResultBudget) -> Prompt:
        """Tools and the rendered conversation (the cached part plus the new)."""
        base = render_view(
            self.content,
            request.conversation,
            budget,
            segments=self.segments,
            cache=self.rendered,
            count_tokens=self.count_tokens,
        )
        fresh = render(self.content, request.new_messages, budget)
        view = base.extend(fresh, self.count_tokens)
        tools = self._tools(request.tools)
        workspace = self._narrowed_to(profile)
        if workspace is not None:
            lines = self.local_choices == "lines"
            own = workspace / workspace_subdir(request.workspace)  # the run's, not the root
            tools = narrow_for_call(tools, own, view.messages, lines=lines)
        return Prompt(profile, budget, tools, view)

    def _record(
        self, request: CallModelInput, prompt: Prompt, reply: ProviderReply
    ) -> tuple[Message, BlobRef]:
        """Store the reply, append the step's segment, and cache its rendering for the next
        call (which will name this head)."""
        assistant = self._assistant(reply, request.step)
        head = append_segment(
            self.content,
            request.conversation,
            request.step,
            [*request.new_messages, assistant],
            cache=self.segments,
        )
        rendered = render(self.content, [assistant], prompt.budget)
        self.rendered.put(
            head.sha256, prompt.budget, prompt.view.extend(rendered, self.count_tokens)
        )
        return assistant, head

    def _tools(self, ref: BlobRef) -> list[ToolSpec]:
        specs = self._tool_specs.get(ref.sha256)
        if specs is None:
            raw = json.loads(self.content.read_bytes(ref.sha256))
            specs = [ToolSpec.model_validate(t) for t in raw]
            if len(self._tool_specs) >= 64:
                self._tool_specs.clear()
            self._tool_specs[ref.sha256] = specs
        return specs


def _file_stamp(path: Path | None) -> tuple[int, int, int] | None:
    """What changes when a file is edited (None: no file, or it cannot be read now)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _reply_chars(reply: ProviderReply) -> int:
    """The characters of a reply that `_record` stores."""
    calls = sum(len(c.arguments) for c in reply.tool_calls)
    reasoning = len(reply.reasoning or "") + len(reply.reasoning_signature or "")
    return len(reply.text) + reasoning + calls
