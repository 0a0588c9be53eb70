"""An AG-UI request read for Capstan, and the interrupts a waiting run raises.

A request is AG-UI's `RunAgentInput`, validated with the protocol's own model. Capstan reads
three things from it: the thread, the new user message (the last message, when it is the
user's: the rest of the conversation is the thread's own, kept by Capstan), and the answers to
interrupts (`resume`). Everything else (`state`, frontend `tools`, `context`,
`forwardedProps`) is accepted and not used.

An approval request or a question a run waits for is an `Interrupt` whose id is the request's
id, with the JSON Schema of the answer it takes (`responseSchema`):

    tool_approval   {"action": "approve" | "deny" | "always" | "edit", "reason"?: str,
                     "arguments"?: {...}, "args_hash"?: str}   (arguments: run with these)
    question        {"text": str}, or the text itself

A resume entry `cancelled` denies an approval ("The user cancelled this request.") or answers a
question with "The user declined to answer.". Each answer becomes the steering input the REST
API sends (`Decision`, `Answer`) with an id derived from the AG-UI run and the interrupt, so a
request sent twice decides once. Bad input is one `ApiError` line naming the field.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from ag_ui.core import (
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    TextPart,
    UserMessage,
)
from pydantic import Field, TypeAdapter, ValidationError

from capstan.api.agui_events import OpenRequest, Resolve, tool_call_id
from capstan.api.errors import ApiError
from capstan.core.steering import Answer, ApprovalRequest, Decision
from capstan.core.strict import StrictModel, describe_invalid

__all__ = [
    "MAX_RESUME",
    "ApprovalReply",
    "QuestionReply",
    "UserText",
    "answer_for",
    "input_id",
    "interrupt_for",
    "interrupt_id",
    "parse_input",
    "user_text",
]

#: the most answers one request's `resume` may carry (each may read the thread's history)
MAX_RESUME = 64

#: the longest message id a steering input takes (`capstan.core.limits`)
MAX_ID_CHARS = 200
#: the arguments an approval interrupt shows (the transcript keeps them whole)
SHOWN_ARGUMENTS_CHARS = 4_000
CANCELLED_APPROVAL = "The user cancelled this request."
CANCELLED_QUESTION = "The user declined to answer."


class ApprovalReply(StrictModel):
    """The answer to a `tool_approval` interrupt."""

    action: Literal["approve", "deny", "always", "edit"]
    #: what the model sees with a denial; recorded with any decision
    reason: str = Field("", max_length=10_000)
    #: run the call with these arguments instead (checked against the tool's schema)
    arguments: dict[str, Any] | None = None
    #: the hash you were shown (`metadata.capstan.args_hash`): refused if the call changed
    args_hash: str | None = Field(None, max_length=128)


class QuestionReply(StrictModel):
    """The answer to a `question` interrupt."""

    text: str = Field(min_length=1)


_APPROVAL_SCHEMA = ApprovalReply.model_json_schema()
_QUESTION_SCHEMA = QuestionReply.model_json_schema()
_REPLY = TypeAdapter(QuestionReply | str)


def parse_input(raw: bytes) -> RunAgentInput:
    """The body as AG-UI's `RunAgentInput`; a 422 naming the field otherwise."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # nested past any use
        raise ApiError(422, "invalid", "the body is not valid JSON", field="body") from None
    try:
        return RunAgentInput.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(["body", *(str(p) for p in first["loc"])])
        raise ApiError(422, "invalid", describe_invalid(exc), field=field) from None


class UserText(StrictModel):
    """The request's new user message: its AG-UI id (the id it is delivered with) and text."""

    id: str
    text: str


def user_text(request: RunAgentInput) -> UserText | None:
    """The last message when it is the user's, as text; None when the last is not."""
    if not request.messages or not isinstance(request.messages[-1], UserMessage):
        return None
    message = request.messages[-1]
    where = f"body.messages.{len(request.messages) - 1}"
    if not 0 < len(message.id) <= MAX_ID_CHARS:
        problem = f"a message id has 1 to {MAX_ID_CHARS} characters"
        raise ApiError(422, "invalid", problem, field=f"{where}.id")
    if isinstance(message.content, str):
        text = message.content
    else:
        if not all(isinstance(part, TextPart) for part in message.content):
            problem = "only text parts are supported in a user message"
            raise ApiError(422, "invalid", problem, field=f"{where}.content")
        text = "\n\n".join(part.text for part in message.content if isinstance(part, TextPart))
    if not text.strip():
        raise ApiError(422, "invalid", "the user message is empty", field=f"{where}.content")
    return UserText(id=message.id, text=text)


def input_id(agui_run_id: str, interrupt_id: str) -> str:
    """The id of the steering input that answers `interrupt_id` for one AG-UI run."""
    digest = hashlib.sha256(f"{agui_run_id}\0{interrupt_id}".encode()).hexdigest()
    return f"agui-{digest[:32]}"


