"""Both providers through a real server: streaming, fallback, compaction, overflow, live text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import FakeProvider, Fault, call, say
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server

TASK = "use the provider"


def anthropic_env(fake: FakeProvider) -> dict[str, str]:
    return {
        "CAPSTAN_MODEL": "anthropic:claude-fake",
        "ANTHROPIC_BASE_URL": fake.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "sk-ant-test-key-123456",
    }


async def test_anthropic_run_streams_and_round_trips_thinking(agent: Agent) -> None:
    script = [
        say(call("list_dir"), content="Looking.", reasoning="I should list first"),
        say(call("finish", answer="anthropic done"), reasoning="now finish"),
    ]
    run = await agent.run(script, env=anthropic_env, history="anthropic_stream", task=TASK)
    result, steps = run.result, run.steps
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "anthropic done"
    assert all(r["stream"] is True for r in run.requests)
    assistant = run.requests[1]["messages"][1]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "I should list first",
        "signature": "sig-0",
    }
    assert result.usage.cache_write_tokens == 50 and result.usage.cache_read_tokens == 50
    assert steps[0].reasoning == "I should list first" and steps[0].thought == "Looking."


async def test_openai_without_streaming(agent: Agent) -> None:
    script = [say(call("list_dir")), say(call("finish", answer="plain json"))]
    run = await agent.run(script, env={"CAPSTAN_STREAM": "0"}, task=TASK)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.output == "plain json"
    assert all("stream" not in r for r in run.requests)


async def test_cut_stream_is_retried(agent: Agent) -> None:
    script = [
        say(call("list_dir"), content="a longer reply that streams"),
        say(call("finish", answer="ok")),
    ]
    run = await agent.run(script, faults={0: Fault(cut=True)}, task=TASK)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.fake.steps_seen() == [0, 0, 1]


async def test_fallback_to_the_next_profile(agent: Agent, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.toml"
    down = {i: Fault(503, times=99) for i in range(5)}  # the worker's fake: the primary
    with FakeProvider([say(call("list_dir")), say(call("finish", answer="rescued"))]) as backup:

        def primary_then_backup(primary: FakeProvider) -> dict[str, str]:
            profiles.write_text(
                f'[profiles.primary]\nprovider = "openai"\nmodel = "p"\n'
                f'base_url = "{primary.base_url}"\nfallback = ["backup"]\n\n'
                f'[profiles.backup]\nprovider = "anthropic"\nmodel = "b"\n'
                f'base_url = "{backup.base_url.removesuffix("/v1")}"\n'
            )
            return {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "primary"}

        run = await agent.run(
            [], faults=down, env=primary_then_backup, history="fallback_model", task=TASK
        )
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.output == "rescued"
    assert len(run.requests) == 2  # the primary's retries, then the switch
    assert any("switched model default -> backup" in d for d in run.status.diagnostics)


async def test_compaction_keeps_a_long_run_inside_a_small_window(agent: Agent, tmp_path) -> None:
    profiles = tmp_path / "profiles.toml"
    agent.configure(tools_module="tests.sample_tools")
    steps = 12
    script = [say(call("big_output", size=6_000, seed=i)) for i in range(steps - 1)]
    script.append(say(call("finish", answer="survived")))

    def small_window(fake: FakeProvider) -> dict[str, str]:
        profiles.write_text(
            f'[profiles.small]\nprovider = "openai"\nmodel = "s"\nbase_url = "{fake.base_url}"\n'
            "context_window = 12000\nmax_output_tokens = 1000\n"
        )
        return {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "small"}

    run = await agent.run(
        script,
        env=small_window,
        history="compaction_small_window",
        task=TASK,
        max_steps=steps,
        allowed_tools=("big_output",),
    )
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result
    assert any("compacted the context" in d for d in run.status.diagnostics)
    sizes = [len(str(r["messages"])) // 4 for r in run.requests]
    assert max(sizes) < 12_000  # every request fit the window
    assert [s.step for s in run.steps] == list(range(1, steps + 1))  # nothing lost for audit


async def test_overflow_triggers_compaction_and_a_retry(agent: Agent) -> None:
    overflow = Fault(400, body='{"error": {"code": "context_length_exceeded"}}', times=1)
    script = [
        say(call("list_dir")),
        say(call("list_dir")),
        say(call("list_dir")),
        say(call("finish", answer="ok")),
    ]
    run = await agent.run(script, faults={2: overflow}, task=TASK, context={"keep_turns": 1})
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert len(run.fake.summaries) == 1
    assert any("compacted the context (summarize)" in d for d in run.status.diagnostics)
    retried = run.requests[-2]["messages"]
    assert any("Summary of the earlier steps" in str(m.get("content")) for m in retried)


async def test_overflow_twice_ends_prompt_too_long(agent: Agent) -> None:
    overflow = Fault(400, body='{"error": {"code": "context_length_exceeded"}}', times=99)
    run = await agent.run([say(call("list_dir"))], faults={1: overflow}, task=TASK)
    assert run.result.terminal_reason is TerminalReason.PROMPT_TOO_LONG


async def test_live_text_rides_on_heartbeats(agent: Agent) -> None:
    text = "streaming tokens arrive one by one " * 8
    script = [say(call("finish", answer="done"), content=text, chunk_delay=0.1)]
    async with agent.serving(script) as live:
        client = live.client
        run_id = await live.start(agent.spec(TASK))
        seen: list[dict[str, object]] = []
        for _ in range(100):
            progress = await client.live_text(run_id)
            if progress:
                seen.append(progress)
            if not await client.is_running(run_id):
                break
            await asyncio.sleep(0.1)
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert seen, "no streamed text was visible while the model replied"
    assert seen[-1]["step"] == 1 and seen[-1]["attempt"] == 1
    assert str(seen[-1]["tail"]) in text and int(seen[-1]["chars"]) > 0  # type: ignore[call-overload]


@hsettings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(garbage=st.binary(min_size=0, max_size=60))
async def test_fuzz_malformed_replies_end_runs_cleanly(agent: Agent, garbage: bytes) -> None:
    fault = Fault(200, body=garbage.decode("latin-1"), times=99)
    env = {"CAPSTAN_STREAM": "0"}
    run = await agent.run([], faults={0: fault}, env=env, timeout=30, task=TASK)
    assert run.result.terminal_reason in (
        TerminalReason.MODEL_ERROR,
        TerminalReason.COMPLETED,
        TerminalReason.CIRCUIT_BREAKER,
        TerminalReason.MAX_STEPS,
    )
