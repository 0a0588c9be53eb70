"""Runs through a real dev server, a real worker and a fake provider on a real socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from capstan.core.spec import ActivityTuning, FinishMode, RunSpec, TerminalReason
from capstan.host.config import load_worker_config
from capstan.testing.fake_provider import FakeProvider, Fault, call, say
from capstan.worker import build_worker
from tests.integration.helpers import history_events, record_history
from tests.integration.scripted_agent import Agent, Run

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=3)


def spec(task: str = "do the task", **kw: object) -> RunSpec:
    kw.setdefault("auto_approve", True)
    return RunSpec(task=task, tuning=FAST, **kw)  # type: ignore[arg-type]


PARALLEL_SCRIPT = [
    say(call("list_dir"), content="Looking around."),
    say(
        call("read_file", path="a.txt"),
        call("read_file", path="b.txt"),
        call("write_file", path="out/c.txt", content="merged"),
        content="Reading both files and writing the merge.",
    ),
    say(call("finish", answer="a+b"), content="All done."),
]


async def _parallel_run(agent: Agent, workspace: Path, **worker: object) -> Run:
    (workspace / "a.txt").write_text("alpha")
    (workspace / "b.txt").write_text("beta")
    return await agent.run(PARALLEL_SCRIPT, spec(), worker=worker)


async def test_multi_step_run_with_parallel_tools(agent: Agent, workspace: Path) -> None:
    run = await _parallel_run(agent, workspace)
    result, steps = run.result, run.steps
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert result.output == "a+b" and result.steps == 3
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 4
    assert [s.step for s in steps] == [1, 2, 3]
    assert steps[0].thought == "Looking around."
    assert "a.txt (5 bytes)" in (steps[0].tool_calls[0].observation or "")
    observed = {c.arguments: c.observation for c in steps[1].tool_calls}
    assert observed['{"path": "a.txt"}'] == "alpha"
    assert observed['{"path": "b.txt"}'] == "beta"
    assert (workspace / "out" / "c.txt").read_text() == "merged"
    # the model saw every observation, in the turn's order
    assert [m["tool_call_id"] for m in run.messages(2, "tool")] == [
        "call_0_0",
        "call_1_0",
        "call_1_1",
        "call_1_2",
    ]
    # the three tools of step 2 were scheduled before any of them completed
    events = await history_events(run.handle)
    kinds = [e["eventType"] for e in events]
    scheduled = [i for i, e in enumerate(events) if _is_run_tool(e)]
    assert len(scheduled) == 4
    # the three calls of step 2 are scheduled by one workflow task, before any completes
    assert "EVENT_TYPE_ACTIVITY_TASK_COMPLETED" not in kinds[scheduled[1] : scheduled[3]]
    await record_history(run.handle, "parallel_tools")


def _is_run_tool(event: dict) -> bool:
    attrs = event.get("activityTaskScheduledEventAttributes")
    return bool(attrs) and attrs["activityType"]["name"] == "run_tool"


async def test_run_replays_on_every_task(agent: Agent, workspace: Path) -> None:
    run = await _parallel_run(agent, workspace, max_cached_workflows=0)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert len(run.steps) == 3


async def test_secrets_never_enter_history(agent: Agent, workspace: Path) -> None:
    run = await _parallel_run(agent, workspace)
    history = json.dumps(await history_events(run.handle))
    assert "sk-test-secret-key" not in history
    assert "OPENAI" not in history and "127.0.0.1" not in history


async def test_text_finish_mode(agent: Agent) -> None:
    script = [say(content="plain answer")]
    run = await agent.run(script, spec(finish_mode=FinishMode.TEXT), history="text_mode")
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.output == "plain answer"


async def test_max_steps_and_tool_errors_are_observed(agent: Agent, workspace: Path) -> None:
    script = [
        say(call("read_file", path="missing.txt")),
        say(call("read_file", path="../etc/passwd")),
        say(call("read_file", wrong_arg=1)),
        say(call("no_such_tool")),
    ]
    run = await agent.run(script, spec(max_steps=4), history="max_steps_errors")
    assert run.result.terminal_reason is TerminalReason.MAX_STEPS
    obs = [s.tool_calls[0].observation or "" for s in run.steps]
    assert obs[0].startswith("Error (error): FileNotFoundError")
    assert "leaves the workspace" in obs[1]
    assert obs[2].startswith("Error (invalid_arguments)") and "path" in obs[2]
    assert "unknown tool 'no_such_tool'" in obs[3]


async def test_rate_limit_is_retried_with_retry_after(agent: Agent) -> None:
    faults = {0: Fault(429, headers=(("retry-after", "0.2"),), times=1)}
    run = await agent.run([say(call("finish", answer="ok"))], spec(), faults=faults)
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.fake.steps_seen() == [0, 0]


@pytest.mark.parametrize(
    ("status", "attempts", "text"),
    [(401, 1, "HTTP 401"), (500, 3, "HTTP 500"), (404, 1, "HTTP 404")],
)
async def test_model_errors_end_the_run(agent: Agent, status, attempts, text) -> None:
    body = '{"error": {"message": "bad key sk-test-secret-key-123456"}}'
    faults = {0: Fault(status, body=body, times=99)}
    run = await agent.run([say(call("finish", answer="never"))], spec(), faults=faults)
    assert run.result.terminal_reason is TerminalReason.MODEL_ERROR
    assert run.result.error is not None and text in run.result.error
    assert "sk-test-secret" not in run.result.error
    assert len(run.requests) == attempts


async def test_dead_provider_ends_with_model_error(agent: Agent) -> None:
    dead = FakeProvider([])
    with dead:
        pass  # started and stopped: the port now refuses connections
    result = (await agent.run(dead, spec())).result
    assert result.terminal_reason is TerminalReason.MODEL_ERROR
    assert result.error is not None and "unreachable" in result.error


async def test_no_model_configured_says_what_to_set(agent: Agent) -> None:
    worker_env: dict[str, str] = {}  # no fake provider either: nothing names a model
    async with (
        httpx.AsyncClient() as http,
        build_worker(agent.temporal, load_worker_config(agent.settings, worker_env), http),
    ):
        client = agent.client
        result = await client.result(await client.start_run(spec()))
    assert result.terminal_reason is TerminalReason.MODEL_ERROR
    assert result.error is not None and "CAPSTAN_MODEL=openai:" in result.error


async def test_malformed_model_output_ends_cleanly(agent: Agent) -> None:
    faults = {0: Fault(200, body='{"choices": "nope"}', times=99)}
    run = await agent.run([], spec(), faults=faults, history="malformed_model_output")
    assert run.result.terminal_reason is TerminalReason.MODEL_ERROR
    assert run.result.error is not None and "malformed" in run.result.error


async def test_cancel_signal_ends_run_cancelled(agent: Agent) -> None:
    script = [say(call("list_dir"), hold=1.0), say(call("finish", answer="too late"))]
    async with agent.serving(script) as live:
        run_id = await live.start(spec())
        await _wait_for(live.fake)
        await live.client.cancel(run_id, reason="operator stop")
        run = await live.finish(run_id, history="cancel_signal")
    assert run.result.terminal_reason is TerminalReason.CANCELLED
    assert run.result.error == "operator stop"
    assert run.fake.steps_seen() == [0]


async def test_temporal_cancellation_ends_run_cancelled(agent: Agent) -> None:
    script = [say(call("list_dir"), hold=1.0), say(call("finish", answer="too late"))]
    async with agent.serving(script) as live:
        run_id = await live.start(spec())
        await _wait_for(live.fake)
        await live.client.handle(run_id).cancel()
        run = await live.finish(run_id)
    assert run.result.terminal_reason is TerminalReason.CANCELLED


async def test_continue_as_new_carries_the_run(agent: Agent, workspace: Path) -> None:
    script = [say(call("list_dir", path=f"d{i}")) for i in range(5)]
    script.append(say(call("finish", answer="done")))
    run = await agent.run(script, spec(continue_as_new_every=2), history="continued_as_new")
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert run.result.steps == 6 and run.status.continued == 2 and run.result.continued == 2
    assert [s.step for s in run.steps] == [1, 2, 3, 4, 5, 6]
    # after each continue-as-new the model still received the whole conversation
    assert [len(r["messages"]) for r in run.requests] == [2, 4, 6, 8, 10, 12]


async def _wait_for(fake: FakeProvider) -> None:
    for _ in range(200):
        if fake.arrived.is_set():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the model was never called")
