"""A long run in a small window: compactions are rare and write what changed, not copies.

A shortened `bench/long_run.py`: 600 steps of 500-byte tool outputs in a 32k-token window, so
the window fills and is compacted several times (prunes, then a summary once stubs pile up).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from capstan.core.spec import GuardPolicy, TerminalReason
from capstan.testing.fake_provider import FakeProvider, Reply, call, say
from capstan.testing.run_stats import blob_bytes, run_stats, unique_content_bytes
from tests.integration.scripted_agent import Agent

pytestmark = [pytest.mark.server, pytest.mark.slow]

STEPS = 600
WINDOW = 32_000


def window_profile(profiles: Path) -> Any:
    def env(fake: FakeProvider) -> dict[str, str]:
        profiles.write_text(
            f'[profiles.small]\nprovider = "openai"\nmodel = "s"\nbase_url = "{fake.base_url}"\n'
            f"context_window = {WINDOW}\nmax_output_tokens = 1000\n"
        )
        return {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "small"}

    return env


async def test_a_long_run_compacts_rarely_and_stores_little_beyond_its_content(
    agent: Agent, tmp_path: Path
) -> None:
    agent.configure(tools_module="tests.sample_tools")
    calls = itertools.count()  # the fake counts steps by assistant messages: a summary resets it

    def script(step: int, messages: list[dict[str, Any]]) -> Reply:
        n = next(calls)
        if n < STEPS - 1:
            return say(call("big_output", size=500, seed=n))
        return say(call("finish", answer="done"))

    with FakeProvider(script) as fake:
        run = await agent.run(
            fake,
            env=window_profile(tmp_path / "profiles.toml"),
            task="produce output",
            max_steps=STEPS,
            allowed_tools=("big_output",),
            guards=GuardPolicy(similar_nudge=10_000, similar_abort=10_000),
        )
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    stats = await run_stats(agent.temporal, run.run_id)
    assert stats.model_calls == STEPS
    assert stats.compactions["prune"] >= 1  # the window did fill
    assert stats.rewrites <= STEPS / 20 + 3, stats
    assert stats.compaction_steps <= STEPS / 20 + 3, stats

    stored = blob_bytes(agent.settings.blob_dir)
    unique = unique_content_bytes(run.client.content(), run.view.conversation)
    assert stored <= 3 * unique, (stored, unique)
    assert max(len(str(r["messages"])) // 4 for r in run.requests) < WINDOW
    assert [s.step for s in run.steps] == list(range(1, STEPS + 1))  # all of it, for audits
