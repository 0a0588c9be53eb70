"""The workflow's public surface: its input, signal payloads and query answers.

Shared by `capstan.workflows.agent` (which defines the handlers) and `capstan.client` (which calls
them), so both sides agree on names and types. Fields are only ever added, with defaults.
"""

from __future__ import annotations

from pydantic import BaseModel

from capstan.core.content import BlobRef
from capstan.core.messages import Message, ToolCall
from capstan.core.spec import RunSpec
from capstan.core.state import RunState
from capstan.core.steering import ApprovalRecord, ApprovalRequest, CancelRequest, Question

__all__ = [
    "ANNOUNCE_PATCH",
    "CANCEL_IN_FLIGHT_PATCH",
    "CHILDREN_MEMO",
    "COMPACTION_PATCH",
    "CONTEXT_PATCH",
    "GUARDS_PATCH",
    "INHERITED_MEMO",
    "NOTIFY_PATCH",
    "PARALLEL_START_PATCH",
    "REQUESTS_MEMO",
    "TERMINAL_MEMO",
    "TERMINAL_MEMO_PATCH",
    "TOOL_POLICY_PATCH",
    "WAIT_FRESH_PATCH",
    "WORKFLOW_NAME",
    "AgentInput",
    "CancelRequest",
    "OpenRequests",
    "TranscriptView",
]

WORKFLOW_NAME = "AgentWorkflow"

#: Deprecated patch id (`workflow.deprecate_patch`) of tool policy and approvals: every run has
#: them now; histories that carry the marker still replay, histories from before it do not.
TOOL_POLICY_PATCH = "tool-policy-v1"

#: `workflow.patched` id: a `cancel` signal cancels in-flight activities instead of waiting for
#: them. Runs recorded before it let the activity finish first.
CANCEL_IN_FLIGHT_PATCH = "cancel-in-flight-v1"

#: Deprecated patch id: the model chain is described at run start (`describe_model`) and the
#: context window is managed (compaction, fallback models), in every run now.
CONTEXT_PATCH = "context-v1"

#: `workflow.patched` id: open approval requests and questions are announced in the memo
#: (memo key `REQUESTS_MEMO`), which puts them in history for audits and the event stream.
ANNOUNCE_PATCH = "announce-requests-v1"
REQUESTS_MEMO = "capstan_open_requests"

#: Deprecated patch id: turn-quality nudges, circuit breakers, finish guards and budgets, in
#: every run now.
GUARDS_PATCH = "guards-v1"

#: `workflow.patched` id: a run's terminal reason is written to its memo (key `TERMINAL_MEMO`)
#: as it ends, so `capstan ls` shows and filters it without fetching every result.
TERMINAL_MEMO_PATCH = "terminal-memo-v1"
TERMINAL_MEMO = "capstan_terminal_reason"

#: `workflow.patched` id: compaction hysteresis (`capstan.core.context.RELIEF`). A prune that
#: leaves the request too close to `compact_at` is followed by a summary in the same step. Runs
#: recorded before it replay with the rule off (`ContextState.hysteresis`).
COMPACTION_PATCH = "compaction-hysteresis-v1"

#: Memo key: the children a run delegated to (a list of `capstan.core.children.ChildRun`), so
#: clients find the tree (and its open requests) with no worker running.
CHILDREN_MEMO = "capstan_children"
#: The memo keys a child run inherits from its parent: the tenant that owns the run
#: (`capstan.api.tenancy.TENANT_MEMO`), so a child belongs to its parent's tenant.
INHERITED_MEMO = ("capstan_tenant",)

#: `workflow.patched` id: each newly opened request starts a `notify_request` activity that
#: the run never waits for (`capstan.workflows.notify`); runs recorded before it start none.
NOTIFY_PATCH = "notify-requests-v1"

#: `workflow.patched` id: a new run lists its tools and describes its model at once (one
#: workflow task instead of two before the first model call); the loop still folds the two
#: outcomes in its order. Runs recorded before it ran them one after the other.
PARALLEL_START_PATCH = "parallel-start-v1"

#: `workflow.patched` id: a run that has taken a step continues as new before it waits for a
#: person (`capstan.core.decision.waits_fresh`), so delivering the decision to a run the
#: worker's cache no longer holds replays a few events. Runs recorded before it wait in place.
WAIT_FRESH_PATCH = "wait-fresh-v1"

#: `workflow.patched` id: the worker's tool policy is a ceiling a run may narrow, never widen
#: (`capstan.core.privilege.tool_decision`), and the worker's `deny_arguments` always apply.
#: Executions recorded before it replay with the rules they ran with (`RunState.legacy_policy`):
#: a parked run that relied on the old precedence is not stuck on replay, and it moves to the
#: new rules at its next continue-as-new (a fresh execution records the marker).
LEAST_PRIVILEGE_PATCH = "least-privilege-v1"


class AgentInput(BaseModel):
    """The workflow input: the spec, plus the carried state after a continue-as-new."""

    spec: RunSpec
    carried: RunState | None = None


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
    inbox: list[Message] = []
