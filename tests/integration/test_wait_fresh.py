"""A run waits for a person in a fresh execution (`wait-fresh-v1`): once it has taken a step, it
continues as new before it waits, so the task that delivers the decision to a run the worker's
cache no longer holds replays a handful of events however long the run went on before.

Runs recorded before the gate wait where they are (tests/histories/approval_*.json replay so in
tests/test_replay.py); `wait_fresh.0.json` / `wait_fresh.json` are both sides of the gate, and
`wait_fresh_no_hooks.*` the same on a worker whose listing says it has no webhooks.
"""

from __future__ import annotations

import json

import pytest

from capstan.core.patches import Patch
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import chain_events, quiet_events
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending
from tests.integration.test_parallel_start import _patches

pytestmark = pytest.mark.server


def _types(events: list[dict[str, object]]) -> list[str]:
    return [str(e["eventType"]).removeprefix("EVENT_TYPE_") for e in events]


@pytest.mark.parametrize("steps_before", [1, 6])
async def test_a_run_waits_for_approval_in_a_short_fresh_execution(
    agent: Agent, workspace, steps_before: int
) -> None:
    reads = [say(call("read_file", path=f"note{i}.txt")) for i in range(steps_before - 1)]
    script = [
        *reads,
        say(call("write_file", path="a.txt", content="approved")),
        say(call("finish", answer="written")),
    ]
    async with agent.serving(script) as live:
        client = live.client
        run_id = await live.start(agent.spec("write a file"))
        (request,) = (await wait_pending(client, run_id)).approvals
        waiting = await quiet_events(client.handle(run_id))
        # what an evicted run replays to take the decision, whatever came before: its start,
        # two patch markers, the announcement, the expiry timer — one workflow task (10 events;
        # in one execution, the 6 steps before the wait came to 95 more)
        assert len(waiting) <= 12, _types(waiting)
        assert _types(waiting).count("WORKFLOW_TASK_COMPLETED") == 1
        memo_updates = _types(waiting).count("WORKFLOW_PROPERTIES_MODIFIED")
        assert memo_updates == 1  # the request is announced once, in the fresh execution
        assert not (workspace / "a.txt").exists()
        await client.decide(run_id, "approve", request.request_id, args_hash=request.args_hash)
        recorded = "wait_fresh_no_hooks" if steps_before == 6 else None
        run = await live.finish(run_id, history=recorded)
        chain = await chain_events(live.client.client, run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED and run.result.output == "written"
    assert (workspace / "a.txt").read_text().strip() == "approved"
    assert _types(chain).count("WORKFLOW_EXECUTION_CONTINUED_AS_NEW") == 1
    assert Patch.WAIT_FRESH in _patches(chain)
    # this worker has no webhooks (its listing says so): no notify_request, no task to wake
    assert '"notify_request"' not in json.dumps(chain)
    assert run.result.steps == steps_before + 1
