"""The worker shares Capstan's workflow modules across runs instead of re-importing them into
every run's sandbox (the largest per-run cost of parked runs), and runs still behave."""

from __future__ import annotations

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from capstan.core.spec import TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from capstan.worker import build_worker
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server


async def test_workflow_modules_are_passed_through_the_sandbox(
    temporal: Client, settings: Settings
) -> None:
    async with httpx.AsyncClient() as http:
        worker = build_worker(temporal, settings, http)
    runner = worker._config["workflow_runner"]  # the SDK keeps no public accessor
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert "capstan.workflows" in runner.restrictions.passthrough_modules


async def test_runs_on_a_worker_sharing_the_modules_complete(agent: Agent) -> None:
    script = [say(call("list_dir", path=".")), say(call("finish", answer="listed"))]
    async with agent.serving(script) as live:
        first = await live.start(agent.spec("one"))
        second = await live.start(agent.spec("two"))
        results = [await live.client.result(first), await live.client.result(second)]
    assert [r.terminal_reason for r in results] == [TerminalReason.COMPLETED] * 2
