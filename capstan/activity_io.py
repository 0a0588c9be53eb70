"""Inputs and outputs of Capstan's activities, shared by the workflow and the activities.

Every field here is recorded in history, so nothing here may hold a secret or unbounded text:
large content travels as `BlobRef`. Fields are only ever added, with defaults.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from capstan.content import BlobRef, Text
from capstan.messages import Message, Usage

__all__ = [
    "CallModelInput",
    "ListToolsInput",
    "ModelReply",
    "RunToolInput",
]


class ListToolsInput(BaseModel):
    model_config = ConfigDict(frozen=True)

    allowed: tuple[str, ...] | None = None


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


class ModelReply(BaseModel):
    """The assistant's reply, with the new conversation head that includes it."""

    model_config = ConfigDict(frozen=True)

    message: Message
    conversation: BlobRef
    usage: Usage
    stop_reason: str
    model: str
    latency_ms: int = 0


class RunToolInput(BaseModel):
    """One tool call. `idempotency_key` is `workflow_id/step/call_id`, stable across retries."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    step: int
    call_id: str
    name: str
    arguments: Text
    idempotency_key: str
