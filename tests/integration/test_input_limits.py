"""No input a client can send wedges a run: large text, floods of signals, repeated ids.

Each test here failed on the code before its fix (see the report of issue 11): three 1 MB
messages made every workflow task fail with PAYLOADS_TOO_LARGE; Temporal refused the
10,001st signal to a paused run, so `resume` and `cancel` could no longer reach it.
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import WorkflowUpdateFailedError

from capstan.audit.history import load_histories
from capstan.client.runs import CapstanClient
from capstan.core.limits import INBOX_MESSAGES, SIGNALS_BEFORE_CONTINUE
from capstan.core.spec import ContextPolicy, RunSpec, TerminalReason
from capstan.core.steering import STEER, LiveMessage
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import call, say
from tests.integration.scripted_agent import Agent, Live
from tests.integration.steer_helpers import wait_status

pytestmark = pytest.mark.server

MB = 1024 * 1024


def _megabyte(n: int) -> str:
    """A megabyte of text that reads like text (for realistic token counts)."""
    words = f"message {n}: the quick brown fox {n} jumps over the lazy dog; "
    return (words * (MB // len(words) + 1))[:MB]


async def _failed_tasks(client: CapstanClient, run_id: str) -> list[str]:
    """The causes of every failed workflow task, across the run's continue-as-new chain."""
    histories = await load_histories(client.client, run_id)
    return [
        WorkflowTaskFailedCause.Name(e.workflow_task_failed_event_attributes.cause)
        for h in histories
        for e in h.events
        if e.HasField("workflow_task_failed_event_attributes")
    ]


