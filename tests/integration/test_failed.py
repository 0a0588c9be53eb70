"""A bug in the pure loop ends the run `failed` with the error, never a stuck workflow task."""

from __future__ import annotations

import asyncio

import pytest

from capstan.client.runs import CapstanClient
from capstan.core import loop
from capstan.core.spec import ActivityTuning, RunSpec, TerminalReason
from capstan.testing.fake_provider import FakeProvider, call, say
from tests.integration.helpers import running_worker

pytestmark = pytest.mark.server

FAST = ActivityTuning(model_initial_retry=0.1, model_max_retry=0.2, model_max_attempts=2)


def _boom(*args: object, **kwargs: object) -> object:
    raise RuntimeError("boom in the loop")


async def test_loop_bug_ends_the_run_failed(temporal, settings, monkeypatch) -> None:
    monkeypatch.setattr(loop, "_on_tools_finished", _boom)
    with FakeProvider([say(call("list_dir")), say(call("finish", answer="never"))]) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            result = await asyncio.wait_for(
                client.result(await client.start_run(RunSpec(task="t", tuning=FAST))), 30
            )
    assert result.terminal_reason is TerminalReason.FAILED
    assert result.error == "internal error: RuntimeError: boom in the loop"
    assert result.steps == 1


async def test_loop_bug_inside_a_signal_handler_ends_the_run_failed(
    temporal, settings, monkeypatch
) -> None:
    monkeypatch.setattr(loop, "apply_input", _boom)
    with FakeProvider([say(call("write_file", path="a", content="b"))]) as fake:
        async with running_worker(temporal, settings, fake):
            client = CapstanClient(temporal, settings)
            run_id = await client.start_run(RunSpec(task="t", tuning=FAST))
            await asyncio.to_thread(fake.wait_for_step, 0)
            await client.send_message(run_id, "this input hits the bug")
            result = await asyncio.wait_for(client.result(run_id), 30)
    assert result.terminal_reason is TerminalReason.FAILED
    assert "boom in the loop" in (result.error or "")
