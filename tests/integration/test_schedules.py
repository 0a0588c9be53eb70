"""Schedules: `capstan schedule ...` on Temporal Schedules, against the real dev server.

A scheduled run is an ordinary run: here it waits for an approval when the schedule is
triggered again, and the overlap policy (skip) skips that second start. `describe` shows the
skip, the next times and the recent run with how it ended. Bad input is one line and exit 2.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from capstan.client.runs import CapstanClient
from capstan.client.schedules import ScheduleNotFoundError, Schedules
from capstan.core.spec import TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import FakeProvider, call, say
from capstan.workflows.agent import AgentWorkflow
from tests.integration.helpers import run_cli, running_worker
from tests.integration.steer_helpers import wait_for, wait_pending

pytestmark = pytest.mark.server


def _cli(settings: Settings, *args: str) -> Any:
    return asyncio.to_thread(run_cli, settings, "schedule", *args)


async def _describe(settings: Settings, name: str) -> dict[str, Any]:
    out = await _cli(settings, "describe", name, "--json")
    assert out.returncode == 0, out.stderr
    described: dict[str, Any] = json.loads(out.stdout)
    return described


@pytest.mark.slow
async def test_trigger_twice_with_overlap_skip(temporal: Client, settings: Settings) -> None:
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    client = CapstanClient(temporal, settings)
    script = [
        say(call("write_file", path="report.txt", content="x")),
        say(call("finish", answer="ok")),
    ]
    with FakeProvider(script) as fake:
        async with running_worker(temporal, settings, fake):
            made = await _cli(settings, "create", name, "--every", "1h", "--paused", "write it")
            assert made.returncode == 0, made.stderr
            assert "no worker" not in made.stderr
            assert (await _cli(settings, "trigger", name)).returncode == 0
            first = await wait_for(
                lambda: _describe(settings, name), lambda d: len(d["running"]) == 1
            )
            run_id = first["running"][0]
            assert run_id.startswith(f"schedule-{name}-")
            await wait_pending(client, run_id)  # the scheduled run waits for an approval
            assert (await _cli(settings, "trigger", name)).returncode == 0
            skipped = await wait_for(
                lambda: _describe(settings, name), lambda d: d["skipped_overlap"] == 1
            )
            await client.decide(run_id, "approve")
            result = await client.result(run_id)
            done = await wait_for(
                lambda: _describe(settings, name),
                lambda d: [r["terminal_reason"] for r in d["recent"]] == ["completed"],
            )
            text = await _cli(settings, "describe", name)
            history = await client.handle(run_id).fetch_history()
            listed = await wait_for(
                lambda: _cli(settings, "ls", "--json"),
                lambda out: name in out.stdout,
            )
    assert result.terminal_reason is TerminalReason.COMPLETED
    assert skipped["running"] == [run_id] and skipped["runs_started"] == 1
    assert done["recent"][0]["run_id"] == run_id and not done["running"]
    assert done["overlap"] == "skip" and done["task"] == "write it" and done["paused"]
    assert "skipped (overlap) 1" in text.stdout and f"{run_id}  completed" in text.stdout
    (row,) = [r for r in json.loads(listed.stdout) if r["name"] == name]
    assert row["paused"] and "every 1:00:00" in row["timing"]
    # a scheduled run is an ordinary run: its history replays against the current code
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=temporal.data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert replayed.replay_failure is None


@pytest.mark.slow
async def test_pause_unpause_delete_and_options(settings: Settings, temporal: Client) -> None:
    name = f"opts-{uuid.uuid4().hex[:6]}"
    schedules = Schedules(CapstanClient(temporal, settings))
    made = await _cli(
        settings, "create", name, "--cron", "0 2 * * *", "--tz", "Europe/Paris",
        "--jitter", "5m", "--catchup", "1h", "--overlap", "buffer-one", "summarise the logs",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "no worker is polling task queue" in made.stderr  # created all the same
    described = await schedules.describe(name)
    assert described.time_zone == "Europe/Paris" and described.jitter_seconds == 300
    assert described.catchup_seconds == 3600 and described.overlap == "buffer-one"
    assert described.next_runs and not described.paused and described.timing == "cron '0 2 * * *'"
    assert (await _cli(settings, "pause", name, "--note", "holiday")).returncode == 0
    paused = await schedules.describe(name)
    assert paused.paused and paused.note == "holiday"
    await schedules.unpause(name)
    assert not (await schedules.describe(name)).paused
    assert (await _cli(settings, "delete", name)).returncode == 0
    with pytest.raises(ScheduleNotFoundError, match=f"no schedule {name!r}"):
        await schedules.describe(name)


@pytest.mark.slow
async def test_bad_input_is_one_line(settings: Settings, tmp_path: Path) -> None:
    agents = tmp_path / "agents.toml"
    agents.write_text('[lister]\nallowed_tools = ["list_dir", "finish"]\n')
    cases = [
        (("create", "x1", "--cron", "not a cron", "task"), "schedule 'x1'"),
        (("create", "x3", "--every", "1h", "--agent", "nobody", "task"), "no agent 'nobody'"),
        (("create", "bad name", "--every", "1h", "task"), "bad schedule name"),
        (("describe", "no-such"), "no schedule 'no-such'"),
    ]
    for args, words in cases:
        out = await asyncio.to_thread(
            run_cli, settings, "schedule", *args, env={"CAPSTAN_AGENTS": str(agents)}
        )
        assert out.returncode == 2 and words in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