async def _caught_up(client: CapstanClient, run_id: str, timeout: float = 30.0) -> None:
    """Until the run has no workflow task pending (it has taken every signal sent so far)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        desc = await client.handle(run_id).describe()
        if not desc.raw_description.HasField("pending_workflow_task"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run_id} did not catch up in {timeout}s")


async def _send_many(settings: Settings, run_id: str, count: int, batch: int = 200) -> None:
    """`count` messages from a client of its own, `batch` at a time concurrently; between
    batches the run takes them."""
    client = await CapstanClient.connect(settings)
    for start in range(0, count, batch):
        ids = range(start, min(start + batch, count))
        await asyncio.gather(*(client.send_message(run_id, f"m{i}", f"m{i}") for i in ids))
        await _caught_up(client, run_id)


async def _paused_after_first_reply(live: Live, spec: RunSpec) -> str:
    """A run paused while its first model call is in flight: it waits before its tools run."""
    run_id = await live.start(spec)
    await asyncio.to_thread(live.fake.wait_for_step, 0)
    await live.client.pause(run_id)
    await wait_status(live.client, run_id, lambda s: s.paused and s.step == 1)
    return run_id


async def test_megabyte_messages_to_a_paused_run_reach_the_model(agent: Agent, workspace) -> None:
    script = [say(call("list_dir"), hold=1.0), say(call("finish", answer="read them"))]
    texts = [_megabyte(i) for i in range(3)]
    # pages of 8,000 tokens: three of the default 30,000 overflow the fake's 128k window
    spec = agent.spec(context=ContextPolicy(tool_result_max_tokens=8_000))
    async with agent.serving(script) as live:
        run_id = await _paused_after_first_reply(live, spec)
        for i, text in enumerate(texts):
            await live.client.send_message(run_id, text, f"big-{i}")
        await live.client.resume(run_id)
        run = await live.finish(run_id, timeout=90)
        failed = await _failed_tasks(live.client, run_id)
    assert failed == []  # before: PAYLOADS_TOO_LARGE, again and again
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    seen = [m["content"] for m in run.messages(1, "user")][1:]
    assert len(seen) == 3
    for text, content in zip(texts, seen, strict=True):
        # a page of the message, and the ref to read the rest with
        assert content.startswith(text[:10_000])
        assert hashlib.sha256(text.encode()).hexdigest() in content
        assert "read_result" in content
        assert len(content) < len(text)


async def test_oversized_inline_text_is_refused_not_carried(agent: Agent, workspace) -> None:
    """A client that does not store large text first: the update is rejected with a clear
    error, the raw signal is refused with a diagnostic, and the run goes on."""
    script = [say(call("list_dir"), hold=1.0), say(call("finish", answer="done"))]
    big = "z" * MB
    async with agent.serving(script) as live:
        run_id = await _paused_after_first_reply(live, agent.spec())
        handle = live.client.handle(run_id)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(STEER, LiveMessage(text=big, id="raw-update"))
        assert "blob store" in str(refused.value.cause)
        await handle.signal(STEER, LiveMessage(text=big, id="raw-signal"))
        status = await wait_status(
            live.client, run_id, lambda s: any("raw-signal" in d for d in s.diagnostics)
        )
        await live.client.resume(run_id)
        run = await live.finish(run_id, timeout=60)
    (note,) = [d for d in status.diagnostics if "raw-signal" in d]
    assert "blob store" in note and len(note) < 600
    assert run.result.terminal_reason is TerminalReason.COMPLETED
    assert [m["content"] for m in run.messages(1, "user")][1:] == []


@pytest.mark.slow
async def test_twelve_thousand_messages_to_a_paused_run(agent: Agent, workspace) -> None:
    """Temporal refuses signals after ~10,000 per execution: a paused run continues as new
    before that, carrying what it queued, so `resume` and `cancel` still reach it; the id sent
    first and again after 12,000 others is applied once, across the continue-as-new.

    The messages go 200 at a time, concurrently; between batches the run takes them (its
    workflow task completes). A sender that outruns the run's workflow tasks for good only makes
    Temporal fail those tasks (more than 100 signals buffered) until it pauses: see
    `capstan.core.limits`."""
    script = [say(call("list_dir"), hold=1.0), say(call("write_file", path="a.txt", content="x"))]
    async with agent.serving(script) as live:
        client = live.client
        run_id = await _paused_after_first_reply(live, agent.spec())
        await client.send_message(run_id, "the first", "first")
        # from another thread, as another process would: the worker's event loop stays free
        await asyncio.to_thread(asyncio.run, _send_many(agent.settings, run_id, 12_000))
        await client.send_message(run_id, "the first, again", "first")
        await client.resume(run_id)
        await wait_status(client, run_id, lambda s: s.waiting_for == ["approval"], timeout=60)
        await client.cancel(run_id, reason="enough")
        run = await live.finish(run_id, timeout=60)
        failed = await _failed_tasks(client, run_id)
    # the server may shed load (a task force-closed with 100 signals buffered), or refuse a
    # continue-as-new while signals it has not delivered wait (UNHANDLED_COMMAND: the run takes
    # them and decides again, so none is lost); nothing else
    benign = ("FORCE_CLOSE_COMMAND", "UNHANDLED_COMMAND")
    assert [cause for cause in failed if not cause.endswith(benign)] == []
    assert run.result.terminal_reason is TerminalReason.CANCELLED
    assert run.result.error == "enough"
    # a continue-as-new of a paused run with more than 200 waiting first spills them (an
    # activity), and signals keep arriving meanwhile: an execution may take somewhat more than
    # SIGNALS_BEFORE_CONTINUE, still far below the server's 10,000 (every message is counted below)
    assert run.status.continued >= 12_000 // (2 * SIGNALS_BEFORE_CONTINUE)
    users = [m["content"] for m in run.messages(1, "user")][1:]
    assert users[0] == "the first" and "the first, again" not in users
    # the model gets the oldest INBOX_MESSAGES a call; the run was cancelled at the next step,
    # so the rest are in its result, kept in the blob store for whoever reads them
    assert len(users) == INBOX_MESSAGES and all(u.startswith("m") for u in users[1:])
    assert len(set(users)) == len(users)
    assert run.result.unread is not None
    assert len(users) + run.result.unread.count == 12_001
