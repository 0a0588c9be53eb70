"""History grows linearly: a 200-step run with 20 KB tool outputs costs the same per step at the
end as at the start, and no payload comes near Temporal's limits."""

from __future__ import annotations

import pytest

from capstan.core.spec import GuardPolicy, RunSpec, TerminalReason
from capstan.testing.fake_provider import Reply, call, say
from capstan.testing.history_stats import measure_history
from tests.integration.scripted_agent import Agent

pytestmark = [pytest.mark.server, pytest.mark.slow]

STEPS = 200


def long_script(step: int, messages: list[dict[str, object]]) -> Reply:
    if step < STEPS - 1:
        return say(call("big_output", size=20_000, seed=step), content=f"step {step}")
    return say(call("finish", answer=f"read {step} outputs"))


async def test_history_per_step_is_flat(agent: Agent) -> None:
    agent.configure(tools_module="tests.sample_tools")
    spec = RunSpec(
        task="read many outputs",
        max_steps=STEPS,
        observation_max_chars=1000,
        # 200 same-sized outputs look like a loop to the similar-results breaker
        guards=GuardPolicy(similar_nudge=10_000, similar_abort=10_000),
    )
    run = await agent.run(long_script, spec)
    result = run.result
    assert result.terminal_reason is TerminalReason.COMPLETED, result
    assert result.steps == STEPS
    stats = await measure_history(agent.temporal, run.run_id)
    assert len(stats.step_bytes) == STEPS
    assert stats.runs >= 4  # continue-as-new every 50 steps by default
    early, late = stats.mean_bytes(10, 30), stats.mean_bytes(170, 190)
    assert late <= 1.5 * early, (early, late)
    assert stats.largest_event_bytes < 256 * 1024
    # the model really saw every large output, cut to the configured budget
    last = run.requests[-1]["messages"]
    observations = [m for m in last if m["role"] == "tool"]
    assert len(observations) == STEPS - 1
    assert all("read_result(ref=" in m["content"] for m in observations)
