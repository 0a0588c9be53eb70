"""A run parked for a person leaves the worker's cache (`capstan.host.run_cache`), and the
decision that wakes it reaches the task queue with the run's whole history, not the worker's
sticky queue (where core would first have to fetch that history). The run then goes on as
if it had stayed: it replays its fresh execution and runs the approved tool."""

from __future__ import annotations

import asyncio

import pytest

from capstan.core.spec import RunSpec, TerminalReason
from capstan.host.run_cache import RunCache
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import chain_events, quiet_events
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_crash import TOOLS, TUNING, kill, start_worker

pytestmark = pytest.mark.server


def _decision_task_queue_kind(events: list[dict[str, object]]) -> str:
    """The queue kind of the workflow task scheduled for the (last) signal."""
    signalled = max(
        i
        for i, e in enumerate(events)
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"
    )
    scheduled = next(
        e for e in events[signalled:] if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"
    )
    attributes = scheduled["workflowTaskScheduledEventAttributes"]
    assert isinstance(attributes, dict)
    return str(attributes["taskQueue"].get("kind", ""))


@pytest.mark.parametrize("idle_eviction", [True, False])
async def test_a_parked_run_leaves_the_cache_and_its_decision_comes_unstuck(
    agent: Agent, workspace, idle_eviction: bool
) -> None:
    script = [
        say(call("write_file", path="a.txt", content="approved")),
        say(call("finish", answer="written")),
    ]
    cache = RunCache()
    async with agent.serving(script, run_cache=cache) as live:
        client = live.client
        run_id = await live.start(agent.spec("write a file"))
        (request,) = (await wait_pending(client, run_id)).approvals
        await quiet_events(client.handle(run_id))
        assert cache.cached() >= 1
        if idle_eviction:
            # every run that is not mid-activation has been idle long enough
            assert await cache.release(0.0)
            assert cache.cached() == 0
            await asyncio.sleep(1.0)  # the stickiness reset is an RPC of its own
        await client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
        run = await live.finish(run_id)
        chain = await chain_events(live.client.client, run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED and run.result.output == "written"
    assert (workspace / "a.txt").read_text().strip() == "approved"
    expected = "TASK_QUEUE_KIND_NORMAL" if idle_eviction else "TASK_QUEUE_KIND_STICKY"
    assert _decision_task_queue_kind(chain) == expected


async def test_a_worker_process_lets_go_of_a_run_parked_past_its_idle_time(
    agent: Agent, settings: Settings
) -> None:
    """The same through `python worker.py` (its `CAPSTAN_IDLE_RELEASE` sweep), with a worker
    whose idle time is short: the decision is scheduled on the task queue, not the sticky one."""
    script = [
        say(call("append_line", path="log.txt", line="approved")),
        say(call("finish", answer="done")),
    ]
    spec = RunSpec(task="append after approval", tuning=TUNING, allowed_tools=TOOLS)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with FakeProvider(script) as fake:
        worker = start_worker(settings, fake, {"CAPSTAN_IDLE_RELEASE": "1"})
        try:
            client = agent.client
            run_id = await client.start_run(spec)
            (request,) = (await wait_pending(client, run_id, timeout=60)).approvals
            await asyncio.sleep(6.0)  # idle 1 s, swept every second, then the reset RPC: margin
            await client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
            result = await client.result(run_id)
        finally:
            kill(worker)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert (settings.workspace_dir / "log.txt").read_text() == "approved\n"
    chain = await chain_events(agent.temporal, run_id)
    assert _decision_task_queue_kind(chain) == "TASK_QUEUE_KIND_NORMAL"
