"""Human input to a run: signal and update payloads, and the records they leave.

Every input carries a client-chosen `id` (duplicates are applied once) and the `identity` the
client sent. Handlers in the workflow only fold these into the state through the pure loop; the
loop consumes their effect at the next step boundary. Pure types only.

This module is the one registry of steering inputs. Each input type names, in its `wire` class
attribute, everything other places derive from it: the signal name older clients send (and older
histories hold), its event in the run's event stream, and its CLI command. The workflow's `steer`
signal and update, the client, history decoding, the event stream and the CLI all read
`STEERING_TYPES`; adding an input means adding a class to `SteeringPayload`, its fold in
`capstan.core.inputs`, and its behaviour in the loop, and nothing else.

Free text in an input is `Text`: inline when small, a `BlobRef` into the blob store when large
(`text_fields` names those fields; the client stores large text before sending, and
`capstan.core.limits` bounds what may travel inline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from capstan.core.content import BlobRef, Text, preview_of
from capstan.core.errors import SteeringError
from capstan.core.limits import INPUT_NAME_CHARS, describe, text_problem
from capstan.core.strict import StrictModel, describe_invalid

__all__ = [
    "STEER",
    "STEERING_TYPES",
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
    "SteeringBase",
    "SteeringInput",
    "SteeringPayload",
    "StepGrant",
    "Wire",
    "by_signal",
    "decode_input",
    "describe_invalid",
    "pick_request",
    "size_problem",
    "text_fields",
]

#: The one signal and the one (validated) update every steering input travels on.
STEER = "steer"


@dataclass(frozen=True)
class Wire:
    """How one input type appears outside the loop.

    `signal` is its own signal name from before the single `steer` signal (still accepted, and
    found in older histories; `<signal>_update` was its update). `event` is its kind in the event
    stream. `commands` are the CLI commands that send it; `positional` are the fields those take
    as positional arguments (every other field becomes an option). `custom_cli` marks an input
    whose commands are written by hand (they need more than the fields, e.g. a hash lookup).
    """

    signal: str
    event: str
    commands: tuple[str, ...]
    help: str
    positional: tuple[str, ...] = ()
    custom_cli: bool = False

    @property
    def legacy_update(self) -> str:
        return f"{self.signal}_update"


class SteeringBase(StrictModel):
    """What every steering input has: a client-chosen id (applied once) and who sent it.
    Unknown fields are refused (`StrictModel`): a misspelt field never changes what is sent."""

    model_config = ConfigDict(frozen=True)

    wire: ClassVar[Wire]

    id: str = ""
    identity: str = ""


class Decision(SteeringBase):
    """A reviewer's decision on one approval request.

    `args_hash` is the hash the reviewer was shown; a decision for other arguments is rejected.
    `arguments` (JSON text) is required for `edit` and re-validated against the tool's schema and
    the policy. `always` approves this call and every later call of the same tool in the run.
    """

    kind: Literal["decision"] = "decision"
    wire: ClassVar[Wire] = Wire(
        signal="decide",
        event="approval_decided",
        commands=("approve", "deny"),
        help="decide an approval request",
        custom_cli=True,
    )
    request_id: str
    args_hash: str
    action: Literal["approve", "deny", "edit", "always"]
    reason: Text = ""
    arguments: Text | None = None


class PauseRequest(SteeringBase):
    kind: Literal["pause"] = "pause"
    wire: ClassVar[Wire] = Wire(
        signal="pause", event="paused", commands=("pause",), help="pause at the next step boundary"
    )
    reason: Text = ""


class ResumeRequest(SteeringBase):
    kind: Literal["resume"] = "resume"
    wire: ClassVar[Wire] = Wire(
        signal="resume", event="resumed", commands=("resume",), help="resume a paused run"
    )


class CancelRequest(SteeringBase):
    """End the run at the next step boundary with terminal reason `cancelled`."""

    kind: Literal["cancel"] = "cancel"
    wire: ClassVar[Wire] = Wire(
        signal="cancel",
        event="cancel_requested",
        commands=("cancel",),
        help="end a run at its next step boundary",
    )
    reason: Text = ""


class LiveMessage(SteeringBase):
    """A user message delivered to the model at its next step, in order of arrival."""

    kind: Literal["message"] = "message"
    wire: ClassVar[Wire] = Wire(
        signal="send_message",
        event="message_received",
        commands=("send",),
        help="send a message the model reads at its next step",
        positional=("text",),
    )
    text: Text


class Answer(SteeringBase):
    """The answer to an `ask_user` question; it becomes the tool's observation."""

    kind: Literal["answer"] = "answer"
    wire: ClassVar[Wire] = Wire(
        signal="answer",
        event="question_answered",
        commands=("answer",),
        help="answer a question the agent asked",
        positional=("request_id", "text"),
    )
    request_id: str
    text: Text


