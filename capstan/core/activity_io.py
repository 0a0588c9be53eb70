"""Inputs and outputs of Capstan's activities, shared by the workflow and the activities.

Every field here is recorded in history, so nothing here may hold a secret or unbounded text:
large content travels as `BlobRef`. Fields are only ever added, with defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from capstan.core.content import BlobRef, Text
from capstan.core.messages import Message, Usage
from capstan.core.spec import SandboxLimits

__all__ = [
    "CallModelInput",
    "CheckFinishInput",
    "CompactInput",
    "CompactResult",
    "CompactionStrategy",
    "DescribeModelInput",
    "FinishVerdict",
    "ListToolsInput",
    "ModelReply",
    "RunToolInput",
]


class ListToolsInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    allowed: tuple[str, ...] | None = None
    #: the agents the run may delegate to: the listing offers `delegate` with these names
    delegates: tuple[str, ...] = ()
    #: the run's `output_schema`: `finish` is offered taking an answer of this shape
    output_schema: dict[str, Any] | None = None
    #: the output schemas of the delegates that answer with JSON, which `delegate` states
    delegate_outputs: dict[str, dict[str, Any]] = {}


class CallModelInput(BaseModel):
    """One model call: the conversation so far as a chain head plus the messages since then.

    The input has a constant size whatever the step, which keeps history linear in run length.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    step: int
    profile: str
    conversation: BlobRef | None
    new_messages: tuple[Message, ...]
    tools: BlobRef
    observation_max_chars: int = 16_000
    tool_result_max_tokens: int = 30_000
    tool_result_window_share: float = 0.4
    tool_result_max_lines: int = 2_000
    tool_result_max_bytes: int = 100_000
    #: the run's workspace key (`RunSpec.workspace`), whose files a local model may choose from
    workspace: str | None = None


class ModelReply(BaseModel):
    """The assistant's reply, with the new conversation head that includes it."""

    model_config = ConfigDict(frozen=True)

    message: Message
    conversation: BlobRef
    usage: Usage
    stop_reason: str
    model: str
    latency_ms: int = 0
    profile: str = ""
    estimated_input_tokens: int = 0
    repaired_calls: int = 0


class RunToolInput(BaseModel):
    """One tool call. `idempotency_key` is `workflow_id/step/call_id`, stable across retries."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    step: int
    call_id: str
    name: str
    arguments: Text
    idempotency_key: str
    #: the run's limits, for the sandbox tools only (`SANDBOX_TOOLS`)
    sandbox: SandboxLimits | None = None
    #: for arguments too large to travel inline (a ref the gate could not read): every
    #: `(field, pattern)` that denies the call, which `run_tool` checks on the resolved text
    deny_patterns: tuple[tuple[str, str], ...] | None = None
    #: the run's workspace key (`RunSpec.workspace`); None: the worker's workspace root
    workspace: str | None = None


class DescribeModelInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    profile: str


CompactionStrategy = Literal["warn", "prune", "summarize"]


class CompactInput(BaseModel):
    """Compact the conversation behind `conversation`, keeping the last `keep_turns` turns."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    step: int
    profile: str
    conversation: BlobRef
    strategy: CompactionStrategy
    keep_turns: int = 4
    reason: str = ""


class CompactResult(BaseModel):
    """The compacted conversation head (none for `warn`) and what changed."""

    model_config = ConfigDict(frozen=True)

    strategy: CompactionStrategy
    conversation: BlobRef | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    pruned: int = 0
    summarized: int = 0
    nudge: str | None = None
    #: tokens no compaction of this conversation can remove: the pinned messages and the
    #: last `keep_turns` turns (0: not reported)
    kept_tokens: int = 0


class CheckFinishInput(BaseModel):
    """A `finish` for the worker's finish guard hook to accept or refuse."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    step: int
    #: the answer; with `output_schema`, the `finish` call's whole arguments (`{"answer": ...}`)
    answer: Text
    #: check the answer against this schema first (a typed run); the worker resolves a large
    #: answer from the blob store, which workflow code cannot
    output_schema: dict[str, Any] | None = None
    #: ask the worker's finish guard hook too (it refuses at most once a run)
    hook: bool = True


class FinishVerdict(BaseModel):
    """The worker's verdict on a `finish`: its hook's refusal, or for a typed run either the
    answer's JSON (`output`) or what is wrong with it (`invalid`, with the answer in `output`
    as given, when it could be read)."""

    model_config = ConfigDict(frozen=True)

    refusal: str | None = None
    output: Text | None = None
    invalid: tuple[str, ...] = ()
