"""How the workflow code runs: unsandboxed in a worker, under Temporal's strict sandbox in the
test suite (the runtime half of the determinism check), and runs behave the same on both."""

from __future__ import annotations

import os
from datetime import timedelta

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from capstan.core.spec import TerminalReason
from capstan.host.config import load_worker_config
from capstan.host.runner import workflow_runner
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from capstan.worker import build_worker
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server


def test_a_worker_runs_workflows_unsandboxed_unless_told() -> None:
    assert Settings.from_env({}).workflow_sandbox == "off"
    assert isinstance(workflow_runner(Settings(workflow_sandbox="off")), UnsandboxedWorkflowRunner)
    strict = workflow_runner(Settings.from_env({"CAPSTAN_WORKFLOW_SANDBOX": "strict"}))
    assert isinstance(strict, SandboxedWorkflowRunner)
    # strict means no module of Capstan's is shared into the sandbox: restrictions apply to it
    assert not any(m.startswith("capstan") for m in strict.restrictions.passthrough_modules)


async def test_the_suite_runs_workflows_in_the_strict_sandbox(
    temporal: Client, settings: Settings
) -> None:
    async with httpx.AsyncClient() as http:
        worker = build_worker(temporal, load_worker_config(settings, os.environ), http)
    assert isinstance(worker._config["workflow_runner"], SandboxedWorkflowRunner)  # no accessor


async def test_the_worker_takes_its_sticky_timeout_from_the_settings(
    temporal: Client, settings: Settings
) -> None:
    configured = settings.model_copy(update={"sticky_timeout": 5.0})
    async with httpx.AsyncClient() as http:
        worker = build_worker(temporal, load_worker_config(configured, os.environ), http)
    assert worker._config["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=5)


@pytest.mark.parametrize("sandbox", ["off", "strict"])
async def test_runs_complete_on_either_runner(agent: Agent, sandbox: str) -> None:
    script = [say(call("list_dir", path=".")), say(call("finish", answer="listed"))]
    agent.configure(workflow_sandbox=sandbox)
    async with agent.serving(script) as live:
        first = await live.start(agent.spec("one"))
        second = await live.start(agent.spec("two"))
        results = [await live.client.result(first), await live.client.result(second)]
    assert [r.terminal_reason for r in results] == [TerminalReason.COMPLETED] * 2
