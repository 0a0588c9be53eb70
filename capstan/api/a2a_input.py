"""What an A2A message says: its text, and, for a task in `input-required`, the decision or
answer it carries. Pure: the handler reads the task's open requests and sends what this
module makes of the message.

A message to a task that waits on one request may say it in words: for an approval, a first
word of `approve` (`approved`, `yes`, `y`, `ok`) or `deny` (`denied`, `no`, `n`, `reject`),
the rest of the text being the reason; for a question, the whole text is the answer. Any
message may say it as a data part instead, which names the request (needed when several are
open) and can approve for the rest of the run or with edited arguments::

    {"decision": "approve" | "deny" | "always", "request_id": "...", "reason": "...",
     "args_hash": "...",                          # the hash the task showed: binds the decision
     "arguments": {...}}                          # arguments: approve the call edited so
    {"answer": "...", "request_id": "..."}

Words decide the one request open when the message arrives; a caller that must be sure it
decides the call it saw sends `request_id` and `args_hash` (the task's status data has both),
and the run refuses the decision if that call is no longer the one waiting.

A decision for a request that is not open, two decisions in one message, words that are no
decision: `InvalidParamsError`, naming the open requests and how to reply. Files are not taken
(`ContentTypeNotSupportedError`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from a2a.types import Message
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf import json_format
from pydantic import Field, ValidationError, model_validator

from capstan.core.steering import ApprovalRequest, PendingView, Question
from capstan.core.strict import StrictModel

__all__ = ["Decide", "Reply", "Said", "read_message", "verdict"]

_APPROVE = frozenset({"approve", "approved", "yes", "y", "ok"})
_DENY = frozenset({"deny", "denied", "no", "n", "reject"})
#: the reason a denial in one word gives the model
DENIED = "denied by the reviewer"
_Request = TypeVar("_Request", ApprovalRequest, Question)


@dataclass(frozen=True)
class Said:
    """A message's text parts, and its data parts (JSON objects)."""

    text: str
    data: tuple[dict[str, Any], ...] = ()

    @property
    def decisions(self) -> list[dict[str, Any]]:
        return [d for d in self.data if "decision" in d or "answer" in d]

    def as_text(self) -> str:
        """The text, then each data part as JSON: what a model reads of the message."""
        shown = [json.dumps(d, ensure_ascii=False) for d in self.data]
        return "\n".join(t for t in (self.text, *shown) if t)


def read_message(message: Message) -> Said:
    """The text and data of a message; a file part is refused."""
    texts: list[str] = []
    data: list[dict[str, Any]] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            value = json_format.MessageToDict(part.data)
            if not isinstance(value, dict):
                raise InvalidParamsError("a data part of a message must be a JSON object")
            data.append(value)
        else:
            raise ContentTypeNotSupportedError("this agent takes text and data parts, not files")
    return Said("\n".join(t for t in texts if t), tuple(data))


@dataclass(frozen=True)
class Decide:
    """Decide an approval request."""

    request: ApprovalRequest
    action: Literal["approve", "deny", "edit", "always"]
    reason: str = ""
    #: the edited call's arguments (JSON text), for `edit`
    arguments: str | None = None
    #: the hash of the arguments the caller was shown (the task's status data carries it);
    #: when given, the run refuses the decision for any other call
    args_hash: str | None = None


@dataclass(frozen=True)
class Reply:
    """Answer a question."""

    question: Question
    text: str


class _DecisionPart(StrictModel):
    decision: Literal["approve", "deny", "always"] | None = None
    answer: str | None = Field(None, min_length=1)
    request_id: str | None = Field(None, max_length=1200)
    args_hash: str | None = Field(None, max_length=128)
    reason: str = Field("", max_length=10_000)
    arguments: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_verdict(self) -> _DecisionPart:
        if (self.decision is None) == (self.answer is None):
            raise ValueError('give either "decision" or "answer"')
        if self.arguments is not None and self.decision != "approve":
            raise ValueError('"arguments" edits a call that is approved ("decision": "approve")')
        return self


def _open_ids(pending: PendingView) -> str:
    ids = [a.request_id for a in pending.approvals] + [q.request_id for q in pending.questions]
    return ", ".join(ids) or "none"


def _pick(
    requests: list[_Request], request_id: str | None, what: str, pending: PendingView
) -> _Request:
    """The named request, or the only one of its kind."""
    if request_id is None:
        if len(requests) == 1:
            return requests[0]
        raise InvalidParamsError(
            f'name the {what} with "request_id"; open requests: {_open_ids(pending)}'
        )
    found = next((r for r in requests if r.request_id == request_id), None)
    if found is None:
        raise InvalidParamsError(
            f"no open {what} {request_id!r}; open requests: {_open_ids(pending)}"
        )
    return found


def _from_data(raw: dict[str, Any], pending: PendingView) -> Decide | Reply:
    try:
        part = _DecisionPart.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidParamsError(
            f"decision part: {where + ': ' if where else ''}{first['msg']}"
        ) from None
    if part.answer is not None:
        question = _pick(pending.questions, part.request_id, "question", pending)
        return Reply(question, part.answer)
    request = _pick(pending.approvals, part.request_id, "approval request", pending)
    shown = part.args_hash
    if part.arguments is not None:
        edited = json.dumps(part.arguments, ensure_ascii=False)
        return Decide(request, "edit", part.reason, edited, shown)
    if part.decision == "deny":
        return Decide(request, "deny", part.reason or DENIED, args_hash=shown)
    action: Literal["approve", "always"] = "always" if part.decision == "always" else "approve"
    return Decide(request, action, part.reason, args_hash=shown)


def _from_text(text: str, pending: PendingView) -> Decide | Reply:
    waiting = [*pending.approvals, *pending.questions]
    if len(waiting) != 1:
        raise InvalidParamsError(
            f"the task waits on {len(waiting)} requests ({_open_ids(pending)}): decide each "
            'with a data part {"decision": ..., "request_id": ...} or {"answer": ..., '
            '"request_id": ...}'
        )
    if pending.questions:
        if not text.strip():
            raise InvalidParamsError("the task waits for an answer: send it as text")
        return Reply(pending.questions[0], text)
    request = pending.approvals[0]
    word, _, rest = text.strip().partition(" ")
    word = word.lower().strip(".,:;!")
    rest = rest.strip().lstrip(":- ").strip()
    if word in _APPROVE:
        return Decide(request, "approve", rest)
    if word in _DENY:
        return Decide(request, "deny", rest or DENIED)
    raise InvalidParamsError(
        f"the task waits for a decision on {request.tool} (request {request.request_id}): "
        "reply 'approve', or 'deny' and why"
    )


def verdict(said: Said, pending: PendingView) -> Decide | Reply:
    """The decision or answer a message to a task that waits on `pending` carries."""
    parts = said.decisions
    if len(parts) > 1:
        raise InvalidParamsError("one decision or answer per message")
    if parts:
        return _from_data(parts[0], pending)
    return _from_text(said.text, pending)
