"""Human input to a run: signal and update payloads, and the records they leave.

Every input carries a client-chosen `id` (duplicates are applied once) and the `identity` the
client sent. Handlers in the workflow only fold these into the state through the pure loop; the
loop consumes their effect at the next step boundary. Pure types only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from capstan.content import Text

__all__ = [
    "Ack",
    "Answer",
    "ApprovalRecord",
    "ApprovalRequest",
    "BudgetGrant",
    "BudgetName",
    "CancelRequest",
    "Decision",
    "LiveMessage",
    "PauseRequest",
    "PendingView",
    "Question",
    "ResumeRequest",
    "SteeringInput",
    "SteeringPayload",
    "StepGrant",
]


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = ""
    identity: str = ""


class Decision(_Input):
    """A reviewer's decision on one approval request.

    `args_hash` is the hash the reviewer was shown; a decision for other arguments is rejected.
    `arguments` (JSON text) is required for `edit` and re-validated against the tool's schema and
    the policy. `always` approves this call and every later call of the same tool in the run.
    """

    kind: Literal["decision"] = "decision"
    request_id: str
    args_hash: str
    action: Literal["approve", "deny", "edit", "always"]
    reason: str = ""
    arguments: str | None = None


class PauseRequest(_Input):
    kind: Literal["pause"] = "pause"
    reason: str = ""


class ResumeRequest(_Input):
    kind: Literal["resume"] = "resume"


class CancelRequest(_Input):
    """End the run at the next step boundary with terminal reason `cancelled`."""

    kind: Literal["cancel"] = "cancel"
    reason: str = ""


class LiveMessage(_Input):
    """A user message delivered to the model at its next step, in order of arrival."""

    kind: Literal["message"] = "message"
    text: str


class Answer(_Input):
    """The answer to an `ask_user` question; it becomes the tool's observation."""

    kind: Literal["answer"] = "answer"
    request_id: str
    text: str


class StepGrant(_Input):
    """More steps for a run waiting at its step limit; 0 ends it with `max_steps`."""

    kind: Literal["grant_steps"] = "grant_steps"
    steps: int = Field(ge=0)


BudgetName = Literal["tool_calls", "input_tokens", "output_tokens", "cost_usd", "wall_seconds"]


class BudgetGrant(_Input):
    """More of a budget for a run that waits because the budget ran out."""

    kind: Literal["grant_budget"] = "grant_budget"
    budget: BudgetName
    amount: float = Field(ge=0)


#: Every human input, as a plain union (for clients) ...
SteeringPayload = (
    Decision
    | PauseRequest
    | ResumeRequest
    | CancelRequest
    | LiveMessage
    | Answer
    | StepGrant
    | BudgetGrant
)
#: ... and discriminated by `kind` (for decoding).
SteeringInput = Annotated[SteeringPayload, Field(discriminator="kind")]


class Ack(BaseModel):
    """What an update returns: applied, or ignored as a duplicate."""

    applied: bool
    detail: str = ""


class ApprovalRequest(BaseModel):
    """A tool call waiting for a human. Its id is `run_id/step/call_id`."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    call_id: str
    step: int
    tool: str
    arguments: Text
    args_hash: str
    reason: str
    expires_at: datetime


class Question(BaseModel):
    """An `ask_user` call waiting for an answer."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    call_id: str
    step: int
    question: str
    options: list[str] | None = None
    expires_at: datetime


class ApprovalRecord(BaseModel):
    """What happened to an approval request or question, for the transcript and the audit."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    tool: str
    action: Literal["approve", "deny", "edit", "always", "expired", "answered", "policy_deny"]
    identity: str = ""
    at: datetime | None = None
    args_hash: str = ""
    executed_arguments: Text | None = None
    reason: str = ""


class PendingView(BaseModel):
    """The `pending` query: what the run waits for."""

    run_id: str
    approvals: list[ApprovalRequest] = []
    questions: list[Question] = []
    awaiting_steps: bool = False
    paused: bool = False