def interrupt_id(request: OpenRequest) -> str:
    """The interrupt's id: the request id pinned to what was shown (the arguments' hash of an
    approval, the text of a question). A thread's runs share one workflow id and number their
    steps from 0 again, so a request id alone may name a later run's request: an answer to an
    interrupt the client saw must never settle one it did not."""
    shown = request.args_hash if isinstance(request, ApprovalRequest) else request.question
    pin = hashlib.sha256(shown.encode()).hexdigest()[:16]
    return f"{request.request_id}#{pin}"


def interrupt_for(request: OpenRequest, run_id: str, key: str, resolve: Resolve) -> Interrupt:
    """The AG-UI interrupt for a request of the run `run_id` (key: its `chain_key`)."""
    own = request.request_id == f"{run_id}/{request.step}/{request.call_id}"
    call = tool_call_id(key, request.step, request.call_id) if own else None
    expires = request.expires_at.isoformat()
    if isinstance(request, ApprovalRequest):
        arguments = resolve(request.arguments)
        cut = max(0, len(arguments) - SHOWN_ARGUMENTS_CHARS)
        if cut:
            arguments = arguments[:SHOWN_ARGUMENTS_CHARS] + "…"
        detail = {
            "tool": request.tool,
            "arguments": arguments,
            # characters not shown: approving such a call needs `args_hash` in the answer
            "arguments_cut": cut,
            "args_hash": request.args_hash,
            "why": request.reason,
        }
        return Interrupt(
            id=interrupt_id(request),
            reason="tool_approval",
            message=f"Allow {request.tool}?" + (f" ({request.reason})" if request.reason else ""),
            tool_call_id=call,
            response_schema=_APPROVAL_SCHEMA,
            expires_at=expires,
            metadata={"capstan": detail},
        )
    return Interrupt(
        id=interrupt_id(request),
        reason="question",
        message=request.question,
        tool_call_id=call,
        response_schema=_QUESTION_SCHEMA,
        expires_at=expires,
        metadata={"capstan": {"options": request.options}},
    )


def answer_for(
    entry: ResumeEntry, request: OpenRequest, where: str, agui_run_id: str
) -> Decision | Answer:
    """The steering input a resume entry sends for `request` (`where`: the entry's field).
    Edited arguments are sent as given: the caller checks them against the tool first."""
    ident = input_id(agui_run_id, interrupt_id(request))
    if isinstance(request, ApprovalRequest):
        if entry.status == "cancelled":
            reply = ApprovalReply(action="deny", reason=CANCELLED_APPROVAL)
        else:
            reply = _validated(ApprovalReply, entry.payload, where)
        action = "edit" if reply.arguments is not None else reply.action
        if action != "deny" and reply.args_hash is None and _cut_off(request):
            problem = (
                "the call's arguments were cut off in the interrupt: read them whole (GET "
                "/api/runs/{run_id}/pending) and approve with their args_hash"
            )
            raise ApiError(422, "invalid", problem, field=f"{where}.payload.args_hash")
        if action == "edit" and reply.arguments is None:
            raise ApiError(422, "invalid", "an edit needs arguments", field=f"{where}.payload")
        if action == "edit" and reply.action not in ("approve", "edit"):
            problem = f"arguments go with an approval, not with {reply.action!r}"
            raise ApiError(422, "invalid", problem, field=f"{where}.payload.arguments")
        return Decision(
            id=ident,
            request_id=request.request_id,
            args_hash=reply.args_hash or request.args_hash,  # the interrupt's id pinned it
            action=action,
            reason=reply.reason or ("The user denied this call." if action == "deny" else ""),
            arguments=json.dumps(reply.arguments, ensure_ascii=False)
            if reply.arguments is not None
            else None,
        )
    if entry.status == "cancelled":
        return Answer(id=ident, request_id=request.request_id, text=CANCELLED_QUESTION)
    try:
        reply_text = _REPLY.validate_python(entry.payload)
    except ValidationError:
        problem = 'a question is answered with {"text": "..."} or the text itself'
        raise ApiError(422, "invalid", problem, field=f"{where}.payload") from None
    text = reply_text.text if isinstance(reply_text, QuestionReply) else reply_text
    if not text.strip():
        raise ApiError(422, "invalid", "the answer is empty", field=f"{where}.payload")
    return Answer(id=ident, request_id=request.request_id, text=text)


def _cut_off(request: ApprovalRequest) -> bool:
    """Whether the interrupt showed less than the whole of the call's arguments."""
    arguments = request.arguments
    return not isinstance(arguments, str) or len(arguments) > SHOWN_ARGUMENTS_CHARS


def _validated(model: type[ApprovalReply], payload: Any, where: str) -> ApprovalReply:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise ApiError(
            422, "invalid", f"{where}.payload: {describe_invalid(exc)}", field=f"{where}.payload"
        ) from None
