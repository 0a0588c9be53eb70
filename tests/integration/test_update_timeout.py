"""`steer(checked=True)` when no worker answers: the input goes as a signal, or says why not."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from capstan.client.runs import CapstanClient
from capstan.core.spec import RunSpec
from capstan.core.steering import PauseRequest
from capstan.runtime.config import Settings
from tests.integration.helpers import history_events

pytestmark = pytest.mark.server


async def test_an_update_no_worker_takes_goes_as_a_signal(
    temporal: Client, settings: Settings
) -> None:
    client = CapstanClient(temporal, settings)
    run_id = await client.start_run(RunSpec(task="t"))  # nobody polls this task queue
    ack = await client.steer(run_id, PauseRequest(id="p-1"), checked=True, update_timeout=1.0)
    assert ack is None  # sent, not acknowledged
    events = await history_events(client.handle(run_id))
    signals = [e for e in events if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"]
    assert len(signals) == 1
    await client.handle(run_id).terminate("test over")
