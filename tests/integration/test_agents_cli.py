"""`capstan run --agent NAME` and `--spec FILE`: the resolved spec is what runs and what the
run's history records, so a later edit of the file changes nothing about the run."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client

from capstan.client.runs import CapstanClient
from capstan.core.spec import TerminalReason
from capstan.core.workflow_io import StartInput
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import run_cli, running_worker

pytestmark = pytest.mark.server


def _cli(settings: Settings, agents: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(settings, *args, env={"CAPSTAN_AGENTS": str(agents)})


async def test_run_an_agent_and_a_spec_file(
    temporal: Client, settings: Settings, tmp_path: Path
) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text(
        '[lister]\nsystem_prompt = "You list things."\nallowed_tools = ["list_dir", "finish"]\n'
        "max_steps = 4\nbudgets = { max_tool_calls = 5 }\n"
    )
    spec_file = tmp_path / "run.json"
    spec_file.write_text(json.dumps({"task": "from a file", "max_steps": 3, "run_id": "spec-1"}))
    script = [say(call("list_dir")), say(call("finish", answer="listed"))]
    client = CapstanClient(temporal, settings)
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            out = await asyncio.to_thread(
                _cli, settings, agents, "run", "list it", "--agent", "lister", "--wait", "--json"
            )
            assert out.returncode == 0, out.stderr
            run_id = json.loads(out.stdout)["run_id"]
            agents.write_text("[lister]\nmax_steps = 1\n")  # a later edit changes nothing
            history = await client.handle(run_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (payload,) = started.input.payloads
    spec = StartInput.model_validate_json(payload.data).spec
    assert spec.agent == "lister" and spec.max_steps == 4 and spec.budgets.max_tool_calls == 5
    assert spec.system_prompt == "You list things." and spec.task == "list it"
    assert fake.requests[0]["messages"][0]["content"] == "You list things."
    with FakeProvider([say(call("finish", answer="ok"))]) as fake:
        async with running_worker(temporal, settings, fake):
            out = await asyncio.to_thread(_cli, settings, agents, "run", "--spec", str(spec_file))
            assert out.returncode == 0 and out.stdout.strip() == "spec-1", out.stderr
            result = await client.result("spec-1")
    assert result.terminal_reason is TerminalReason.COMPLETED


async def test_bad_agent_input_is_one_line(settings: Settings, tmp_path: Path) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text("[lister]\nmax_stepz = 4\n")
    out = await asyncio.to_thread(_cli, settings, agents, "run", "t", "--agent", "lister")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"capstan: {agents}: agent 'lister': unknown field 'max_stepz' (did you mean 'max_steps'?)"
    )
    agents.write_text("[lister]\nmax_steps = 4\n")
    out = await asyncio.to_thread(_cli, settings, agents, "run", "t", "--agent", "nobody")
    assert out.returncode == 2 and "no agent 'nobody'" in out.stderr
