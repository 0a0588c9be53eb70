"""The workflow's public surface: its start input, signal payloads and query answers.

Shared by `capstan.workflows.agent` (which defines the handlers) and `capstan.client` (which calls
them), so both sides agree on names and types. Fields are only ever added, with defaults.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall
from capstan.core.spec import RunSpec
from capstan.core.steering import ApprovalRecord, ApprovalRequest, CancelRequest, Question

__all__ = [
    "CHILDREN_MEMO",
    "INHERITED_MEMO",
    "REQUESTS_MEMO",
    "TERMINAL_MEMO",
    "WORKFLOW_NAME",
    "CancelRequest",
    "OpenRequests",
    "Query",
    "StartInput",
    "TranscriptView",
]

WORKFLOW_NAME = "AgentWorkflow"


class Query(StrEnum):
    """The workflow's query names: the handlers (`capstan.workflows.agent`) and the client ask
    these, never a string typed in place."""

    STATUS = "status"
    PENDING = "pending"
    TRANSCRIPT = "transcript"


#: Memo key: open approval requests and questions (`OpenRequests`), announced there
#: (`Patch.ANNOUNCE`) so clients see them with no worker running and history keeps them.
REQUESTS_MEMO = "capstan_open_requests"
#: Memo key: a run's terminal reason, written as it ends (`Patch.TERMINAL_MEMO`), so
#: `capstan ls` shows and filters it without fetching every result.
TERMINAL_MEMO = "capstan_terminal_reason"
#: Memo key: the children a run delegated to (a list of `capstan.core.children.ChildRun`), so
#: clients find the tree (and its open requests) with no worker running.
CHILDREN_MEMO = "capstan_children"
#: The memo keys a child run inherits from its parent: the tenant that owns the run
#: (`capstan.api.tenancy.TENANT_MEMO`), so a child belongs to its parent's tenant.
INHERITED_MEMO = ("capstan_tenant",)


class StartInput(BaseModel):
    """What starts a run: its spec. The workflow's input type is its subclass
    `capstan.core.agent_input.AgentInput`, which adds the state a continue-as-new carries; a
    client sends and reads only this part, so it never loads the loop's state types to start or
    inspect a run (issue 28's start target). Decoding a continued run's input as `StartInput`
    reads its spec and leaves the carried state aside."""

    spec: RunSpec


class OpenRequests(BaseModel):
    """The memo entry announcing what a run waits for (approvals and questions)."""

    approvals: list[ApprovalRequest] = []
    questions: list[Question] = []


class TranscriptView(BaseModel):
    """Query `transcript`: the conversation head plus what is not yet in the chain.

    The client resolves the chain from the blob store into steps (see `capstan.client.transcript`).
    """

    conversation: BlobRef | None
    pending: list[Message]
    in_flight: list[ToolCall]
    step: int
    records: list[ApprovalRecord] = []
    diagnostics: list[str] = []
    #: the oldest live messages waiting (at most `INBOX_MESSAGES`), and how many wait in all
    inbox: list[Message] = []
    messages_waiting: int = 0
