"""A new run lists its tools and describes its model at once (`parallel-start-v1`): its first
workflow task schedules both activities, and the loop still folds their outcomes in its order.
Runs recorded before the gate replay with the two one after the other (tests/test_replay.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from capstan.core.patches import Patch
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import history_events
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server


def _first_task_schedules(events: list[dict[str, Any]]) -> list[str]:
    """The activities the run's first workflow task scheduled."""
    first = next(i for i, e in enumerate(events) if e["eventType"].endswith("TASK_COMPLETED"))
    names = []
    for event in events[first + 1 :]:
        if event["eventType"].endswith("WORKFLOW_TASK_SCHEDULED"):
            break
        attributes = event.get("activityTaskScheduledEventAttributes")
        if attributes:
            names.append(attributes["activityType"]["name"])
    return names


def _patches(events: list[dict[str, Any]]) -> list[str]:
    """The patch ids the run's markers record."""
    found = []
    for event in events:
        marker = event.get("markerRecordedEventAttributes")
        if marker and marker["markerName"] == "core_patch":
            (payload,) = marker["details"]["patch-data"]["payloads"]
            found.append(json.loads(base64.b64decode(payload["data"]))["id"])
    return found


async def test_tools_and_model_are_asked_for_at_once(agent: Agent, workspace) -> None:
    script = [say(call("list_dir")), say(call("finish", answer="listed"))]
    async with agent.serving(script) as live:
        run_id = await live.start(agent.spec("list the workspace"))
        run = await live.finish(run_id, history="parallel_start")
        events = await history_events(live.client.handle(run_id))
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert _first_task_schedules(events) == ["list_tools", "describe_model"]
    assert Patch.PARALLEL_START in _patches(events)
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    ]
    assert scheduled.count("describe_model") == 1  # the early one is the one the loop used


async def test_a_model_that_cannot_be_described_still_ends_the_run(agent: Agent) -> None:
    run = await agent.run([], model="no-such-profile")
    assert run.result.terminal_reason is TerminalReason.MODEL_ERROR
    assert "no-such-profile" in (run.result.error or "")
