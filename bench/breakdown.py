"""Where an iteration's time goes, read from the server's own event times.

The overhead section's ratios say how much slower Capstan is than the floor; this says where:
for each activity type the median time from its task starting to its completion being
recorded (the worker's whole share of it: decoding the input, the work, encoding the result,
the completion's round trip), the same for workflow tasks, and how many workflow tasks a run
took. Both sides are read from the same server's clock, so the comparison holds on a noisy
machine better than the totals do.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

__all__ = ["Breakdown"]


def _ms(event: HistoryEvent) -> float:
    return event.event_time.ToNanoseconds() / 1e6


class Breakdown:
    """Samples from several runs' histories: `add` each, then `summary`."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.runs = 0

    def add(self, events: list[HistoryEvent]) -> None:
        scheduled: dict[int, tuple[str, float]] = {}
        started: dict[int, float] = {}
        task_started = 0.0
        self.runs += 1
        for event in events:
            match event.event_type:
                case EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    name = event.activity_task_scheduled_event_attributes.activity_type.name
                    scheduled[event.event_id] = (name, _ms(event))
                case EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                    attrs = event.activity_task_started_event_attributes
                    started[attrs.scheduled_event_id] = _ms(event)
                case EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    key = event.activity_task_completed_event_attributes.scheduled_event_id
                    name, _ = scheduled[key]
                    self.samples[f"activity_ms:{name}"].append(_ms(event) - started[key])
                case EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                    task_started = _ms(event)
                case EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    self.samples["workflow_task_ms"].append(_ms(event) - task_started)

    def summary(self) -> dict[str, float]:
        """Medians per kind, and workflow tasks per run."""
        out = {k: round(statistics.median(v), 2) for k, v in sorted(self.samples.items())}
        out["workflow_tasks_per_run"] = round(
            len(self.samples["workflow_task_ms"]) / max(self.runs, 1), 1
        )
        return out
