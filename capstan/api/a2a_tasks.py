"""Capstan runs as A2A tasks: task ids, contexts, states, status messages and the output
artifact, built from what the API reads of a run. Pure: no IO, so every mapping is tested
without a server (`capstan.api.a2a_runs` does the reading).

Task ids. A thread's runs share one workflow id (`thread-<tenant>:<thread>`), and A2A wants a
task id per run, never reused: a task is one run of the thread, named by the workflow id and
the first Temporal execution of that run's continue-as-new chain, `<workflow id>~<execution>`.
The part before `~` is the run id every REST route takes. A bare run id (a run started with
`POST /api/runs`, the CLI or Python) names that run's latest chain: such runs never reuse ids.
`~` is in no run id (`RUN_ID_PATTERN`), so the split is unambiguous.

Contexts. A task's context is its thread: the thread's name for a thread's run (what
`/api/threads/{thread}` takes), the run id itself for a run outside any thread.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format, struct_pb2

from capstan.audit.events import RunEvent
from capstan.core.content import BlobRef, Text
from capstan.core.spec import TerminalReason
from capstan.core.steering import ApprovalRequest, PendingView, Question
from capstan.core.tenants import DEFAULT_TENANT, THREAD_PATTERN, THREAD_PREFIX

__all__ = [
    "ANNOUNCING",
    "INTERRUPTED",
    "OUTPUT_ARTIFACT",
    "TERMINAL",
    "Ending",
    "TaskRef",
    "artifact_update",
    "asks",
    "context_of",
    "ended_task",
    "open_requests",
    "own_request",
    "progress_update",
    "running_task",
    "status_update",
    "submitted_task",
]

TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
OUTPUT_ARTIFACT = "output"
_SEPARATOR = "~"
#: Temporal's run ids are UUIDs
_EXECUTION = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", re.IGNORECASE)
_THREAD = re.compile(THREAD_PATTERN)
#: how much of a call's arguments an input-required message shows as text (the data part
#: carries the request whole)
_SHOWN_ARGUMENTS = 300
#: the run events that announce a request (`data` is the request)
ANNOUNCING = frozenset({"approval_requested", "question_asked"})
#: run events that say nothing a task's reader needs as progress: the request events are the
#: `input-required` status, the end is the final status
_UNSHOWN = ANNOUNCING | {"continued_as_new", "run_ended", "waiting"}


@dataclass(frozen=True)
class TaskRef:
    """One run as a task: its workflow id and the first execution of its chain (None: the
    latest chain of a run id that is never reused)."""

    workflow_id: str
    execution: str | None = None

    @property
    def task_id(self) -> str:
        if self.execution is None:
            return self.workflow_id
        return f"{self.workflow_id}{_SEPARATOR}{self.execution}"

    @classmethod
    def parse(cls, task_id: str) -> TaskRef | None:
        """The task id's parts, or None when it cannot name a run."""
        workflow_id, separator, execution = task_id.partition(_SEPARATOR)
        if not workflow_id:
            return None
        if not separator:
            return cls(workflow_id)
        return cls(workflow_id, execution) if _EXECUTION.fullmatch(execution) else None


def context_of(workflow_id: str, tenant: str) -> str:
    """The context (thread name) of the tenant's run; a run outside any thread is its own."""
    prefix = THREAD_PREFIX if tenant == DEFAULT_TENANT else f"{THREAD_PREFIX}{tenant}:"
    name = workflow_id.removeprefix(prefix)
    return name if name != workflow_id and _THREAD.fullmatch(name) else workflow_id


def open_requests(
    pending: PendingView, ignore: frozenset[str] = frozenset()
) -> tuple[list[ApprovalRequest], list[Question]]:
    """The requests the run waits on, less those just decided (`ignore`: the run still lists
    a request until it has taken the decision)."""
    approvals = [a for a in pending.approvals if a.request_id not in ignore]
    questions = [q for q in pending.questions if q.request_id not in ignore]
    return approvals, questions


