"""The workflow's public surface: its input, signal payloads and query answers.

Shared by `workflows.agent` (which defines the handlers) and `capstan.client` (which calls them),
so both sides agree on names and types. Fields are only ever added, with defaults.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from capstan.content import BlobRef
from capstan.messages import Message, ToolCall
from capstan.spec import RunSpec
from capstan.state import RunState

__all__ = [
    "WORKFLOW_NAME",
    "AgentInput",
    "CancelRequest",
    "TranscriptView",
]

WORKFLOW_NAME = "AgentWorkflow"


class AgentInput(BaseModel):
    """The workflow input: the spec, plus the carried state after a continue-as-new."""

    spec: RunSpec
    carried: RunState | None = None


class CancelRequest(BaseModel):
    """Signal `cancel`: end the run at the next step boundary with terminal reason `cancelled`."""

    model_config = ConfigDict(frozen=True)

    reason: str = ""
    id: str = ""
    identity: str = ""


class TranscriptView(BaseModel):
    """Query `transcript`: the conversation head plus what is not yet in the chain.

    The client resolves the chain from the blob store into steps (see `capstan.transcript`).
    """

    conversation: BlobRef | None
    pending: list[Message]
    in_flight: list[ToolCall]
    step: int
