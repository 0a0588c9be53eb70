"""Both providers through a real server: streaming, fallback, compaction, overflow, live text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from capstan.client.runs import CapstanClient
from capstan.client.transcript import build_transcript
from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.testing.fake_provider import FakeProvider, Fault, call, say
from tests.integration.helpers import record_history, running_worker

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=2)


def spec(**kw: object) -> RunSpec:
    kw.setdefault("tuning", FAST)
    return RunSpec(task="use the provider", **kw)  # type: ignore[arg-type]


def anthropic_env(fake: FakeProvider) -> dict[str, str]:
    return {
        "CAPSTAN_MODEL": "anthropic:claude-fake",
        "ANTHROPIC_BASE_URL": fake.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "sk-ant-test-key-123456",
    }


async def test_anthropic_run_streams_and_round_trips_thinking(temporal, settings) -> None:
    script = [
        say(call("list_dir"), content="Looking.", reasoning="I should list first"),
        say(call("finish", answer="anthropic done"), reasoning="now finish"),
    ]
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake, env=anthropic_env(fake)):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(spec())
            result = await client.result(run_id)
            steps = build_transcript(client.content(), await client.transcript_view(run_id))
            await record_history(client.handle(run_id), "anthropic_stream")
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "anthropic done"
    assert all(r["stream"] is True for r in fake.requests)
    assistant = fake.requests[1]["messages"][1]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "I should list first",
        "signature": "sig-0",
    }
    assert result.usage.cache_write_tokens == 50 and result.usage.cache_read_tokens == 50
    assert steps[0].reasoning == "I should list first" and steps[0].thought == "Looking."


async def test_openai_without_streaming(temporal, settings) -> None:
    script = [say(call("list_dir")), say(call("finish", answer="plain json"))]
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake, env={"CAPSTAN_STREAM": "0"}):
            client = CapstanClient(temporal, settings)
            result = await client.result(await client.start_run(spec()))
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "plain json"
    assert all("stream" not in r for r in fake.requests)


async def test_cut_stream_is_retried(temporal, settings) -> None:
    script = [
        say(call("list_dir"), content="a longer reply that streams"),
        say(call("finish", answer="ok")),
    ]
    with FakeProvider(script, faults={0: Fault(cut=True)}) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            result = await client.result(await client.start_run(spec()))
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert fake.steps_seen() == [0, 0, 1]


async def test_fallback_to_the_next_profile(temporal, settings, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.toml"
    with (
        FakeProvider([], faults={i: Fault(503, times=99) for i in range(5)}) as down,
        FakeProvider([say(call("list_dir")), say(call("finish", answer="rescued"))]) as backup,
    ):
        profiles.write_text(
            f'[profiles.primary]\nprovider = "openai"\nmodel = "p"\nbase_url = "{down.base_url}"\n'
            'fallback = ["backup"]\n\n'
            f'[profiles.backup]\nprovider = "anthropic"\nmodel = "b"\n'
            f'base_url = "{backup.base_url.removesuffix("/v1")}"\n'
        )
        env = {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "primary"}
        async with running_worker(temporal, settings, down, env=env):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(spec())
            result = await client.result(run_id)
            status = await client.status(run_id)
            await record_history(client.handle(run_id), "fallback_model")
    assert result.terminal_reason is TerminalReason.COMPLETED and result.output == "rescued"
    assert len(down.requests) == 2  # the primary's retries, then the switch
    assert any("switched model default -> backup" in d for d in status.diagnostics)


async def test_compaction_keeps_a_long_run_inside_a_small_window(
    temporal, settings, tmp_path
) -> None:
    profiles = tmp_path / "profiles.toml"
    settings = settings.model_copy(update={"tools_module": "tests.sample_tools"})
    steps = 12
    script = [say(call("big_output", size=6_000, seed=i)) for i in range(steps - 1)]
    script.append(say(call("finish", answer="survived")))
    with FakeProvider(script) as fake:
        profiles.write_text(
            f'[profiles.small]\nprovider = "openai"\nmodel = "s"\nbase_url = "{fake.base_url}"\n'
            "context_window = 12000\nmax_output_tokens = 1000\n"
        )
        env = {"CAPSTAN_PROFILES": str(profiles), "CAPSTAN_MODEL": "small"}
        async with running_worker(temporal, settings, fake, env=env):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(spec(max_steps=steps, allowed_tools=("big_output",)))
            result = await client.result(run_id)
            status = await client.status(run_id)
            view = await client.transcript_view(run_id)
            transcript = build_transcript(client.content(), view)
            await record_history(client.handle(run_id), "compaction_small_window")
    assert result.terminal_reason is TerminalReason.COMPLETED, result
    assert any("compacted the context" in d for d in status.diagnostics)
    sizes = [len(str(r["messages"])) // 4 for r in fake.requests]
    assert max(sizes) < 12_000  # every request fit the window
    assert [s.step for s in transcript] == list(range(1, steps + 1))  # nothing lost for audit


async def test_overflow_triggers_compaction_and_a_retry(temporal, settings) -> None:
    overflow = Fault(400, body='{"error": {"code": "context_length_exceeded"}}', times=1)
    script = [
        say(call("list_dir")),
        say(call("list_dir")),
        say(call("list_dir")),
        say(call("finish", answer="ok")),
    ]
    with FakeProvider(script, faults={2: overflow}) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(spec(context={"keep_turns": 1}))
            result = await client.result(run_id)
            status = await client.status(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert len(fake.summaries) == 1
    assert any("compacted the context (summarize)" in d for d in status.diagnostics)
    retried = fake.requests[-2]["messages"]
    assert any("Summary of the earlier steps" in str(m.get("content")) for m in retried)


async def test_overflow_twice_ends_prompt_too_long(temporal, settings) -> None:
    overflow = Fault(400, body='{"error": {"code": "context_length_exceeded"}}', times=99)
    with FakeProvider([say(call("list_dir"))], faults={1: overflow}) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            result = await client.result(await client.start_run(spec()))
    assert result.terminal_reason is TerminalReason.PROMPT_TOO_LONG


async def test_live_text_rides_on_heartbeats(temporal, settings) -> None:
    text = "streaming tokens arrive one by one " * 8
    script = [say(call("finish", answer="done"), content=text, chunk_delay=0.1)]
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(spec())
            seen: list[dict[str, object]] = []
            for _ in range(100):
                progress = await client.live_text(run_id)
                if progress:
                    seen.append(progress)
                if not await client.is_running(run_id):
                    break
                await asyncio.sleep(0.1)
            result = await client.result(run_id)
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert seen, "no streamed text was visible while the model replied"
    assert seen[-1]["step"] == 1 and seen[-1]["attempt"] == 1
    assert str(seen[-1]["tail"]) in text and int(seen[-1]["chars"]) > 0  # type: ignore[call-overload]


@hsettings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(garbage=st.binary(min_size=0, max_size=60))
async def test_fuzz_malformed_replies_end_runs_cleanly(temporal, settings, garbage: bytes) -> None:
    fault = Fault(200, body=garbage.decode("latin-1"), times=99)
    with FakeProvider([], faults={0: fault}) as fake:
        async with running_worker(temporal, settings, fake, env={"CAPSTAN_STREAM": "0"}):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(spec())
            result = await asyncio.wait_for(client.result(run_id), 30)
    assert result.terminal_reason in (
        TerminalReason.MODEL_ERROR,
        TerminalReason.COMPLETED,
        TerminalReason.CIRCUIT_BREAKER,
        TerminalReason.MAX_STEPS,
    )
