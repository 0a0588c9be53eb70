"""A run at Temporal's limit of signals per execution, as a real server refuses it.

The client waits for such a run to continue as new (`CapstanClient._signal`, unit-tested in
tests/unit/test_signal_limit.py) and knows the refusal only by the server's text: this test
pins that text against a real dev server whose limit is 20, with no worker, so the run never
continues and the wait ends in one clear line.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from capstan.client import runs
from capstan.client.runs import CapstanClient, SignalLimitError
from capstan.core.spec import RunSpec
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer
from tests.conftest import free_port

pytestmark = pytest.mark.server

LIMIT = 20


class _LowSignalLimit(EmbeddedServer):
    """A dev server that refuses an execution's signals past `LIMIT`."""

    def command(self) -> list[str]:
        limit = f"history.maximumSignalsPerExecution={LIMIT}"
        return [*super().command(), "--dynamic-config-value", limit]


@pytest.fixture
async def low_limit(tmp_path: Path) -> AsyncIterator[EmbeddedServer]:
    server = _LowSignalLimit(tmp_path / "temporal", port=free_port())
    await server.start()
    assert not server.reused
    try:
        yield server
    finally:
        server.stop()


async def test_a_send_past_the_servers_signal_limit_is_one_clear_line(
    low_limit: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "SIGNAL_LIMIT_WAIT", 1.0)
    settings = Settings(
        data_dir=tmp_path / "data",
        temporal_address=low_limit.address,
        task_queue=f"tq-{uuid.uuid4().hex[:10]}",
        identity="tester@ci",
    )
    client = await CapstanClient.connect(settings)
    run_id = await client.start_run(RunSpec(task="wait"))  # no worker: it never continues
    for i in range(LIMIT):
        await client.send_message(run_id, f"m{i}", f"m{i}")
    with pytest.raises(SignalLimitError) as caught:
        await client.send_message(run_id, "one too many", "late")
    message = str(caught.value)
    assert "\n" not in message and "limit of signals per execution" in message
