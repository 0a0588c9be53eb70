"""`bench/breakdown.py`: per-kind medians read from a history's event times."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.breakdown import Breakdown


def event(event_id: int, kind: EventType.ValueType, at_ms: float) -> HistoryEvent:
    e = HistoryEvent(event_id=event_id, event_type=kind)
    e.event_time.FromNanoseconds(int(at_ms * 1e6))
    return e


def one_run(model_ms: float, task_ms: float) -> list[HistoryEvent]:
    started = event(3, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED, 10)
    started.activity_task_started_event_attributes.scheduled_event_id = 2
    done = event(4, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, 10 + model_ms)
    done.activity_task_completed_event_attributes.scheduled_event_id = 2
    scheduled = event(2, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 9)
    scheduled.activity_task_scheduled_event_attributes.activity_type.name = "call_model"
    return [
        event(1, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED, 0),
        event(2, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, task_ms),
        scheduled,
        started,
        done,
    ]


def test_medians_per_activity_type_and_workflow_tasks_per_run() -> None:
    parts = Breakdown()
    for model_ms, task_ms in [(4.0, 5.0), (6.0, 7.0), (50.0, 6.0)]:
        parts.add(one_run(model_ms, task_ms))
    assert parts.summary() == {
        "activity_ms:call_model": 6.0,
        "workflow_task_ms": 6.0,
        "workflow_tasks_per_run": 1.0,
    }
