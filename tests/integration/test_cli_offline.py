"""The CLI never hangs and never lies: closed runs and runs with no worker answer from their
result and history; unknown ids, bad input and missing workers are one clear line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from capstan.audit.follow import HistoryFollower
from capstan.client.runs import CapstanClient, RunNotFoundError
from capstan.core.spec import RunSpec, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, Reply, call, say
from tests.integration.helpers import HISTORIES, run_cli, running_worker

pytestmark = pytest.mark.server


def _script(step: int, messages: list[dict[str, Any]]) -> Reply:
    """Runs whose task says "finish" list the workspace and finish; the others keep listing."""
    task = next(str(m.get("content")) for m in messages if m.get("role") == "user")
    if "finish" in task:
        return [say(call("list_dir")), say(call("finish", answer="done"))][min(step, 1)]
    return say(call("list_dir", path="."), content=f"looking again ({step})")


async def _finished_runs(temporal: Client, settings: Settings) -> CapstanClient:
    """Three runs that end `completed`, `max_steps` and `cancelled`; then the worker stops."""
    client = CapstanClient(temporal, settings)
    with FakeProvider(_script) as fake:
        async with running_worker(temporal, settings, fake):
            await client.start_run(RunSpec(task="finish", run_id="off-done"))
            assert (await client.result("off-done")).terminal_reason is TerminalReason.COMPLETED
            await client.start_run(RunSpec(task="loop", run_id="off-steps", max_steps=2))
            assert (await client.result("off-steps")).terminal_reason is TerminalReason.MAX_STEPS
            await client.start_run(RunSpec(task="cancel me", run_id="off-cancel"))
            await client.cancel("off-cancel", "enough")
            assert (await client.result("off-cancel")).terminal_reason is TerminalReason.CANCELLED
    return client


async def test_closed_runs_answer_with_no_worker(temporal: Client, settings: Settings) -> None:
    await _finished_runs(temporal, settings)
    for run_id, reason in (
        ("off-done", "completed"),
        ("off-steps", "max_steps"),
        ("off-cancel", "cancelled"),
    ):
        out = await asyncio.to_thread(run_cli, settings, "status", run_id, "--json")
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        assert status["phase"] == "finished" and status["terminal_reason"] == reason
        assert status["source"] == "result"
    text = await asyncio.to_thread(run_cli, settings, "status", "off-steps")
    assert "phase finished" in text.stdout and "terminal max_steps" in text.stdout
    transcript = await asyncio.to_thread(run_cli, settings, "transcript", "off-done", "--json")
    assert transcript.returncode == 0, transcript.stderr
    steps = json.loads(transcript.stdout)
    assert [c["name"] for s in steps for c in s["tool_calls"]] == ["list_dir", "finish"]
    assert steps[0]["tool_calls"][0]["observation"]  # the tool result is there, from history


async def test_ls_shows_and_filters_terminal_reasons(temporal: Client, settings: Settings) -> None:
    await _finished_runs(temporal, settings)
    out = await asyncio.to_thread(run_cli, settings, "ls", "--json", "--limit", "500")
    reasons = {r["run_id"]: r["terminal_reason"] for r in json.loads(out.stdout)}
    assert reasons["off-done"] == "completed" and reasons["off-steps"] == "max_steps"
    assert reasons["off-cancel"] == "cancelled"
    only = await asyncio.to_thread(run_cli, settings, "ls", "--reason", "max_steps")
    assert "off-steps\tmax_steps" in only.stdout and "off-done" not in only.stdout


async def test_a_running_run_with_no_worker_answers_from_history(
    temporal: Client, settings: Settings
) -> None:
    client = CapstanClient(temporal, settings)
    run_id = await client.start_run(RunSpec(task="nobody is here"))
    await client.pause(run_id)
    status = await client.status(run_id)
    assert status.source == "history" and status.as_of_event
    assert status.paused and status.waiting_for == ["resume"] and status.terminal_reason is None
    out = await asyncio.to_thread(run_cli, settings, "status", run_id)
    assert out.returncode == 0 and "no worker answered" in out.stdout
    assert (await client.transcript_view(run_id)).conversation is None
    pending = await asyncio.to_thread(run_cli, settings, "pending", run_id)
    assert pending.returncode == 0, pending.stderr
    await client.cancel(run_id)


async def test_unknown_run_ids_are_one_line_everywhere(settings: Settings) -> None:
    commands = [
        ("status", "nope"),
        ("transcript", "nope"),
        ("pending", "nope"),
        ("approve", "nope", "r/1/c", "--hash", "h"),
        ("deny", "nope", "r/1/c", "--hash", "h", "--reason", "no"),
        ("cancel", "nope"),
        ("send", "nope", "hi"),
        ("replay", "nope"),
        ("watch", "nope"),
        ("audit", "nope"),
    ]
    outs = await asyncio.gather(*(asyncio.to_thread(run_cli, settings, *c) for c in commands))
    for command, out in zip(commands, outs, strict=True):
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert out.stderr.strip() == "capstan: no run 'nope'", (command, out.stderr)


async def test_steering_an_ended_run_says_so(temporal: Client, settings: Settings) -> None:
    await _finished_runs(temporal, settings)
    out = await asyncio.to_thread(run_cli, settings, "pause", "off-done")
    assert out.returncode == 2 and "has already ended (completed)" in out.stderr


async def test_bad_edit_json_is_refused_before_sending(settings: Settings) -> None:
    out = await asyncio.to_thread(run_cli, settings, "approve", "r", "x/1/c", "--edit", "{bad")
    assert out.returncode == 2 and "not valid JSON" in out.stderr and "sent" not in out.stdout
    out = await asyncio.to_thread(run_cli, settings, "approve", "r", "x/1/c", "--edit", "[1]")
    assert out.returncode == 2 and "must be a JSON object" in out.stderr


async def test_run_without_a_worker_warns_but_starts(temporal: Client, settings: Settings) -> None:
    out = await asyncio.to_thread(run_cli, settings, "run", "later", "--id", "no-worker-yet")
    assert out.returncode == 0 and out.stdout.strip() == "no-worker-yet"
    assert f"no worker is polling task queue '{settings.task_queue}'" in out.stderr
    client = CapstanClient(temporal, settings)
    assert await client.is_running("no-worker-yet")
    await client.cancel("no-worker-yet")
    with pytest.raises(RunNotFoundError):
        await client.status("never-started")


async def test_watch_follows_with_long_polls_not_rereads(
    temporal: Client, settings: Settings
) -> None:
    await _finished_runs(temporal, settings)
    follower = await HistoryFollower.start(temporal, "off-done")
    assert follower is not None
    while await follower.poll(wait=1.0):
        pass
    assert follower.closed
    assert follower.requests <= 3  # one read of a closed run, not one per poll interval
    out = await asyncio.to_thread(run_cli, settings, "watch", "off-done")
    assert out.returncode == 0 and "run_ended" in out.stdout
    lines = out.stdout.splitlines()
    again = await asyncio.to_thread(run_cli, settings, "watch", "off-done", "--from", "2")
    assert again.stdout.splitlines() == lines[2:]


async def test_a_follower_sees_each_event_once_as_a_run_grows(
    temporal: Client, settings: Settings
) -> None:
    client = CapstanClient(temporal, settings)
    run_id = await client.start_run(RunSpec(task="grow"))
    follower = await HistoryFollower.start(temporal, run_id)
    assert follower is not None
    for i in range(5):
        await client.send_message(run_id, f"m{i}")
        assert await follower.poll(wait=5.0)
    ids = [e.event_id for e in follower.histories[-1].events]
    assert ids == list(range(1, len(ids) + 1))  # each event once, in order
    assert follower.requests <= 6  # one read, then at most one long poll per new event
    await client.cancel(run_id)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{nope", "is not a Temporal history in JSON"),
        ('{"events": []}', "is not a run's history: it does not begin with the run's start"),
        ("headless", "is not a run's history: it does not begin with the run's start"),
        ("no-run-id", "is not a run's history: its start event names no run id"),
    ],
)
def test_replay_refuses_what_is_not_a_history_in_one_line(
    settings: Settings, tmp_path: Path, content: str, problem: str
) -> None:
    """The SDK's replayer panics and never returns on a history without its start event: the
    CLI checks first (`timeout` makes a hang fail this test rather than stall the suite)."""
    stored = json.loads((HISTORIES / "wait_fresh.json").read_text())
    if content == "headless":
        stored["events"] = stored["events"][1:]
        content = json.dumps(stored)
    elif content == "no-run-id":
        del stored["events"][0]["workflowExecutionStartedEventAttributes"]["originalExecutionRunId"]
        content = json.dumps(stored)
    path = tmp_path / "history.json"
    path.write_text(content)
    done = run_cli(settings, "replay", "--file", str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"capstan: {path} {problem}")
    assert done.stderr.count("\n") == 1  # one line, no traceback
