"""A run's Temporal history, decoded into typed entries: the raw material of audits, replays
and the step-level event stream.

Edge module (reads from the server). Every payload is decoded with the pydantic converter into
the same models the workflow and activities use, so nothing is re-interpreted by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import ContinueAsNewInitiator, EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from capstan.core.activity_table import ACTIVITIES
from capstan.core.spec import RunResult
from capstan.core.steering import STEER, SteeringInput, by_signal
from capstan.core.workflow_io import REQUESTS_MEMO, OpenRequests, StartInput
from capstan.runtime.codec import decrypt_history

__all__ = ["CLOSING", "Entry", "decode_history", "first_run_id", "load_histories"]

_BY_WORKFLOW = ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW

ACTIVITY_TYPES: dict[str, tuple[Any, Any]] = {
    name.value: (spec.input, spec.result) for name, spec in ACTIVITIES.items()
}


@dataclass
class Entry:
    """One meaningful history event, decoded."""

    kind: str
    run_id: str
    event_id: int
    time: datetime
    name: str = ""
    data: Any = None
    result: Any = None
    error: str | None = None
    attempt: int = 1
    identity: str = ""
    activity_id: str = ""
    started: datetime | None = None
    finished: datetime | None = None
    finished_event_id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _decode(payloads: Any, hint: Any) -> Any:
    items = list(payloads.payloads) if hasattr(payloads, "payloads") else list(payloads)
    if not items:
        return None
    try:
        return pydantic_data_converter.payload_converter.from_payloads(items, [hint])[0]
    except Exception as exc:
        return {"undecodable": f"{type(exc).__name__}: {exc}"}


Activities = dict[int, Entry]


def decode_history(history: WorkflowHistory) -> list[Entry]:
    """The entries of one run's history, in order; activities folded into one entry each."""
    run_id = (
        history.events[0].workflow_execution_started_event_attributes.original_execution_run_id
        if history.events
        else ""
    )
    out: list[Entry] = []
    activities: dict[int, Entry] = {}
    for event in history.events:
        entry = _entry(event, run_id or history.workflow_id, activities)
        if entry is not None:
            out.append(entry)
    return out


