"""A run at Temporal's limit of signals per execution, as a real server refuses it.

The client waits for such a run to continue as new (`through_signal_limit`, unit-tested in
tests/unit/test_signal_limit.py) and knows the refusal only by the server's text: this test
pins that text against a real dev server whose limit is 20, with no worker, so the run never
continues and the wait ends in one clear line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from capstan.client import runs
from capstan.client.runs import CapstanClient, SignalLimitError
from capstan.client.threads import Threads
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
async def client(settings: Settings, tmp_path: Path) -> AsyncIterator[CapstanClient]:
    """A client of a server of its own whose limit is `LIMIT`, with no worker."""
    server = _LowSignalLimit(tmp_path / "temporal", port=free_port())
    await server.start()
    assert not server.reused
    try:
        yield await CapstanClient.connect(
            settings.model_copy(update={"temporal_address": server.address})
        )
    finally:
        server.stop()


async def test_a_send_past_the_servers_signal_limit_is_one_clear_line(
    client: CapstanClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs, "SIGNAL_LIMIT_WAIT", 1.0)
    run_id = await client.start_run(RunSpec(task="wait"))  # no worker: it never continues
    for i in range(LIMIT):
        await client.send_message(run_id, f"m{i}", f"m{i}")
    with pytest.raises(SignalLimitError) as caught:
        await client.send_message(run_id, "one too many", "late")
    message = str(caught.value)
    assert "\n" not in message and "limit of signals per execution" in message


async def test_a_thread_message_past_the_signal_limit_is_one_clear_line(
    client: CapstanClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's message goes to one execution, looked up again on each attempt; past the
    wait it is the same clear line, not Temporal's InvalidArgument (the API's 422)."""
    monkeypatch.setattr(runs, "SIGNAL_LIMIT_WAIT", 1.0)
    threads = Threads(client)
    first = await threads.send("ops", "m0", message_id="m0")  # starts the run, one signal
    assert first.started
    for i in range(1, LIMIT):
        sent = await threads.send("ops", f"m{i}", message_id=f"m{i}")
        assert not sent.started and sent.execution == first.execution
    with pytest.raises(SignalLimitError) as caught:
        await threads.send("ops", "one too many", message_id="late")
    assert "\n" not in str(caught.value)
