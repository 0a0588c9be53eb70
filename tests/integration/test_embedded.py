"""The embedded dev server: persistence across restarts, reuse, a port held by something else."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from capstan.client.runs import CapstanClient, connect_temporal
from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.runtime.embedded import EmbeddedServer, EmbeddedServerError
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.conftest import free_port
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_pending

pytestmark = [pytest.mark.server, pytest.mark.slow]


async def test_run_survives_server_restart(tmp_path: Path) -> None:
    port = free_port()
    settings = Settings(data_dir=tmp_path, temporal_address=f"127.0.0.1:{port}", task_queue="q")
    async with EmbeddedServer(tmp_path, port):
        client = CapstanClient(await connect_temporal(settings), settings)
        run_id = await client.start_run(RunSpec(task="survive"))  # no worker yet
    assert (tmp_path / "temporal.db").exists()
    async with EmbeddedServer(tmp_path, port) as server:
        assert not server.reused
        agent = Agent(await connect_temporal(settings), settings)
        async with agent.serving([say(call("finish", answer="persisted"))]) as live:
            result = await live.client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "persisted"


async def test_running_server_is_reused(dev_server: EmbeddedServer, tmp_path: Path) -> None:
    port = int(dev_server.address.rsplit(":", 1)[1])
    second = EmbeddedServer(tmp_path, port)
    await second.start()
    assert second.reused and second.process is None
    second.stop()  # must not stop the server it did not start
    assert dev_server.process is not None and dev_server.process.poll() is None


async def test_port_taken_by_something_else(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(EmbeddedServerError) as err:
            await EmbeddedServer(tmp_path, port).start()
    message = str(err.value)
    assert f"port {port}" in message and "not a Temporal server" in message
    assert "\n" not in message


async def test_server_killed_while_waiting_for_approval(tmp_path: Path) -> None:
    """The dev server is SIGKILLed while a run waits for approval; after a restart on the same
    SQLite file the approval goes through and the run completes."""
    port = free_port()
    settings = Settings(
        data_dir=tmp_path, temporal_address=f"127.0.0.1:{port}", task_queue="q", identity="ops"
    )
    script = [say(call("write_file", path="a.txt", content="x")), say(call("finish", answer="ok"))]
    with FakeProvider(script) as fake:
        first = EmbeddedServer(tmp_path, port)
        await first.start()
        try:
            agent = Agent(await connect_temporal(settings), settings)
            async with agent.serving(fake) as live:
                run_id = await live.start(RunSpec(task="write"))
                (request,) = (await wait_pending(live.client, run_id)).approvals
        finally:
            assert first.process is not None
            first.process.kill()  # SIGKILL: no clean shutdown
            first.process.wait()
        async with EmbeddedServer(tmp_path, port):
            agent = Agent(await connect_temporal(settings), settings)
            async with agent.serving(fake) as live:  # the same fake, on the restarted server
                await live.client.decide(
                    run_id, "approve", request.request_id, args_hash=request.args_hash
                )
                result = await asyncio.wait_for(live.client.result(run_id), 60)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert (settings.workspace_dir / "a.txt").read_text() == "x"