def _time(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime().replace(tzinfo=None)


def _started(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    a = event.workflow_execution_started_event_attributes
    # the spec only: the state a continued execution carries is not part of the audit, and
    # Temporal's own record says whether the workflow continued itself as new (decoding the
    # state would load the loop's types; a retry or cron run would be "continued" too, but
    # not by the workflow)
    return Entry(
        "run_started",
        run_id,
        event.event_id,
        _time(event),
        data=_decode(a.input, StartInput),
        identity=a.identity,
        extra={"continued": a.initiator == _BY_WORKFLOW},
    )


def _scheduled(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    a = event.activity_task_scheduled_event_attributes
    name = a.activity_type.name
    data = _decode(a.input, ACTIVITY_TYPES.get(name, (Any, Any))[0])
    entry = Entry(
        "activity",
        run_id,
        event.event_id,
        _time(event),
        name=name,
        data=data,
        activity_id=a.activity_id,
    )
    acts[event.event_id] = entry
    return entry


def _activity_started(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    a = event.activity_task_started_event_attributes
    if (entry := acts.get(a.scheduled_event_id)) is not None:
        entry.attempt, entry.started, entry.identity = a.attempt, _time(event), a.identity
    return None


def _activity_completed(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    a = event.activity_task_completed_event_attributes
    if (entry := acts.get(a.scheduled_event_id)) is not None:
        entry.result = _decode(a.result, ACTIVITY_TYPES.get(entry.name, (Any, Any))[1])
        entry.finished = _time(event)
        entry.finished_event_id = event.event_id
    return None


def _activity_ended_badly(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    t = event.event_type
    if t == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        attrs: Any = event.activity_task_failed_event_attributes
    elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
        attrs = event.activity_task_timed_out_event_attributes
    else:
        attrs = event.activity_task_canceled_event_attributes
    if (entry := acts.get(attrs.scheduled_event_id)) is not None:
        failure = getattr(attrs, "failure", None)
        message = failure.message if failure is not None and failure.message else ""
        entry.error = message or EventType.Name(t)
        entry.finished = _time(event)
        entry.finished_event_id = event.event_id
    return None


def _signaled(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    a = event.workflow_execution_signaled_event_attributes
    name, data = _steering_input(a.signal_name, a.input)
    return Entry(
        "signal", run_id, event.event_id, _time(event), name=name, data=data, identity=a.identity
    )


def _update(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    r = event.workflow_execution_update_accepted_event_attributes.accepted_request
    name, data = _steering_input(r.input.name, r.input.args)
    return Entry(
        "update",
        run_id,
        event.event_id,
        _time(event),
        name=name,
        data=data,
        identity=r.meta.identity,
    )


def _steering_input(name: str, payloads: Any) -> tuple[str, Any]:
    """Decode a steering signal or update, whichever name it came under (`steer`, or a
    per-input name from before it); the entry is named by the input's per-input signal name,
    so readers see one name per input type whatever the client sent."""
    kind = by_signal(name)
    data = _decode(payloads, SteeringInput if name == STEER else kind or Any)
    wire = getattr(type(data), "wire", None)
    return (wire.signal if wire is not None else name), data


def _timer(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    seconds = event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
    return Entry(
        "wait", run_id, event.event_id, _time(event), extra={"seconds": seconds.total_seconds()}
    )


def _cancel_requested(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    who = event.workflow_execution_cancel_requested_event_attributes.identity
    return Entry("cancel_requested", run_id, event.event_id, _time(event), identity=who)


def _completed(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    result = _decode(event.workflow_execution_completed_event_attributes.result, RunResult)
    return Entry("run_ended", run_id, event.event_id, _time(event), data=result)


def _continued(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    new_run = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return Entry(
        "continued_as_new", run_id, event.event_id, _time(event), extra={"new_run_id": new_run}
    )


def _memo(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
    if REQUESTS_MEMO not in fields:
        return None
    data = _decode([fields[REQUESTS_MEMO]], OpenRequests)
    return Entry("open_requests", run_id, event.event_id, _time(event), data=data)


def _ended_badly(event: HistoryEvent, run_id: str, acts: Activities) -> Entry | None:
    name = EventType.Name(event.event_type)
    return Entry("run_ended", run_id, event.event_id, _time(event), error=name)


_HANDLERS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: _started,
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: _scheduled,
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: _activity_started,
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: _activity_completed,
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: _activity_ended_badly,
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: _activity_ended_badly,
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: _activity_ended_badly,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: _signaled,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: _update,
    EventType.EVENT_TYPE_TIMER_STARTED: _timer,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED: _cancel_requested,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: _completed,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: _continued,
    EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED: _memo,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: _ended_badly,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: _ended_badly,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: _ended_badly,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: _ended_badly,
}


def _entry(event: HistoryEvent, run_id: str, activities: Activities) -> Entry | None:
    handler = _HANDLERS.get(event.event_type)
    return None if handler is None else handler(event, run_id, activities)


async def load_histories(
    client: Client, workflow_id: str, closed: dict[str, WorkflowHistory] | None = None
) -> list[WorkflowHistory]:
    """Every run of the workflow id's latest chain, oldest first (the continue-as-new chain).

    The chain is walked from its first run through each continue-as-new event, so it is exact
    at once (a listing lags behind visibility, and may hold older runs that reused the id).
    Pass the same `closed` dict on every poll: runs that are over are fetched once and kept.
    """
    run_id = await first_run_id(client, workflow_id)
    histories: list[WorkflowHistory] = []
    while run_id:
        cached = closed.get(run_id) if closed is not None else None
        if cached is None:
            fetched = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
            # encrypted payloads (a codec) are decrypted with the client's keys, once
            cached = await decrypt_history(fetched, client.data_converter)
        last = cached.events[-1] if cached.events else None
        if closed is not None and last is not None and last.event_type in CLOSING:
            closed[run_id] = cached
        histories.append(cached)
        run_id = _continued_to(last)
    return histories


async def first_run_id(client: Client, workflow_id: str) -> str | None:
    """The first run of the workflow id's latest chain, or None when there is no such id."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return desc.raw_description.workflow_execution_info.first_run_id or desc.run_id


def _continued_to(last: HistoryEvent | None) -> str | None:
    if last is None or last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return None
    return last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id or None


CLOSING = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}
