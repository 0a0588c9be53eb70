"""A closed run's status is answered from its result without asking anyone: not the run (a
query), not even whether a worker polls (a worker killed a moment ago stays listed as polling,
and a query to it waited 5 s). Its diagnostics and continue-as-new count come with the result,
so no history is read either; a result from before the count reads it from history."""

from __future__ import annotations

import pytest

from capstan.client import runs
from capstan.client.runs import CapstanClient
from capstan.core.spec import RunResult, TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_for, wait_pending

pytestmark = pytest.mark.server

SCRIPT = [say(call("write_file", path="a.txt", content="A")), say(call("finish", answer="ok"))]


async def test_a_closed_runs_status_asks_no_worker(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with agent.serving(SCRIPT) as live:
        client = live.client
        run_id = await live.start(agent.spec())
        await wait_pending(client, run_id)
        await client.handle(run_id).signal("steer", {"kind": "nope"})  # a diagnostic
        asked = await wait_for(lambda: client.status(run_id), lambda s: bool(s.diagnostics))
        await client.decide(run_id, "approve", checked=True)
        await client.result(run_id)

        async def no_one(self: CapstanClient) -> bool:
            raise AssertionError("a closed run's status asked about workers")

        async def no_history(*_: object) -> None:
            raise AssertionError("a closed run's status read its history")

        monkeypatch.setattr(CapstanClient, "workers_polling", no_one)
        with monkeypatch.context() as patch:
            patch.setattr(runs, "_snapshot", no_history)
            status = await client.status(run_id)  # the worker is still polling here
        # a result written before it carried its continue-as-new count: history counts them,
        # and agrees with the result's count (the run continued as new to wait for approval)
        older = (await client.result(run_id)).model_copy(update={"continued": None})

        async def old_result(self: CapstanClient, _: str) -> RunResult:
            return older

        monkeypatch.setattr(CapstanClient, "result", old_result)
        assert await client.status(run_id) == status
    assert status.source == "result" and status.phase == "finished"
    assert status.terminal_reason is TerminalReason.COMPLETED and status.output == "ok"
    assert status.diagnostics == asked.diagnostics and "ignored" in status.diagnostics[0]
