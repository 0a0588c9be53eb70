"""Budgets through a real server: each ends the run naming itself; a grant lets it go on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from capstan.core.spec import Budgets, GuardPolicy, TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.scripted_agent import Agent
from tests.integration.steer_helpers import wait_status

pytestmark = pytest.mark.server


def script(n: int = 8) -> list:
    return [
        say(call("list_dir", path="."))
        if i == 0
        else say(call("read_result", ref="0" * 64, offset=i))
        for i in range(n)
    ]


def priced(tmp_path: Path) -> Callable[[FakeProvider], dict[str, str]]:
    """A worker environment whose model is a priced profile on the running fake."""

    def env(fake: FakeProvider) -> dict[str, str]:
        profiles = tmp_path / "profiles.toml"
        profiles.write_text(
            f'[profiles.priced]\nprovider = "openai"\nmodel = "p"\nbase_url = "{fake.base_url}"\n'
            "context_window = 100000\nmax_output_tokens = 200\n"
            "prices = { input = 10.0, output = 30.0 }\n"
        )
        return {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "priced"}

    return env


@pytest.mark.parametrize(
    ("budgets", "name"),
    [
        (Budgets(max_tool_calls=3), "tool_calls"),
        (Budgets(max_input_tokens=600), "input_tokens"),
        (Budgets(max_output_tokens=300), "output_tokens"),
        (Budgets(max_cost_usd=0.012), "cost_usd"),
    ],
)
async def test_each_budget_ends_the_run(agent: Agent, tmp_path, budgets, name) -> None:
    guards = GuardPolicy(fruitless_abort=100, fruitless_nudge=100)
    run = await agent.run(
        script(), env=priced(tmp_path), task="spend", budgets=budgets, guards=guards, max_steps=8
    )
    result = run.result
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED, result
    assert result.error is not None and result.error.startswith(f"budget {name} exhausted")
    assert result.usage.cost_usd > 0
    assert len(run.requests) < 8


async def test_wall_time_budget(agent: Agent) -> None:
    slow = [say(call("list_dir"), hold=1.5), say(call("finish", answer="late"))]
    run = await agent.run(slow, task="hurry", budgets=Budgets(max_wall_seconds=1.0))
    assert run.result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert "wall_seconds" in (run.result.error or "")
    assert len(run.requests) == 1


async def test_wall_time_ends_a_wait_for_approval(agent: Agent) -> None:
    script = [say(call("write_file", path="a", content="b"))]
    run = await agent.run(script, task="wait", budgets=Budgets(max_wall_seconds=1.5))
    assert run.result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED


async def test_budget_grant_lets_the_run_continue(agent: Agent, tmp_path) -> None:
    steps = [say(call("list_dir", path=".")), say(call("read_result", ref="0" * 64, offset=1))]
    steps.append(say(call("finish", answer="granted")))
    async with agent.serving(steps, env=priced(tmp_path)) as live:
        budgets = Budgets(max_tool_calls=1, wait_for_grant=True)
        run_id = await live.start(agent.spec("spend", budgets=budgets))
        status = await wait_status(
            live.client, run_id, lambda s: "budget:tool_calls" in s.waiting_for
        )
        await live.client.grant_budget(run_id, "tool_calls", 5, checked=True)
        run = await live.finish(run_id, history="budget_grant")
    assert status.step == 1
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.output == "granted" and run.result.usage.tool_calls == 2


async def test_circuit_breaker_ends_a_looping_run(agent: Agent) -> None:
    script = [say(call("list_dir")) for _ in range(6)]
    run = await agent.run(script, task="loop", history="identical_call_breaker")
    assert run.result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert (run.result.error or "").startswith("identical_call")
    nudged = run.messages(3, "user")[-1]
    assert "same call with the same arguments" in nudged["content"]


async def test_worker_finish_guard_refuses_once(agent: Agent) -> None:
    agent.configure(finish_guard="tests.sample_tools:finish_guard")
    script = [say(call("finish", answer="dunno")), say(call("finish", answer="about 42"))]
    run = await agent.run(script, task="guess")
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.output == "about 42"
    refusal = run.messages(1, "tool")[-1]
    assert "step 1: cite the number from the log" in refusal["content"]
