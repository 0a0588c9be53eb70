"""The model activities: `describe_model` (profile -> limits, prices, fallbacks) and `call_model`.

`call_model` has a constant-size input and output: the conversation arrives as a chain head plus
the new messages; the reply leaves as the new head plus the assistant message with large parts
as refs. While a reply streams in, its text so far rides on the activity's heartbeats, where
`capstan watch` reads it; the durable record is only the final reply.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx
from opentelemetry.trace import SpanKind
from temporalio import activity
from temporalio.exceptions import ApplicationError

from capstan.activities.budget import ResultBudget
from capstan.activities.heartbeat import with_heartbeat
from capstan.activities.providers.anthropic import AnthropicMessages
from capstan.activities.providers.base import ChatAdapter, ProviderReply
from capstan.activities.providers.openai_chat import OpenAIChat
from capstan.activities.providers.profiles import (
    Profile,
    ProfileError,
    ProfileTable,
    load_profiles,
    model_chain,
    resolve_profile,
)
from capstan.activities.rendering import render
from capstan.core.activity_io import CallModelInput, DescribeModelInput, ModelReply
from capstan.core.activity_table import ActivityName
from capstan.core.messages import Message, ToolCall, Usage
from capstan.core.model_errors import ModelErrorKind
from capstan.core.models import ModelChain, Prices
from capstan.core.tooling import ToolSpec
from capstan.runtime.blobstore import ContentStore
from capstan.runtime.config import ModelSettings
from capstan.runtime.conversation import append_segment, load_conversation
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


class ModelActivities:
    """Holds the HTTP client, the content store and the profiles; built once per worker."""

    def __init__(
        self,
        content: ContentStore,
        env: Mapping[str, str],
        http: httpx.AsyncClient,
        count_tokens: Callable[[str], int] | None = None,
        telemetry: Instruments | None = None,
    ) -> None:
        self.telemetry = telemetry or Instruments()
        self.content = content
        self.env = env
        self.http = http
        self.count_tokens = count_tokens or (lambda s: (len(s) + 3) // 4)
        # every non-secret model setting, parsed once: a bad value stops the worker at start
        # (ConfigError); `env` itself is kept only for the API keys profiles name
        self.settings = ModelSettings.from_env(env)

    def _table(self) -> dict[str, ProfileTable]:
        # read on each call, so an edited profiles file applies without a restart
        return load_profiles(self.settings.profiles_file)

    def profile(self, name: str) -> Profile:
        try:
            return resolve_profile(name, self.env, self._table(), self.settings)
        except ProfileError as exc:
            raise ApplicationError(
                str(exc), type=ModelErrorKind.CONFIG_ERROR, non_retryable=True
            ) from None

    @activity.defn(name=ActivityName.DESCRIBE_MODEL.value)
    async def describe_model(self, request: DescribeModelInput) -> ModelChain:
        try:
            return model_chain(request.profile, self.env, self._table(), self.settings)
        except ProfileError as exc:
            raise ApplicationError(
                str(exc), type=ModelErrorKind.CONFIG_ERROR, non_retryable=True
            ) from None

    @activity.defn(name=ActivityName.CALL_MODEL.value)
    async def call_model(self, request: CallModelInput) -> ModelReply:
        profile = self.profile(request.profile)
        history, tools = await asyncio.to_thread(self._load, request)
        budget = ResultBudget(
            max_lines=request.tool_result_max_lines,
            max_bytes=request.tool_result_max_bytes,
            max_tokens=min(
                request.tool_result_max_tokens,
                int(profile.context_window * request.tool_result_window_share),
            ),
            max_chars=request.observation_max_chars,
        )
        rendered = await asyncio.to_thread(render, self.content, history, budget)
        estimate = await asyncio.to_thread(
            lambda: sum(self.count_tokens(m.content) + 4 for m in rendered)
        )
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
            reply = await with_heartbeat(
                adapter_for(profile, self.http).complete(
                    rendered, tools, step=request.step, on_delta=progress.add
                ),
                interval=0.5,
                details=progress.snapshot,
            )
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
        assistant = self._assistant(reply, request.step)
        head = await asyncio.to_thread(
            append_segment,
            self.content,
            request.conversation,
            request.step,
            [*request.new_messages, assistant],
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

    def _load(self, request: CallModelInput) -> tuple[list[Message], list[ToolSpec]]:
        history = load_conversation(self.content, request.conversation)
        history.extend(request.new_messages)
        raw = json.loads(self.content.read_bytes(request.tools.sha256))
        return history, [ToolSpec.model_validate(t) for t in raw]
