"""Accepted means delivered (issue 34): every live message the server took reaches the model
once, however many arrive while the run acts or is paused.

Before the inbox queue, 10,000 messages sent 16 at a time to an acting run were all accepted,
but only ~7,800 reached the model: the rest met a full inbox of 200 and were dropped with a
diagnostic the sender never saw. Here the messages go from another thread's client, 16 at a
time, as a chat front end or a webhook bridge would send them; the script keeps calling a tool
until the model has seen the message sent after all the others, then finishes.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from capstan.client.runs import CapstanClient
from capstan.core.limits import INBOX_MESSAGES
from capstan.core.spec import GuardPolicy, TerminalReason
from capstan.runtime.config import Settings
from capstan.testing.fake_provider import Reply, call, say
from tests.integration.helpers import run_cli
from tests.integration.scripted_agent import Agent, Run
from tests.integration.steer_helpers import wait_status

pytestmark = pytest.mark.server

FLOOD = 10_000
LAST = "the last message"
#: the same call every step, for as long as the flood lasts: no breaker or nudge applies
PATIENT = GuardPolicy(
    identical_call_nudge=100_000,
    identical_call_abort=100_000,
    similar_nudge=100_000,
    similar_abort=100_000,
    fruitless_nudge=100_000,
    fruitless_abort=100_000,
)


def _until_last_is_read(step: int, messages: list[dict[str, Any]]) -> Reply:
    """A tool call a step (held a little, so messages pile up meanwhile) until the model has
    been given LAST, which the test sends after every other: then it finishes."""
    if any(m["role"] == "user" and m.get("content") == LAST for m in messages):
        return say(call("finish", answer="read them all"))
    return say(call("list_dir"), hold=0.05)


async def _flood(
    settings: Settings, run_id: str, count: int, concurrency: int = 16
) -> tuple[set[str], list[str]]:
    """Send `count` messages with the client's default send, `concurrency` at a time: the ids
    the client was told were accepted, and the errors of those it was told were not."""
    client = await CapstanClient.connect(settings)
    gate = asyncio.Semaphore(concurrency)
    accepted: set[str] = set()
    refused: list[str] = []

    async def one(i: int) -> None:
        async with gate:
            try:
                await client.send_message(run_id, f"live-{i}", f"live-{i}")
            except Exception as exc:  # a refusal the sender saw is allowed
                refused.append(f"m{i}: {exc}")
            else:
                accepted.add(f"live-{i}")

    await asyncio.gather(*(one(i) for i in range(count)))
    return accepted, refused


def _delivered(run: Run) -> collections.Counter[str]:
    """Each live message across every model request, counted once per request that holds it;
    a message given twice shows as a request that holds it twice."""
    seen: collections.Counter[str] = collections.Counter()
    for request in run.requests:
        live = _live(request)
        assert len(live) == len(set(live)), "a request holds a live message twice"
        seen.update(set(live))
    return seen


def _live(request: dict[str, Any]) -> list[str]:
    texts = [m.get("content") for m in request["messages"] if m["role"] == "user"]
    return [t for t in texts if isinstance(t, str) and t.startswith("live-")]


def _check(run: Run, accepted: set[str], sent: int, refused: list[str]) -> None:
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    seen = _delivered(run)
    missing = accepted - set(seen)
    assert not missing, f"{len(missing)} accepted messages never reached the model"
    assert set(seen) <= accepted  # nothing the run made up or the client saw refused
    assert len(accepted) + len(refused) == sent
    # at most INBOX_MESSAGES new live messages a model call: each request's input stays small
    before: set[str] = set()
    for request in run.requests:
        live = set(_live(request))
        assert len(live - before) <= INBOX_MESSAGES
        before = live
    assert run.result.unread is None and run.status.messages_waiting == 0


@pytest.mark.slow
async def test_ten_thousand_messages_to_an_acting_run_all_reach_the_model(
    agent: Agent, workspace
) -> None:
    async with agent.serving(_until_last_is_read) as live:
        run_id = await live.start(agent.spec(max_steps=500, guards=PATIENT))
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        accepted, refused = await asyncio.to_thread(
            asyncio.run, _flood(agent.settings, run_id, FLOOD)
        )
        await live.client.send_message(run_id, LAST, "last")
        run = await live.finish(run_id, timeout=300)
    _check(run, accepted, FLOOD, refused)


@pytest.mark.slow
async def test_ten_thousand_messages_to_a_paused_run_all_reach_the_model(
    agent: Agent, workspace
) -> None:
    async with agent.serving(_until_last_is_read) as live:
        client = live.client
        run_id = await live.start(agent.spec(max_steps=500, guards=PATIENT))
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        await client.pause(run_id)
        await wait_status(client, run_id, lambda s: s.paused)
        accepted, refused = await asyncio.to_thread(
            asyncio.run, _flood(agent.settings, run_id, FLOOD)
        )
        # a validated update past the bound is taken too, not refused for room
        ack = await client.send_message(run_id, "live-checked", "live-checked", checked=True)
        assert ack is not None and ack.applied
        accepted.add("live-checked")
        # every message waits, and the run has continued as new (kept what it could not
        # carry in the blob store) once the flood let it
        status = await wait_status(
            client,
            run_id,
            lambda s: s.messages_waiting == len(accepted) and s.continued >= 1,
            timeout=120,
        )
        assert status.paused
        await client.send_message(run_id, LAST, "last")
        await client.resume(run_id)
        run = await live.finish(run_id, timeout=300)
    _check(run, accepted, FLOOD + 1, refused)


async def test_a_run_cancelled_through_temporal_keeps_what_it_never_read(
    agent: Agent, workspace
) -> None:
    """A Temporal cancellation (not Capstan's `cancel`) of a paused run holding more than it
    can return inline: the result still accounts for every message, the rest kept in the
    blob store (the spill after the cancellation runs to its end)."""
    async with agent.serving(_until_last_is_read) as live:
        client = live.client
        run_id = await live.start(agent.spec(max_steps=500, guards=PATIENT))
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        await client.pause(run_id)
        await wait_status(client, run_id, lambda s: s.paused)
        accepted, refused = await asyncio.to_thread(
            asyncio.run, _flood(agent.settings, run_id, 3 * INBOX_MESSAGES)
        )
        assert not refused
        await wait_status(client, run_id, lambda s: s.messages_waiting == len(accepted))
        shown = await asyncio.to_thread(run_cli, agent.settings, "status", run_id)
        assert f"messages waiting: {len(accepted)}" in shown.stdout, shown.stdout
        await client.handle(run_id).cancel()
        result = await asyncio.wait_for(client.result(run_id), 60)
    assert result.terminal_reason is TerminalReason.CANCELLED
    tail = [m.content for m in result.tail if m.origin == "live"]
    kept = result.unread.count if result.unread is not None else 0
    assert len(tail) <= INBOX_MESSAGES and len(tail) + kept == len(accepted)


async def test_a_flood_across_continue_as_new_is_read_in_order(agent: Agent, workspace) -> None:
    """Sent one after another to a paused run that continues as new every step: the model gets
    them in the order they were sent, at most INBOX_MESSAGES a call, though some waited in the
    blob store across executions. Recorded as a history (`inbox_queue`): the patch, the spill
    and the takes replay."""
    count = 2 * INBOX_MESSAGES + 50
    async with agent.serving(_until_last_is_read) as live:
        client = live.client
        spec = agent.spec(max_steps=50, guards=PATIENT, continue_as_new_every=1)
        run_id = await live.start(spec)
        await asyncio.to_thread(live.fake.wait_for_step, 0)
        await client.pause(run_id)
        await wait_status(client, run_id, lambda s: s.paused)
        for i in range(count):
            await client.send_message(run_id, f"live-{i}", f"live-{i}")
        await client.send_message(run_id, LAST, "last")
        await wait_status(client, run_id, lambda s: s.messages_waiting == count + 1)
        await client.resume(run_id)
        run = await live.finish(run_id, history="inbox_queue", timeout=120)
    assert run.result.terminal_reason is TerminalReason.COMPLETED, run.result.error
    order: list[str] = []
    for request in run.requests:
        order += [t for t in _live(request) if t not in order]
    assert order == [f"live-{i}" for i in range(count)]
    assert run.status.continued >= 3
