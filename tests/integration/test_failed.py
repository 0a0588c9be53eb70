"""A bug in the pure loop ends the run `failed` with the error, never a stuck workflow task."""

from __future__ import annotations

import asyncio

import pytest

from capstan.core import loop
from capstan.core.spec import TerminalReason
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent

pytestmark = pytest.mark.server


def _boom(*args: object, **kwargs: object) -> object:
    raise RuntimeError("boom in the loop")


async def test_loop_bug_ends_the_run_failed(agent: Agent, monkeypatch) -> None:
    monkeypatch.setattr(loop, "_on_tools_finished", _boom)
    script = [say(call("list_dir")), say(call("finish", answer="never"))]
    result = (await agent.run(script, task="t", timeout=30)).result
    assert result.terminal_reason is TerminalReason.FAILED
    assert result.error == "internal error: RuntimeError: boom in the loop"
    assert result.steps == 1


async def test_loop_bug_inside_a_signal_handler_ends_the_run_failed(
    agent: Agent, monkeypatch
) -> None:
    monkeypatch.setattr(loop, "apply_input", _boom)
    async with agent.serving([say(call("write_file", path="a", content="b"))]) as live:
        run_id = await live.start(agent.spec("t"))
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        await live.client.send_message(run_id, "this input hits the bug")
        run = await live.finish(run_id, timeout=30)
    assert run.result.terminal_reason is TerminalReason.FAILED
    assert "boom in the loop" in (run.result.error or "")
