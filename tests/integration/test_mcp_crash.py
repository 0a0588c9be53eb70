"""A worker SIGKILLed in the middle of an MCP call: the run completes on a new worker, which
starts its own server processes, and the effect is applied once per idempotency key."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.mcp_fixtures import GIT_ENV, git_repo, git_server, kit_server, write_config
from tests.integration.scripted_agent import Agent, Live
from tests.integration.test_crash import kill_and_recover

pytestmark = [pytest.mark.server, pytest.mark.crash, pytest.mark.slow]

TUNING = ActivityTuning(model_heartbeat=2.0, tool_heartbeat=2.0, model_initial_retry=0.2)


async def test_worker_killed_during_an_mcp_call(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = git_repo(tmp_path)
    effects = tmp_path / "effects.jsonl"
    config = write_config(tmp_path, kit_server(tmp_path, timeout=60), git_server(repo))
    # the worker processes read their MCP servers and the variables they pass on from here
    monkeypatch.setenv("CAPSTAN_MCP", str(config))
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    script = [
        say(call("kit__record", label="once", linger=30.0)),  # the worker dies during this call
        say(call("git__git_status", repo_path=str(repo))),
        say(call("finish", answer="recorded")),
    ]

    async def effect_applied(live: Live, run_id: str) -> None:
        for _ in range(600):  # the server applied the effect; the call has not returned
            if effects.exists() and effects.read_text():
                return
            await asyncio.sleep(0.05)

    # the crash workers also load tests.sample_tools, whose sensitive tool would (rightly) bring
    # the Rule of Two into play: offer only what the run uses
    tools = ("kit__*", "git__git_status")
    spec = RunSpec(
        task="record once", tuning=TUNING, auto_approve=True, max_steps=5, allowed_tools=tools
    )
    got = await kill_and_recover(agent, script, spec, effect_applied)
    assert got.result.terminal_reason is TerminalReason.COMPLETED, got.result.error
    key = f"{got.run_id}/1/call_0_0"
    assert [json.loads(line) for line in effects.read_text().splitlines()] == [
        {"key": key, "label": "once", "run": got.run_id}
    ]
    (recorded,) = [
        c.observation for s in got.steps for c in s.tool_calls if c.name == "kit__record"
    ]
    assert recorded == f"already recorded once (key {key})"
    (status,) = [
        c.observation for s in got.steps for c in s.tool_calls if c.name == "git__git_status"
    ]
    assert status is not None and "staged.txt" in status