def own_request(run_id: str, request_id: str) -> bool:
    """Whether the run opened the request itself (`<run>/<step>/<call>`): its history announces
    it. A delegated child's (`<run>/<agent>-<step>.<index>/...`) is announced in the child's."""
    rest = request_id.removeprefix(f"{run_id}/")
    return rest != request_id and rest.partition("/")[0].isdigit()


def asks(run_id: str, pending: PendingView, ignore: frozenset[str], announced: set[str]) -> bool:
    """Whether a followed run waits on a request (less `ignore`), each of its own already
    announced in the history read so far (`announced`): the `pending` query may be ahead of
    that history, and the steps that led to the request are sent before it."""
    approvals, questions = open_requests(pending, ignore)
    ids = [a.request_id for a in approvals] + [q.request_id for q in questions]
    return bool(ids) and all(r in announced or not own_request(run_id, r) for r in ids)


def _agent_message(ref: TaskRef, context: str, message_id: str, *parts: Part) -> Message:
    return Message(
        message_id=message_id,
        role=Role.ROLE_AGENT,
        parts=list(parts),
        task_id=ref.task_id,
        context_id=context,
    )


def _data(value: Any) -> struct_pb2.Value:
    data = struct_pb2.Value()
    json_format.ParseDict(value, data)
    return data


def _shown(text: Text) -> str:
    raw = text.preview if isinstance(text, BlobRef) else text
    return raw if len(raw) <= _SHOWN_ARGUMENTS else raw[: _SHOWN_ARGUMENTS - 1] + "…"


def _asking(approvals: list[ApprovalRequest], questions: list[Question]) -> str:
    """The requests as a person reads them, with how to reply."""
    lines = [
        f"Approve {a.tool} {_shown(a.arguments)}? ({a.reason}; request {a.request_id}) "
        "Reply 'approve', or 'deny' and why."
        for a in approvals
    ]
    for q in questions:
        options = f" Options: {', '.join(q.options)}." if q.options else ""
        lines.append(f"{q.question}{options} (request {q.request_id}) Reply with the answer.")
    if len(approvals) + len(questions) > 1:
        lines.append(
            'Several requests are open: decide each with a data part {"decision": "approve" or '
            '"deny", "request_id": ...} or {"answer": ..., "request_id": ...}.'
        )
    return "\n".join(lines)


def _requests_message(
    ref: TaskRef, context: str, approvals: list[ApprovalRequest], questions: list[Question]
) -> Message:
    ids = ",".join([a.request_id for a in approvals] + [q.request_id for q in questions])
    message_id = f"{ref.task_id}/requests/{hashlib.sha256(ids.encode()).hexdigest()[:16]}"
    listed = {
        "approvals": [a.model_dump(mode="json") for a in approvals],
        "questions": [q.model_dump(mode="json") for q in questions],
    }
    return _agent_message(
        ref,
        context,
        message_id,
        Part(text=_asking(approvals, questions)),
        Part(data=_data(listed), media_type="application/json"),
    )


def _status(
    ref: TaskRef, context: str, state: TaskState, at: datetime | None, text: str | None = None
) -> TaskStatus:
    status = TaskStatus(state=state, timestamp=at) if at is not None else TaskStatus(state=state)
    if text is not None:
        message_id = f"{ref.task_id}/status/{TaskState.Name(state).lower()}"
        status.message.CopyFrom(_agent_message(ref, context, message_id, Part(text=text)))
    return status


def submitted_task(ref: TaskRef, context: str, now: datetime) -> Task:
    """A task as the message that started its run created it (a stream's first event)."""
    status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=now)
    return Task(id=ref.task_id, context_id=context, status=status)


