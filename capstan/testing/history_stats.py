"""Measure a run's Temporal history: bytes per step across the continue-as-new chain.

Used by the history-growth test and by `bench/`. A step is the span of events from one
`call_model` schedule to the next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client

__all__ = ["HistoryStats", "measure_history"]


@dataclass
class HistoryStats:
    step_bytes: list[int]
    step_events: list[int]
    largest_event_bytes: int
    runs: int

    def mean_bytes(self, first: int, last: int) -> float:
        """Mean bytes of steps first..last (1-based, inclusive)."""
        window = self.step_bytes[first - 1 : last]
        return sum(window) / len(window)


def _is_model_call(event: dict[str, Any]) -> bool:
    attrs = event.get("activityTaskScheduledEventAttributes") or {}
    return bool(attrs.get("activityType", {}).get("name") == "call_model")


async def measure_history(client: Client, workflow_id: str) -> HistoryStats:
    """Bytes and events of every step of the run, oldest run of the chain first."""
    run_ids = [wf.run_id async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    events: list[dict[str, Any]] = []
    for run_id in reversed(run_ids):  # visibility lists newest first
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events.extend(json.loads(history.to_json())["events"])
    step_bytes: list[int] = []
    step_events: list[int] = []
    largest = 0
    for event in events:
        size = len(json.dumps(event))
        largest = max(largest, size)
        if _is_model_call(event):
            step_bytes.append(0)
            step_events.append(0)
        if step_bytes:
            step_bytes[-1] += size
            step_events[-1] += 1
    return HistoryStats(step_bytes, step_events, largest, len(run_ids))