class StepGrant(SteeringBase):
    """More steps for a run waiting at its step limit; 0 ends it with `max_steps`."""

    kind: Literal["grant_steps"] = "grant_steps"
    wire: ClassVar[Wire] = Wire(
        signal="grant_steps",
        event="steps_granted",
        commands=("grant",),
        help="give a run at its step limit N more steps (0 ends it)",
        positional=("steps",),
    )
    steps: int = Field(ge=0)


BudgetName = Literal["tool_calls", "input_tokens", "output_tokens", "cost_usd", "wall_seconds"]


class BudgetGrant(SteeringBase):
    """More of a budget for a run that waits because the budget ran out."""

    kind: Literal["grant_budget"] = "grant_budget"
    wire: ClassVar[Wire] = Wire(
        signal="grant_budget",
        event="budget_granted",
        commands=("grant-budget",),
        help="raise a spent budget of a waiting run",
        positional=("budget", "amount"),
    )
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

#: The registry: every input type, in the order of the union above.
STEERING_TYPES: tuple[type[SteeringPayload], ...] = get_args(SteeringPayload)

_BY_SIGNAL: dict[str, type[SteeringPayload]] = {t.wire.signal: t for t in STEERING_TYPES}
_BY_SIGNAL.update({t.wire.legacy_update: t for t in STEERING_TYPES})
_ADAPTER: TypeAdapter[SteeringPayload] = TypeAdapter(SteeringInput)


def by_signal(name: str) -> type[SteeringPayload] | None:
    """The input type a per-input signal or update name (from before `steer`) carries."""
    return _BY_SIGNAL.get(name)


def decode_input(data: object) -> SteeringPayload:
    """Validate a decoded JSON object as one steering input (dispatching on `kind`)."""
    return _ADAPTER.validate_python(data)


def _holds_refs(annotation: object) -> bool:
    return BlobRef in get_args(annotation)


#: Per input type, its fields of type `Text` (free text that may be large).
_TEXT_FIELDS: dict[type[SteeringBase], tuple[str, ...]] = {
    t: tuple(n for n, f in t.model_fields.items() if _holds_refs(f.annotation))
    for t in STEERING_TYPES
}


def text_fields(kind: type[SteeringBase]) -> tuple[str, ...]:
    """The fields of `kind` that carry free text: inline when small, a ref when large."""
    return _TEXT_FIELDS.get(kind, ())


def size_problem(item: SteeringBase) -> str | None:
    """Why `item` is too large to travel or be held (`capstan.core.limits`), or None."""
    texts = text_fields(type(item))
    for name, value in item:
        if name in texts:
            problem = text_problem(name, value)
        elif isinstance(value, str) and len(value) > INPUT_NAME_CHARS:
            problem = (
                f"{name} is {len(value):,} characters (at most {INPUT_NAME_CHARS}); it starts "
                f"{preview_of(value, 40)!r}"
            )
        else:
            continue
        if problem is not None:
            return problem
    return None


def pick_request(
    open_requests: Sequence[ApprovalRequest], request_id: str | None, run_id: str, verb: str
) -> ApprovalRequest:
    """The open approval request a decision is for: the one named, or with no name the only one
    open. `SteeringError` says which are open when that is ambiguous, or that the named one is
    not (every surface that decides, to `verb` it, picks the same way: client, REST, MCP)."""
    if request_id is None:
        if len(open_requests) != 1:
            ids = ", ".join(r.request_id for r in open_requests) or "none"
            raise SteeringError(f"name the request to {verb}; open requests: {ids}")
        return open_requests[0]
    match = next((r for r in open_requests if r.request_id == request_id), None)
    if match is None:
        raise SteeringError(f"no open approval request {request_id!r} in {run_id}")
    return match


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


#: A record keeps this much of a reason.
RECORD_REASON_CHARS = 500


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

    @field_validator("reason", mode="before")
    @classmethod
    def _reason_in_words(cls, value: object) -> object:
        """A reason sent as a ref (a long denial) is kept as its preview and its ref; a long
        inline one is cut (records are carried by every continue-as-new; the input itself, in
        history, keeps the whole text)."""
        if isinstance(value, BlobRef) or (isinstance(value, dict) and value.get("kind") == "ref"):
            return describe(BlobRef.model_validate(value))
        if isinstance(value, str) and len(value) > RECORD_REASON_CHARS:
            return value[: RECORD_REASON_CHARS - 1] + "…"
        return value


class PendingView(BaseModel):
    """The `pending` query: what the run waits for."""

    run_id: str
    approvals: list[ApprovalRequest] = []
    questions: list[Question] = []
    awaiting_steps: bool = False
    paused: bool = False