def running_task(
    ref: TaskRef,
    context: str,
    pending: PendingView,
    now: datetime,
    ignore: frozenset[str] = frozenset(),
) -> Task:
    """A running run: `input-required` while it waits on an approval or a question (its
    message lists them, as text and as data), else `working`."""
    approvals, questions = open_requests(pending, ignore)
    if approvals or questions:
        status = TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, timestamp=now)
        status.message.CopyFrom(_requests_message(ref, context, approvals, questions))
    elif pending.awaiting_steps:
        text = "the run waits at its step limit for more steps (POST /api/runs/{id}/grant)"
        status = _status(ref, context, TaskState.TASK_STATE_WORKING, now, text)
    elif pending.paused:
        status = _status(ref, context, TaskState.TASK_STATE_WORKING, now, "the run is paused")
    else:
        status = _status(ref, context, TaskState.TASK_STATE_WORKING, now)
    return Task(id=ref.task_id, context_id=context, status=status)


@dataclass(frozen=True)
class Ending:
    """How a run ended: its reason (None when it ended outside Capstan: terminated, timed
    out), when (None: not known), its error, and its output as data (a typed result's JSON
    value, else text)."""

    reason: TerminalReason | None
    closed: datetime | None
    error: str | None = None
    output: Any = None
    output_format: str = "text"
    #: Temporal cancelled the workflow (outside Capstan, with no result)
    cancelled: bool = False


def _ended_state(ending: Ending) -> TaskState:
    if ending.reason is TerminalReason.COMPLETED:
        return TaskState.TASK_STATE_COMPLETED
    if ending.reason is TerminalReason.CANCELLED or (ending.reason is None and ending.cancelled):
        return TaskState.TASK_STATE_CANCELED
    return TaskState.TASK_STATE_FAILED


def _output_artifact(ending: Ending) -> Artifact | None:
    if ending.output is None:
        return None
    if ending.output_format == "json":
        part = Part(data=_data(ending.output), media_type="application/json")
    else:
        text = ending.output if isinstance(ending.output, str) else json.dumps(ending.output)
        part = Part(text=text, media_type="text/plain")
    return Artifact(
        artifact_id=OUTPUT_ARTIFACT,
        name=OUTPUT_ARTIFACT,
        description="the run's answer",
        parts=[part],
    )


def ended_task(ref: TaskRef, context: str, ending: Ending) -> Task:
    """A run that ended: `completed`, `canceled` or `failed` (the message names the reason);
    its output, whatever the reason, is the `output` artifact."""
    state = _ended_state(ending)
    text = None
    if state != TaskState.TASK_STATE_COMPLETED:
        reason = ending.reason.value if ending.reason else "outside Capstan"
        text = f"the run ended {reason}" + (f": {ending.error}" if ending.error else "")
    task = Task(
        id=ref.task_id,
        context_id=context,
        status=_status(ref, context, state, ending.closed, text),
    )
    artifact = _output_artifact(ending)
    if artifact is not None:
        task.artifacts.append(artifact)
    return task


def status_update(task: Task) -> TaskStatusUpdateEvent:
    """The task's status as a stream event."""
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)


def artifact_update(task: Task) -> list[TaskArtifactUpdateEvent]:
    """The task's artifacts as stream events, each whole."""
    return [
        TaskArtifactUpdateEvent(
            task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
        )
        for artifact in task.artifacts
    ]


def progress_update(ref: TaskRef, context: str, event: RunEvent) -> TaskStatusUpdateEvent | None:
    """A step of the run (a model reply, a tool call, a message it took) as a `working`
    status whose message says what happened; the event itself is in the metadata
    (`capstan_event`). None for events that are not progress (`_UNSHOWN`)."""
    if event.kind in _UNSHOWN:
        return None
    text = f"{event.kind}: {event.summary}" if event.summary else event.kind
    message_id = f"{ref.task_id}/event/{event.seq}"
    status = TaskStatus(
        state=TaskState.TASK_STATE_WORKING,
        message=_agent_message(ref, context, message_id, Part(text=text)),
        timestamp=datetime.fromisoformat(event.time),
    )
    update = TaskStatusUpdateEvent(task_id=ref.task_id, context_id=context, status=status)
    update.metadata.update({"capstan_event": event.model_dump(mode="json")})
    return update
