"""What a run tells webhooks when it opens a request: the `notify_request` activity's input and
result, and where the request is in the inbox.

The workflow starts one `notify_request` per newly opened approval request or question and
never waits for it (`capstan.workflows.webhook_starts`), on a task queue of its own
(`delivery_queue`) so that deliveries never take the activity slots a run's model and tool calls
need; the worker's webhook configuration and secrets stay with the activity
(`capstan.activities.notify_request`).
Everything here is recorded in history, so it holds no secret and no URL of a hook. Pure: no
IO, clock or Temporal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from capstan.core.steering import ApprovalRequest, Question

__all__ = [
    "NotifyInput",
    "NotifyKind",
    "NotifyResult",
    "delivery_queue",
    "inbox_path",
    "newly_opened",
    "request_anchor",
]

#: what opened: an approval request or a question (`ask_user`)
NotifyKind = Literal["approval", "question"]


class NotifyInput(BaseModel):
    """One opened request to post to the worker's webhooks. Exactly one of `approval` and
    `question` is set, as `kind` says."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    kind: NotifyKind
    approval: ApprovalRequest | None = None
    question: Question | None = None
    #: the request on the inbox's run page (`capstan serve`), relative to `CAPSTAN_INBOX_URL`
    inbox_path: str

    @property
    def request_id(self) -> str:
        request = self.approval or self.question
        assert request is not None
        return request.request_id


class NotifyResult(BaseModel):
    """How many hooks took the request (hooks that do not want this kind are not counted)."""

    model_config = ConfigDict(frozen=True)

    delivered: int = 0
    hooks: int = 0


def delivery_queue(task_queue: str) -> str:
    """The task queue of a run's `notify_request` deliveries: beside the run's own, served by
    each of its workers with slots of their own (`capstan.activities.deliveries`)."""
    return f"{task_queue}.webhooks"


def request_anchor(run_id: str, request_id: str) -> str:
    """The id of the request's card in the inbox pages (`capstan.api.inbox`)."""
    return "q" + hashlib.sha256(f"{run_id} {request_id}".encode()).hexdigest()[:12]


def inbox_path(run_id: str, request_id: str) -> str:
    """The run page of the inbox, scrolled to the request's card. A delegated child's request
    (its run id is the path `root/agent-STEP.INDEX`) is shown and decided on its root's page."""
    root = run_id.split("/", 1)[0]
    return f"/runs/{quote(root, safe='')}#{request_anchor(root, request_id)}"


def newly_opened(
    run_id: str,
    approvals: Collection[ApprovalRequest],
    questions: Collection[Question],
    announced: Collection[str],
    kinds: Collection[NotifyKind] | None = None,
) -> list[NotifyInput]:
    """A notification for each open request whose id is not in `announced` and whose kind is
    in `kinds` (the catalog's `notify`: what the worker's hooks want; None, every kind), in
    order."""
    out = [
        NotifyInput(
            run_id=run_id,
            kind="approval",
            approval=a,
            inbox_path=inbox_path(run_id, a.request_id),
        )
        for a in approvals
        if a.request_id not in announced
    ]
    out += [
        NotifyInput(
            run_id=run_id,
            kind="question",
            question=q,
            inbox_path=inbox_path(run_id, q.request_id),
        )
        for q in questions
        if q.request_id not in announced
    ]
    return [item for item in out if kinds is None or item.kind in kinds]
