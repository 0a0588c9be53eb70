"""`capstan watch` on a run that delegates: the children's events show under the parent,
labelled with their path, in text and in `--json`."""

from __future__ import annotations

import asyncio
import json

import pytest

from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent
from tests.integration.test_delegation import lead_spec, tree

pytestmark = pytest.mark.server


async def test_watch_shows_a_childs_events_under_its_parent(agent: Agent) -> None:
    script = tree(
        lead=[
            say(call("delegate", agent="researcher", task="list the workspace")),
            say(call("finish", answer="done")),
        ],
        researcher=[say(call("list_dir", path=".")), say(call("finish", answer="two files"))],
    )
    async with agent.serving(script) as live:
        run_id = await live.start(lead_spec(agent))
        run = await live.finish(run_id)
        text = await asyncio.to_thread(run_cli, agent.settings, "watch", run_id)
        as_json = await asyncio.to_thread(run_cli, agent.settings, "watch", run_id, "--json")
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    child = [line for line in lines if "[researcher-1.0]" in line]
    assert any("tool_started step 1" in line and "list_dir" in line for line in child), lines
    assert any("run_ended" in line and "completed" in line for line in child), lines
    assert any(line.endswith("run_ended  completed") for line in lines if "[" not in line)
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert {e.get("child") for e in events} == {None, "researcher-1.0"}
    assert [e["kind"] for e in events if "child" not in e][-1] == "run_ended"
