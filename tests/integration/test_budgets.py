"""Budgets through a real server: each ends the run naming itself; a grant lets it go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.client.runs import CapstanClient
from capstan.core.spec import ActivityTuning, Budgets, GuardPolicy, RunSpec, TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import record_history, running_worker
from tests.integration.steer_helpers import wait_status

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=2)


def script(n: int = 8) -> list:
    return [
        say(call("list_dir", path="."))
        if i == 0
        else say(call("read_result", ref="0" * 64, offset=i))
        for i in range(n)
    ]


def priced_env(fake: FakeProvider, tmp_path: Path) -> dict[str, str]:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        f'[profiles.priced]\nprovider = "openai"\nmodel = "p"\nbase_url = "{fake.base_url}"\n'
        "context_window = 100000\nmax_output_tokens = 200\n"
        "prices = { input = 10.0, output = 30.0 }\n"
    )
    return {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "priced"}


@pytest.mark.parametrize(
    ("budgets", "name"),
    [
        (Budgets(max_tool_calls=3), "tool_calls"),
        (Budgets(max_input_tokens=600), "input_tokens"),
        (Budgets(max_output_tokens=300), "output_tokens"),
        (Budgets(max_cost_usd=0.012), "cost_usd"),
    ],
)
async def test_each_budget_ends_the_run(temporal, settings, tmp_path, budgets, name) -> None:
    guards = GuardPolicy(fruitless_abort=100, fruitless_nudge=100)
    with FakeProvider(script()) as fake:
        async with running_worker(temporal, settings, fake, env=priced_env(fake, tmp_path)):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(
                RunSpec(task="spend", tuning=FAST, budgets=budgets, guards=guards, max_steps=8)
            )
            result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED, result
    assert result.error is not None and result.error.startswith(f"budget {name} exhausted")
    assert result.usage.cost_usd > 0
    assert len(fake.requests) < 8


async def test_wall_time_budget(temporal, settings) -> None:
    slow = [say(call("list_dir"), hold=1.5), say(call("finish", answer="late"))]
    with FakeProvider(slow) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(
                RunSpec(task="hurry", tuning=FAST, budgets=Budgets(max_wall_seconds=1.0))
            )
            result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED
    assert "wall_seconds" in (result.error or "")
    assert len(fake.requests) == 1


async def test_wall_time_ends_a_wait_for_approval(temporal, settings) -> None:
    with FakeProvider([say(call("write_file", path="a", content="b"))]) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(
                RunSpec(task="wait", tuning=FAST, budgets=Budgets(max_wall_seconds=1.5))
            )
            result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.BUDGET_EXHAUSTED


async def test_budget_grant_lets_the_run_continue(temporal, settings, tmp_path) -> None:
    steps = [say(call("list_dir", path=".")), say(call("read_result", ref="0" * 64, offset=1))]
    steps.append(say(call("finish", answer="granted")))
    with FakeProvider(steps) as fake:
        async with running_worker(temporal, settings, fake, env=priced_env(fake, tmp_path)):
            client = CapstanClient(temporal, settings)
            budgets = Budgets(max_tool_calls=1, wait_for_grant=True)
            run_id = await client.start_run(RunSpec(task="spend", tuning=FAST, budgets=budgets))
            status = await wait_status(
                client, run_id, lambda s: "budget:tool_calls" in s.waiting_for
            )
            await client.grant_budget(run_id, "tool_calls", 5, checked=True)
            result = await client.result(run_id)
            await record_history(client.handle(run_id), "budget_grant")
    assert status.step == 1
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "granted"
    assert result.usage.tool_calls == 2


async def test_circuit_breaker_ends_a_looping_run(temporal, settings) -> None:
    with FakeProvider([say(call("list_dir")) for _ in range(6)]) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(RunSpec(task="loop", tuning=FAST))
            result = await client.result(run_id)
            await record_history(client.handle(run_id), "identical_call_breaker")
    assert result.terminal_reason is TerminalReason.CIRCUIT_BREAKER
    assert (result.error or "").startswith("identical_call")
    nudged = [m for m in fake.requests[3]["messages"] if m["role"] == "user"][-1]
    assert "same call with the same arguments" in nudged["content"]


async def test_worker_finish_guard_refuses_once(temporal, settings) -> None:
    settings = settings.model_copy(update={"finish_guard": "tests.sample_tools:finish_guard"})
    script = [say(call("finish", answer="dunno")), say(call("finish", answer="about 42"))]
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            result = await client.result(await client.start_run(RunSpec(task="guess", tuning=FAST)))
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "about 42"
    refusal = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"][-1]
    assert "step 1: cite the number from the log" in refusal["content"]
