"""Helpers for integration tests: a worker on the test's own task queue, history recording."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from capstan.audit.history import load_histories
from capstan.runtime.config import Settings

# the in-process worker on a fake model is the test kit's (`capstan.testing`), shared with users
from capstan.testing.worker import SECRET_KEY, model_env, running_worker  # noqa: F401

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The events of the run's current execution."""
    history = await handle.fetch_history()
    return list(json.loads(history.to_json())["events"])


async def chain_events(temporal: Client, run_id: str) -> list[dict[str, Any]]:
    """The events of every execution of the run, oldest first (a run continues as new before
    it waits for a person, so its earlier steps are in an earlier execution)."""
    events: list[dict[str, Any]] = []
    for history in await load_histories(temporal, run_id):
        events += json.loads(history.to_json())["events"]
    return events


_CLOSES_ACTIVITY = (
    "activityTaskCompletedEventAttributes",
    "activityTaskFailedEventAttributes",
    "activityTaskTimedOutEventAttributes",
    "activityTaskCanceledEventAttributes",
)


async def quiet_events(
    handle: WorkflowHandle[Any, Any], timeout: float = 30.0
) -> list[dict[str, Any]]:
    """The current execution's events once it waits: its last workflow task completed and every
    activity it started is over. A run that asks for approval answers queries (from its last
    execution) a moment before its fresh execution has finished its first task."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = await history_events(handle)
        scheduled = "activityTaskScheduledEventAttributes"
        open_activities = {e["eventId"] for e in events if scheduled in e}
        for event in events:
            for key in _CLOSES_ACTIVITY:
                if key in event:
                    open_activities.discard(event[key]["scheduledEventId"])
        tasks = [e["eventType"] for e in events if "_WORKFLOW_TASK_" in e["eventType"]]
        if tasks and tasks[-1].endswith("WORKFLOW_TASK_COMPLETED") and not open_activities:
            return events  # the commands of the last task follow its completion
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the run never settled: last event {events[-1]['eventType']}")
        await asyncio.sleep(0.05)


async def record_history(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """Write the run's history into tests/histories/ when CAPSTAN_RECORD_HISTORIES=1: its
    current execution as `name.json`, and for a run that continued as new each earlier one as
    `name.N.json` (N from 0, oldest first), so both sides of a continue-as-new replay.

    An existing file is kept: histories of earlier versions must go on replaying. Record a new
    scenario under a new name (or delete a file on purpose, with a reason in the commit).
    """
    target = HISTORIES / f"{name}.json"
    if os.environ.get("CAPSTAN_RECORD_HISTORIES") != "1" or target.exists():
        return
    *earlier, current = await load_histories(handle._client, handle.id)
    HISTORIES.mkdir(exist_ok=True)
    for i, history in enumerate(earlier):
        (HISTORIES / f"{name}.{i}.json").write_text(history.to_json())
    target.write_text(current.to_json())


ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The `capstan` command as a user runs it, pointed at the test's server and data dir
    (`env`: more variables, or overrides)."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.address,
        "CAPSTAN_TASK_QUEUE": settings.task_queue,
        "CAPSTAN_DATA_DIR": str(settings.data_dir),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "capstan", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
